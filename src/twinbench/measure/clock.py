"""The timed loop: warm-up and compile kept apart from steady state, device synchronised before each read."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from twinbench.measure.compiles import CompileMonitor


@dataclass
class Timing:
    first_step_s: float  # wall time of step 1, compilation included
    step_s: list[float]  # steady-state step times (after warm-up)
    losses: list[float]  # loss of every step, read after the loop (no host sync inside it)
    compiles_during_steps: int  # compilations that happened during the steady-state steps
    compile_s: float  # compile time the framework reported during the loop (all of it in step 1, normally)
    wall_s: float = 0.0  # the whole loop, warm-up included
    extra: dict[str, Any] = field(default_factory=dict)


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of a non-empty list."""
    s = sorted(values)
    k = (len(s) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def time_steps(
    step: Callable[[int], Any],
    sync: Callable[[], None],
    steps: int,
    warmup: int,
    compiles: CompileMonitor,
) -> Timing:
    """Run ``steps`` steps; time each one from dispatch to ``sync()`` returning.

    ``step(i)`` dispatches step ``i`` and returns a handle of its loss (a device scalar; converted with
    ``float`` only after the loop, so reading it costs no extra host sync inside the timed region).
    The first ``max(warmup, 1)`` steps are warm-up: step 1 carries the compilation and is reported apart.
    """
    handles: list[Any] = []
    times: list[float] = []
    compiles_at_steady = 0
    warm = max(warmup, 1)
    compile_s0 = compiles.seconds()
    start = time.perf_counter()
    for i in range(steps):
        if i == warm:
            compiles_at_steady = compiles.count()
        t0 = time.perf_counter()
        handles.append(step(i))
        sync()
        times.append(time.perf_counter() - t0)
    wall = time.perf_counter() - start
    compiles_during = compiles.count() - compiles_at_steady if steps > warm else 0
    losses = [float(h) for h in handles]
    return Timing(first_step_s=times[0], step_s=times[warm:], losses=losses,
                  compiles_during_steps=compiles_during, compile_s=compiles.seconds() - compile_s0,
                  wall_s=wall)
