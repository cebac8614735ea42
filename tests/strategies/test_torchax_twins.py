"""jax:torchax on the twins: each family's PyTorch module, run by torchax inside the JAX step, trains as torch
eager does. One fresh process (tests/strategies/torchax_child.py) runs every family: torchax changes global
torch settings on import, so the test process never imports it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import parity_cells
import pytest

CHILD = Path(__file__).with_name("torchax_child.py")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("torchax") / "runs.json"
    p = subprocess.run([sys.executable, str(CHILD), str(out)], capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("family", parity_cells.FAMILIES)
def test_torchax_trains_each_twin_as_torch_eager_does(runs, family):
    r = runs[family]
    eager = r["eager"]
    assert len(eager) == 10 and eager[-1] < eager[0]  # ten steps that train
    for name in parity_cells.TORCHAX_EQUAL:  # fp32: the same losses, step by step
        assert r[name] == pytest.approx(eager, rel=1e-5), name
    assert r["weights_keys_equal"] and r["shapes_equal"] and r["weights_changed"]  # weights() in the canonical layout
    assert r["decay"] and all(k.startswith("model.") for k in r["decay"])  # the decay mask is on torch names


@pytest.mark.parametrize("family", parity_cells.FAMILIES)
def test_torchax_bf16_is_on_and_close(runs, family):
    r = runs[family]
    for name in parity_cells.TORCHAX_BF16:
        assert r[name] == pytest.approx(r["eager"], rel=2e-2), name
        assert r[name] != pytest.approx(r["torchax"], rel=1e-6), name  # bf16 compute really on


@pytest.mark.parametrize("family", parity_cells.FAMILIES)
def test_torchax_remat_checkpoints_every_block(runs, family):
    assert runs[family]["checkpoints"] == runs[family]["layers"]


def test_a_torchax_record_keeps_torch_and_torchax_versions(runs):
    assert {"jax", "torch", "torchax"} <= set(runs["versions"])


@pytest.mark.parametrize("precision", ["fp32", "+bf16"])
def test_fused_loss_gives_the_aten_loss_and_gradients_without_log_softmax(runs, precision):
    """``+fused-loss`` lowers F.cross_entropy as the JAX twins' loss: the same loss and gradients as torchax's own
    log_softmax + nll_loss (tiny GPT, one batch, the same weights), and no log_softmax left in its program."""
    r = runs["fused_loss"][precision]
    tol = 1e-6 if precision == "fp32" else 2e-2  # bf16: the same bf16 logits, fp32 losses summed in another order
    assert r["same_keys"] and r["loss"] <= tol and r["grad"] <= 10 * tol
    assert r["aten_log_softmax"] and not r["fused_log_softmax"]


@pytest.mark.parametrize("case", ["label_smoothing", "weight", "ignore_index"])
def test_fused_loss_computes_torchs_cross_entropy_where_it_covers_the_call_and_where_it_does_not(runs, case):
    """A call +fused-loss does not cover (label smoothing, a class weight) runs torchax's own lowering; one it
    covers (ignore_index, a sum) the fused one: torch's value either way."""
    assert runs["fused_loss_fallback"][case] < 1e-5

