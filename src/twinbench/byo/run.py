"""The worker side of a user-model run: initial weights, batches, FLOPs and the extra record fields.

Used by ``worker.execute`` when ``spec.model.family == "user"``; everything else (the timed loop, memory,
MFU, the record) is the twins' code path. The batches are the user's ``batch(i)`` for i = 0..steps-1, made
once before timing in this process (the same in every run, both frameworks).
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from twinbench import backends
from twinbench.byo import FLOP_CONVENTION, needs_port
from twinbench.byo import family as fam
from twinbench.record_sections import Parity, Trajectory
from twinbench.spec import RunSpec

DOCTOR_STEPS = 6  # extra steps of a JAX run watched by the doctor after the measured ones


@dataclass
class UserFields:
    """The record fields only a user-model run has."""

    flops_convention: str = FLOP_CONVENTION
    warnings: list[str] = field(default_factory=list)
    parity: Parity = field(default_factory=Parity)  # the port's check and the run's loss trajectory
    doctor: dict[str, Any] = field(default_factory=dict)  # the doctor's report (doctor/report.py), carried whole


class UserRun:
    def __init__(self, spec: RunSpec):
        from twinbench.models import family

        self.spec = spec
        self.family = family.get(spec)  # the run's user family: one build(cfg), one read of meta.json
        self.meta = self.family.meta()

    def run_data(self, k: int, trainer: Any = None) -> Any:
        """The run's batches: the user's ``batch(i)`` of the run's one ``build(cfg)`` (the family's, shared with
        a torch trainer), made here once, before timing. The port's process builds the torch file too, for its
        batches; it never imports torchax."""
        from twinbench.data.pipeline import HostBatches
        from twinbench.data.tasks import RunData

        t = self.spec.train
        if k != 1:
            raise ValueError("a user model runs one step per call")
        batch = self.family.user_model().batch
        batches = [batch(i) for i in range(t.steps)]
        n = self.meta.tokens_per_batch
        return RunData(HostBatches(batches.__getitem__, t.steps, 1, t.slow_input), [n] * t.steps,
                       [n] * t.steps, [t.seq] * t.steps)

    def fields(self, trainer: Any, host_batches: Any, losses: list[float] | None = None) -> UserFields:
        """Record fields of a user run: FLOPs convention, dropout warning, parity (the loss trajectory against
        torch eager's; the port's check too), doctor (JAX)."""
        out = UserFields()
        if self.meta.dropout_off and not needs_port(self.spec.strategy.base):  # the port is the user's own code
            names = ", ".join(self.meta.switched_off[:3]) or f"{self.meta.dropout_off} module(s)"
            if len(self.meta.switched_off) > 3:
                names = f"{len(self.meta.switched_off)} in all: {names}, ..."
            out.warnings.append(f"dropout switched off ({names}): deterministic training, the same function "
                                   "in both frameworks")
        port_check = Path(self.spec.user.user_dir) / fam.PARITY
        if needs_port(self.spec.strategy.base) and port_check.exists():  # written by byo/parity.py before the run
            out.parity = msgspec.json.decode(port_check.read_bytes(), type=Parity)
        if losses and self.meta.eager_losses:
            tr = trajectory(losses, self.meta.eager_losses)
            out.parity = msgspec.structs.replace(out.parity, trajectory=tr)
            if not tr.ok:
                out.warnings.append(f"loss trajectory differs from torch eager's by {tr.max_rel:.2e} "
                                  f"(relative, worst of {tr.steps} steps; tolerance {tr.tolerance:g}): "
                                       "not the same function, or a numerics change (bf16, fast math)")
        if backends.get(self.spec.framework).DOCTOR_WATCHES_USER_RUN:
            out.doctor = doctor_findings(self.spec, self.family.init_weights(), host_batches)
        return out


TRAJECTORY_TOL = 1e-5  # relative, per step: fp32 runs of the same function agree far closer


def trajectory(losses: list[float], eager: list[float], tol: float = TRAJECTORY_TOL) -> Trajectory:
    """A run's losses against torch eager's (the preparation process's), step by step, relative."""
    n = min(len(losses), len(eager))
    rel = [abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses[:n], eager[:n], strict=True)]
    return Trajectory(vs="torch eager", steps=n, first_rel=rel[0] if rel else 0.0, max_rel=max(rel, default=0.0),
                      tolerance=tol, ok=bool(n) and max(rel) <= tol)


def doctor_findings(spec: RunSpec, weights: Any, host_batches: Any, steps: int = DOCTOR_STEPS) -> dict[str, Any]:
    """The doctor's JAX instruments over a fresh trainer of the same strategy, after the measured run.

    A fresh trainer (not the measured one) so the doctor sees the step compiled and run from the start, as in
    a user's script; the measured steps stay unwatched.
    """
    try:
        from twinbench.doctor.watching import watch
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
        from twinbench.errors import error_line

        return {"error": error_line(e)}
