"""Every single-device cell of the strategy matrix against its framework's baseline, for GPT and BERT.

The runs come from ``tests/parity_cells.py`` (what the matrix test counts as covered). Tolerances: JAX fp32
cells equal ``jit`` within 2e-5 relative per step (scan-layers reorders the layer loop; scan-steps is the same
program); torch fp32 cells equal ``eager`` within 1e-6 (remat recomputes the same ops) or 1e-4 (Inductor
reorders float32 arithmetic); bf16 cells within 2e-2 relative of fp32, yet different from it.

Cold torch.compile runs: four in all (the compiled cells of TORCH_EQUAL and TORCH_BF16, each on one family, the
families taking turns: parity_cells.COMPILED_ON), marked slow. The whole-model ``compile`` cells and the ``+optc``
cells run one layer (against a one-layer baseline): Inductor's cold compile grows with the unrolled depth and with
the optimizer's parameter count, and the cells check the same wiring at any depth. The ``compile-regional`` cells
keep two layers but ``+optc``'s, so in the bf16 one the second block really reuses the first block's compiled
code: it checks that dynamo holds one compiled entry for the block's code, not one per layer. The fp32 compiled
cells compare the final weights with eager's too (the last step's update shows in no loss).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from parity_cells import JAX_BF16, JAX_EQUAL, TORCH_BF16, TORCH_EQUAL, families_of_run

from twinbench.data import tasks
from twinbench.models import family as families
from twinbench.spec import RunSpec, from_preset, validate, with_precision
from twinbench.strategies import registry

STEPS = 4
LAYERS = 2
SHAPES = {"llama": ("llama-tiny", {"layers": LAYERS, "d_model": 32, "heads": 4, "d_ff": 64, "context": 16,
                                     "batch": 2, "seq": 16, "steps": STEPS, "warmup": 1, "lr": 3e-3}),
          "gpt": ("tiny", {"layers": LAYERS, "d_model": 32, "heads": 2, "context": 16, "batch": 2,
                            "seq": 16, "steps": STEPS, "warmup": 1, "lr": 3e-3}),
          "bert": ("bert-tiny", {"layers": LAYERS, "d_model": 32, "heads": 2, "context": 32, "seq": 32, "batch": 4,
                                 "steps": STEPS, "warmup": 1, "lr": 3e-3})}


def spec_of(fam: str, framework: str, strategy: str, **over) -> RunSpec:
    preset, shape = SHAPES[fam]
    return validate(with_precision(from_preset(preset, {**shape, **over}, framework=framework, strategy=strategy)))


def run_cell(fam: str, framework: str, strategy: str, **over) -> list[float]:
    """The losses of STEPS steps of ``strategy`` from the family's initial weights, on the run's own batches."""
    return train_cell(fam, framework, strategy, **over)[0]


def train_cell(fam: str, framework: str, strategy: str, **over) -> tuple[list[float], Any]:
    """:func:`run_cell`'s losses and the trainer that made them."""
    spec = spec_of(fam, framework, strategy, **over)
    registry.check_devices(spec)
    trainer = registry.get(framework, strategy).load()(spec, families.get(spec).init_weights(spec.model, 0))
    k = getattr(trainer, "steps_per_call", 1)
    batches = tasks.run_data(spec, k).batches
    losses: list[float] = []
    for i in range(len(batches)):
        out = trainer.step(*batches[i])
        losses += np.atleast_1d(np.asarray(out.tolist(), dtype=np.float64)).tolist()
    trainer.sync()
    return losses, trainer


_baselines: dict[tuple[str, str, int], tuple[list[float], Any]] = {}


def baseline_run(fam: str, framework: str, layers: int = LAYERS) -> tuple[list[float], Any]:
    """The losses and final weights of the framework's baseline (``jit`` / ``eager``), run once per shape."""
    key = (fam, framework, layers)
    if key not in _baselines:
        losses, trainer = train_cell(fam, framework, "jit" if framework == "jax" else "eager", layers=layers)
        _baselines[key] = (losses, trainer.weights())
    return _baselines[key]


def baseline(fam: str, framework: str, layers: int = LAYERS) -> list[float]:
    return baseline_run(fam, framework, layers)[0]


def _over(strategy: str) -> dict:
    if strategy.startswith("scan-steps"):
        return {"scan_k": 2}  # two calls of two steps
    return {"layers": 1} if strategy.startswith("compile+") or "+optc" in strategy else {}  # see the docstring


def _layers(strategy: str) -> int:
    return _over(strategy).get("layers", LAYERS)


def _cells(names: list[str], *front: str) -> list:
    """Parameters ``(family, *front, name)`` for the families each run is made for (parity_cells.families_of_run);
    the torch.compile ones marked slow (a cold compile each)."""
    return [pytest.param(f, *front, n, marks=[pytest.mark.slow] if n.startswith("compile") else [])
            for n in names for f in families_of_run(n)]


@pytest.mark.parametrize(("fam", "strategy"), _cells(JAX_EQUAL))
def test_jax_fp32_cells_equal_jit(fam, strategy):
    np.testing.assert_allclose(run_cell(fam, "jax", strategy, **_over(strategy)), baseline(fam, "jax"), rtol=2e-5)


@pytest.mark.parametrize(("fam", "strategy"), _cells(TORCH_EQUAL))
def test_torch_fp32_cells_equal_eager(fam, strategy):
    rtol = 1e-4 if strategy.startswith("compile") else 1e-6
    ref, ref_weights = baseline_run(fam, "torch", _layers(strategy))
    import torch._dynamo
    import torch._dynamo.utils as dynamo_utils

    torch._dynamo.reset()  # a graph another cell compiled is not reused here
    before = dynamo_utils.counters["stats"]["unique_graphs"]
    losses, trainer = train_cell(fam, "torch", strategy, **_over(strategy))
    np.testing.assert_allclose(losses, ref, rtol=rtol)
    graphs = dynamo_utils.counters["stats"]["unique_graphs"] - before
    if "+optc" in strategy:  # the optimizer step is compiled too: a graph of its own beside the model's
        assert graphs >= 2
    if strategy.startswith("compile"):  # within a few % of one AdamW step (Inductor reorders float32 arithmetic)
        weights = trainer.weights()
        worst = max(float(np.abs(weights[k] - ref_weights[k]).max()) for k in ref_weights)
        assert worst <= 1e-4, f"final weights differ from eager's by {worst}"
    if strategy.startswith("compile-regional"):
        block_compiled_once(trainer, _layers(strategy))


def block_compiled_once(trainer: Any, layers: int) -> None:
    """Regional compilation: dynamo holds one compiled entry (one graph) for the block's code, reused by every
    layer, not one per layer."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    blocks = trainer.family.torch_blocks(trainer.model)
    codes = {type(b).forward.__code__ for b in blocks}
    assert len(blocks) == layers and len(codes) == 1
    assert len(_debug_get_cache_entry_list(codes.pop())) == 1


@pytest.mark.parametrize(("fam", "framework", "strategy"), _cells(JAX_BF16, "jax") + _cells(TORCH_BF16, "torch"))
def test_bf16_cells_close_to_fp32_but_not_equal(fam, framework, strategy):
    if strategy.startswith("compile"):
        import torch._dynamo

        torch._dynamo.reset()  # a graph another cell compiled is not reused here
    losses, trainer = train_cell(fam, framework, strategy, **_over(strategy))
    ref = baseline(fam, framework, _layers(strategy))
    np.testing.assert_allclose(losses, ref, rtol=2e-2)
    assert max(abs(a - b) for a, b in zip(losses, ref, strict=True)) > 1e-7, "bf16 compute had no effect"
    if strategy.startswith("compile-regional"):  # two layers here: the second block reuses the first's graph
        block_compiled_once(trainer, _layers(strategy))
