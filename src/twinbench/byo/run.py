"""The worker side of a user-model run: initial weights, batches, FLOPs and the extra record fields.

Used by ``worker.execute`` when ``spec.model.family == "user"``; everything else (the timed loop, memory,
MFU, the record) is the twins' code path. The batches are the user's ``batch(i)`` for i = 0..steps-1, made
once before timing in this process (the same in every run, both frameworks).
"""

from __future__ import annotations

import json
import traceback
from pathlib import Path
from typing import Any

from twinbench.byo import FLOP_CONVENTION, UserConfig, load_torch
from twinbench.byo import family as fam
from twinbench.spec import RunSpec

DOCTOR_STEPS = 6  # extra steps of a JAX run watched by the doctor after the measured ones


class UserRun:
    def __init__(self, spec: RunSpec):
        self.spec = spec
        self.meta = fam.read_meta(spec.user_dir)
        self.weights = fam.init_weights(spec.user_dir)
        self.n_params = self.meta.n_params
        self.flops_per_token = self.meta.flops_per_token

    def run_data(self, k: int, trainer: Any = None) -> Any:
        """The run's batches: the user's ``batch(i)`` (the trainer's own model's, if it has one: a torch
        trainer), made here once, before timing."""
        from twinbench.data.pipeline import HostBatches
        from twinbench.data.tasks import RunData

        t = self.spec.train
        if k != 1:
            raise ValueError("a user model runs one step per call")
        um = getattr(trainer, "um", None)
        batch = um.batch if um is not None else self._batch_fn()
        batches = [batch(i) for i in range(t.steps)]
        n = self.meta.tokens_per_batch
        return RunData(HostBatches(batches.__getitem__, t.steps, 1, t.slow_input), [n] * t.steps,
                       [n] * t.steps, [t.seq] * t.steps)

    def _batch_fn(self) -> Any:
        """The user's batch maker, from ``build(cfg)`` under the run's seed (the port's process too: the
        batches are the torch file's, so it imports torch for them; it never imports torchax)."""
        import torch

        torch.manual_seed(self.spec.train.seed)
        return load_torch(self.spec.user_model, UserConfig.from_spec(self.spec)).batch

    def fields(self, trainer: Any, host_batches: Any) -> dict[str, Any]:
        """Record fields of a user run: FLOPs convention, dropout warning, parity (port), doctor (JAX)."""
        out: dict[str, Any] = {"flops_convention": FLOP_CONVENTION, "warnings": []}
        if self.meta.dropout_off and self.spec.base_strategy != "port":  # the port is the user's own code
            out["warnings"].append(f"dropout switched off in {self.meta.dropout_off} module(s): deterministic "
                                   "training, the same function in both frameworks")
        parity = Path(self.spec.user_dir) / fam.PARITY
        if self.spec.base_strategy == "port" and parity.exists():
            out["parity"] = json.loads(parity.read_text())
        if self.spec.framework == "jax":
            out["doctor"] = doctor_findings(self.spec, self.weights, host_batches)
        return out


def doctor_findings(spec: RunSpec, weights: Any, host_batches: Any, steps: int = DOCTOR_STEPS) -> dict[str, Any]:
    """The doctor's JAX instruments over a fresh trainer of the same strategy, after the measured run.

    A fresh trainer (not the measured one) so the doctor sees the step compiled and run from the start, as in
    a user's script; the measured steps stay unwatched.
    """
    try:
        from twinbench.doctor import watch
        from twinbench.strategies import registry

        with watch(report=False) as w:
            trainer = registry.builder(spec)(spec, weights)
            for i in range(steps):
                trainer.step(*host_batches[i % len(host_batches)])
            trainer.sync()
        from twinbench.doctor.report import to_json

        return to_json(w.findings, w.observations)
    except Exception as e:  # the doctor's view is extra: never lose the measured run for it
        traceback.print_exc()
        return {"error": f"{type(e).__name__}: {e}"[:300]}
