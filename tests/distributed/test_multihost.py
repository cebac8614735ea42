"""The multi-host path, on one machine: two twinbench processes on 127.0.0.1 form one run.

Each "host" is a ``twinbench compare --devices 2`` that learns its place in the run only from the environment
of task I of a 2-task SLURM job step (``SLURM_JOB_ID``, ``SLURM_NTASKS``, ``SLURM_PROCID``, ``SLURM_NODEID``,
``SLURM_LOCALID``, ``SLURM_STEP_NODELIST``), as ``srun twinbench compare ...`` inside an allocation gives it
(distributed/cluster.py); the explicit ``--num-processes/--process-id/--coordinator`` flags take the same path
(tests/distributed/test_cluster.py). JAX joins through ``jax.distributed.initialize`` (gloo collectives between
the CPU processes); PyTorch through ``torchrun --nnodes 2`` with a c10d rendezvous on the first host, launched by
each host's runner. With 2 devices in all (1 per process) and a global batch of 8, both must reproduce the
single-process one-device loss trajectory (relative 1e-5 per step, as in the single-host tests).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from dist_helpers import TINY, free_port

from twinbench.record import as_record

RTOL = 1e-5
#: each host's --timeout: a run takes ~15 s (~45 s on a loaded 2-core machine); a hang fails with its record's
#: "timed out" error and the host's output instead of stalling the suite
HOST_TIMEOUT_S = 120
pytestmark = pytest.mark.slow  # two processes per run, each joining a distributed runtime


def two_hosts(tmp_path: Path, framework: str, strategy: str) -> list[dict]:
    port = free_port()
    procs, outs = [], []
    for pid in range(2):
        out = tmp_path / f"host{pid}"
        cmd = [sys.executable, "-m", "twinbench.cli", "compare", "--preset", "tiny", "--framework", framework,
               "--strategies", strategy, "--devices", "2", "--out", str(out), "--timeout", str(HOST_TIMEOUT_S),
               *[a for k, v in TINY.items() for a in (f"--{k}", str(v))]]
        slurm = {"SLURM_JOB_ID": "4242", "SLURM_NTASKS": "2", "SLURM_PROCID": str(pid), "SLURM_NODEID": str(pid),
                 "SLURM_LOCALID": "0", "SLURM_STEP_NODELIST": "127.0.0.1", "MASTER_PORT": str(port)}
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      env={**os.environ, **slurm}))
        outs.append(out)
    records = []
    for pid, (proc, out) in enumerate(zip(procs, outs, strict=True)):
        try:
            _, err = proc.communicate(timeout=HOST_TIMEOUT_S + 60)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            pytest.fail(f"{framework} 2-host run: host {pid} still running {HOST_TIMEOUT_S + 60} s after its start")
        lines = (out / "results.jsonl").read_text().splitlines() if (out / "results.jsonl").exists() else []
        assert lines, f"no record from {out}: {err[-2000:]}"
        record = as_record(json.loads(lines[-1])).flat()
        record["stderr_tail"] = err[-2000:]
        records.append(record)
    return records


@pytest.mark.parametrize(("framework", "strategy"), [("jax", "mesh-fsdp"), ("torch", "ddp")])
def test_two_processes_agree_with_one(tmp_path, one_device, framework, strategy):
    records = two_hosts(tmp_path, framework, strategy)
    ref = one_device[framework]["losses"]
    for pid, r in enumerate(records):
        assert r["status"] == "ok", f"host {pid}: {r['error']}\n{r['stderr_tail']}"
        assert r["device_count"] == 2
        np.testing.assert_allclose(r["losses"], ref, rtol=RTOL, err_msg=f"{framework}/{strategy} host {pid}")
    mesh = records[0]["sharding"]["mesh"]
    assert ("2 process(es)" in mesh) if framework == "jax" else ("2 node(s)" in mesh), mesh
