"""Every multi-device cell of the strategy matrix, for GPT and BERT, against one device: the shared run and checks
of ``test_cells_multidevice_jax.py`` and ``test_cells_multidevice_torch.py`` (two files, so that a parallel test
run can take the two frameworks on different workers).

fp32 cells (``+remat``, ``+replicate-batch``) equal the framework's one-device baseline on the same global batch
within 1e-5 relative per step (BERT: and the held-out accuracy its ``predict`` gives, before and after) (the difference is only the order of the gradient sums); bf16 cells are within
2e-2 of the one-device fp32 losses and differ from them; ``pmap+nosync`` replicas drift apart. Each framework's
cells run in one process (JAX: 2 simulated CPU devices) or one torchrun launch of 2 ranks (tests/distributed/
cells_run.py), so the cells do not each pay a process start.

What each cell's record would say of its devices (``trainer.report()``, check_devices): the batch really split
over the 2 devices; data-parallel replicas (mesh-dp, pmap, DDP) bit-identical after the steps, no parameter
sharded; FSDP holding half the params+optimizer bytes per device that data parallelism holds (only the scalar
step counters stay whole), every parameter sharded; no warning but the machine's conditions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from twinbench.record import CONDITION_WARNINGS

SCRIPT = Path(__file__).with_name("cells_run.py")
RTOL = 1e-5


def _run(framework: str, tmp: Path) -> dict:
    out = tmp / f"{framework}.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2] / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    if framework == "jax":
        cmd = [sys.executable, str(SCRIPT), "jax", str(out)]
        env["JAX_NUM_CPU_DEVICES"] = "2"
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               str(SCRIPT), "torch", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def run_cells(framework: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """The losses of every multi-device cell of ``framework`` for both families (cells_run.py)."""
    return _run(framework, tmp_path_factory.mktemp(f"cells-{framework}"))


def check_cell(results: dict[str, dict], fam: str, framework: str, cell: str) -> None:
    res = results[fam]
    ref = res["jit" if framework == "jax" else "eager"]
    got = res[cell]
    if fam == "bert":  # held-out accuracy before and after, by the trainer's predict: as on one device
        (*got, acc0, acc1), (*ref, ref0, ref1) = got, ref
        assert 0 <= acc0 <= 1 and 0 <= acc1 <= 1
        if "+bf16" not in cell:
            assert (acc0, acc1) == (ref0, ref1)
    assert len(got) == len(ref) == 4
    if fam == "gpt":  # 4 steps of the LM visibly train; BERT's classification loss stays near ln 2 that early
        assert got[-1] < got[0]
    if "+bf16" in cell:
        np.testing.assert_allclose(got, ref, rtol=2e-2)
        assert max(abs(a - b) for a, b in zip(got, ref, strict=True)) > 1e-7, "bf16 compute had no effect"
    else:
        np.testing.assert_allclose(got, ref, rtol=RTOL, err_msg=f"{fam} {framework}/{cell} vs 1 device")


def check_devices(results: dict[str, dict], fam: str, cell: str, dp: str, fsdp: str) -> None:
    """The record fields of a multi-device cell (see the module docstring); ``dp``/``fsdp``: the framework's
    data-parallel and fully sharded cells, for the state-per-device comparison."""
    rep = results[fam][f"{cell}:report"]
    assert rep["device_count"] == 2
    for b in rep["sharding"]["batch"]:
        assert b["sharded"] and b["bytes_per_device"] * 2 == b["bytes"], b
    assert [w for w in rep["warnings"] if not w.startswith(CONDITION_WARNINGS)] == []
    base = cell.split("+")[0]
    if base in ("mesh-dp", "pmap", "ddp"):
        assert rep["sharding"]["replicas_max_abs_diff"] == 0.0
        assert not any(e["sharded"] for e in rep["sharding"]["params"]["entries"])
    if cell == fsdp:
        full = results[fam][f"{dp}:report"]
        assert full["state_bytes_per_device"] == full["sharding"]["state_bytes_total"]
        ratio = rep["state_bytes_per_device"] / full["state_bytes_per_device"]
        assert 0.49 < ratio < 0.51, ratio
        params = rep["sharding"]["params"]
        assert params["bytes_per_device"] * 2 == params["bytes"]
        assert all(e["sharded"] for e in params["entries"])
