"""Helpers of the strategy parity tests: tiny shapes, identical weights and batches for every trainer."""

from __future__ import annotations

import numpy as np

from twinbench.spec import RunSpec, from_preset, validate, with_precision
from twinbench.strategies import registry

STEPS = 4
OVERRIDES = {"layers": 2, "d_model": 32, "heads": 2, "vocab": 64, "context": 16, "batch": 2, "seq": 16,
             "steps": STEPS, "warmup": 1, "lr": 3e-3}


def make_spec(framework: str, strategy: str, **fields) -> RunSpec:
    """The tiny test spec; ``fields`` override model/training fields (``layers=3``) or top-level ones."""
    over = {k: v for k, v in fields.items() if k in OVERRIDES}
    top = {k: v for k, v in fields.items() if k not in OVERRIDES}
    base = from_preset("tiny", {**OVERRIDES, **over})
    return validate(with_precision(base.evolve(framework=framework, strategy=strategy, **top)))


def train(framework: str, strategy: str, weights, host_batches, **fields):
    """Build the strategy's trainer, run every batch (K per call for scan-steps); return (losses, trainer)."""
    spec = make_spec(framework, strategy, **fields)
    trainer = registry.get(framework, strategy).load()(spec, weights)
    k = getattr(trainer, "steps_per_call", 1)
    losses: list[float] = []
    for i in range(0, len(host_batches), k):
        part = host_batches[i:i + k]
        if k > 1:
            out = trainer.step(np.stack([b[0] for b in part]), np.stack([b[1] for b in part]))
        else:
            out = trainer.step(*part[0])
        losses += np.atleast_1d(np.asarray(out.tolist(), dtype=np.float64)).tolist()
    trainer.sync()
    return losses, trainer
