"""The single-device cells' runs, shared by ``test_cells.py`` (the cells without torch.compile) and
``test_cells_compiled.py`` (the four cold torch.compile cells): two files, so that a parallel test run can take
the compiled cells and the others on different workers. Their docstrings say the tolerances.

The whole-model ``compile`` cells and the ``+optc`` cells run one layer (against a one-layer baseline):
Inductor's cold compile grows with the unrolled depth and with the optimizer's parameter count, and the cells
check the same wiring at any depth (``over``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from parity_cells import families_of_run

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


def over(strategy: str) -> dict:
    if strategy.startswith("scan-steps"):
        return {"scan_k": 2}  # two calls of two steps
    return {"layers": 1} if strategy.startswith("compile+") or "+optc" in strategy else {}  # see the docstring


def layers_of(strategy: str) -> int:
    return over(strategy).get("layers", LAYERS)


def cells(names: list[str], *front: str, compiled: bool) -> list:
    """Parameters ``(family, *front, name)`` for the families each run is made for (parity_cells.families_of_run):
    the torch.compile runs (a cold compile each, marked slow) when ``compiled``, else the others."""
    return [pytest.param(f, *front, n, marks=[pytest.mark.slow] if compiled else [])
            for n in names if n.startswith("compile") == compiled for f in families_of_run(n)]


def block_compiled_once(trainer: Any, layers: int) -> None:
    """Regional compilation: dynamo holds one compiled entry (one graph) for the block's code, reused by every
    layer, not one per layer."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    blocks = trainer.family.torch_blocks(trainer.model)
    codes = {type(b).forward.__code__ for b in blocks}
    assert len(blocks) == layers and len(codes) == 1
    assert len(_debug_get_cache_entry_list(codes.pop())) == 1
