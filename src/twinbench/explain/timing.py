"""Phases by timing, in the run's own worker process after the measured steps (and after any trace).

The trainer gives ``explain_parts()``: ``place(x, y)`` (a host batch on the device), ``forward(x, y)`` and
``forward_backward(x, y)`` (each compiled as the strategy compiles its step: JAX, separate jitted functions;
torch, the same module), and ``wait(out)``. With the whole step (``trainer.step`` on a placed batch, then on a
host batch) the medians of repeats give: input = host step - placed step; forward; backward = fwd+bwd - fwd;
optimizer = placed step - fwd+bwd. Nothing here is timed among the run's measured steps.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from twinbench.record_sections import Explain
from twinbench.strategies.base import Explainable, HloExplainable, lacks

REPEATS = 5


def _median_ms(fn: Callable[[], Any], wait: Callable[[Any], None], repeats: int) -> float:
    wait(fn())  # warm: compiles a part the step never compiled
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        wait(fn())
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def phases(trainer: Any, host_batches: list, repeats: int = REPEATS) -> dict[str, float]:
    """Milliseconds per phase by timing; ``step`` is the whole step on a host batch."""
    parts = trainer.explain_parts()
    x, y = host_batches[0]
    px, py = parts.place(x, y)
    wait = parts.wait

    def step_placed() -> Any:
        trainer.step(px, py)
        trainer.sync()

    def step_host() -> Any:
        trainer.step(x, y)
        trainer.sync()

    host_ms = _median_ms(step_host, lambda _: None, repeats)
    placed_ms = _median_ms(step_placed, lambda _: None, repeats)
    fwd_ms = _median_ms(lambda: parts.forward(px, py), wait, repeats)
    fb_ms = _median_ms(lambda: parts.forward_backward(px, py), wait, repeats)
    return {"input": max(host_ms - placed_ms, 0.0), "forward": fwd_ms, "backward": fb_ms - fwd_ms,
            "optimizer": placed_ms - fb_ms, "rest": 0.0, "step": host_ms}


def in_worker(spec: Any, trainer: Any, host_batches: list, trace_path: str | None) -> Explain:
    """The record's explain section of ``--explain``: the phases by timing and (JAX) the compiled step's HLO text
    beside the trace, for the trace reader. A failure is reported in the record, never fails the measured run."""
    hlo_path = None
    try:
        why = lacks(trainer, Explainable, f"explain {spec.framework}:{spec.strategy.name}")
        if why:
            raise NotImplementedError(why)
        if isinstance(trainer, HloExplainable) and trace_path:
            hlo = trainer.explain_hlo
            x, y = host_batches[0]
            path = Path(trace_path)
            path = (path if path.is_dir() else path.parent) / "step.hlo.txt"
            path.write_text(hlo(x, y))
            hlo_path = str(path.resolve())
        timing: dict[str, float | None] = {k: round(v, 4) for k, v in phases(trainer, host_batches).items()}
        return Explain(timing=timing, hlo_path=hlo_path)
    except Exception as e:  # the measured run stands; explain says what went wrong
        return Explain(hlo_path=hlo_path, error=f"{type(e).__name__}: {e}"[:300])
