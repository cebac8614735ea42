"""JAX ``scan-steps``: K training steps per call, ``lax.scan`` over a stacked [K, batch, seq] batch.

Dispatch, argument handling and the host round trip are paid once per K steps. The worker stacks K host
batches per call and reports the call time divided by K as the step time (``steps_per_call`` in the
record). ``--scan-k`` sets K; 0 chooses the largest of 8, 5, 4, 2 that divides ``--steps`` and still leaves
two measured calls after the warm-up call(s).
"""

from __future__ import annotations

import math

from twinbench.models.weights import Canonical
from twinbench.spec import RunSpec
from twinbench.strategies.jax_jit import JitTrainer

AUTO_K = (8, 5, 4, 2)


def resolve_k(spec: RunSpec) -> int:
    """K of a scan-steps run: ``spec.strategy.scan_k`` if set, else the automatic choice (1 if none fits)."""
    if spec.strategy.scan_k:
        return spec.strategy.scan_k
    t = spec.train
    for k in AUTO_K:
        if t.steps % k == 0 and t.steps // k - max(math.ceil(t.warmup / k), 1) >= 2:
            return k
    return 1


class ScanStepsTrainer(JitTrainer):
    def __init__(self, spec: RunSpec, weights: Canonical):
        self.steps_per_call = resolve_k(spec)
        super().__init__(spec, weights)


def build(spec: RunSpec, weights: Canonical) -> ScanStepsTrainer:
    return ScanStepsTrainer(spec, weights)
