"""The timed loop: warm-up and compile kept apart from steady state, device synchronised before each read."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from twinbench.measure import page_faults
from twinbench.measure.compiles import CompileMonitor


@dataclass
class Timing:
    first_step_s: float  # wall time of step 1, compilation included
    step_s: list[float]  # steady-state step times (after warm-up)
    losses: list[float]  # loss of every step, read after the loop (no host sync inside it)
    compiles_during_steps: int  # compilations that happened during the steady-state steps
    compile_s: float  # compile time the framework reported during the loop (all of it in step 1, normally)
    wall_s: float = 0.0  # the whole loop, warm-up included
    steps_per_call: int = 1  # scan-steps: the K steps each timed call ran (per_step divided them out)
    #: seconds per steady step of an unsynchronised window (:func:`time_window`): as many steps again as the
    #: steady ones, dispatched back to back after them and synchronised at the window's two ends only; None
    #: when not measured (or when something compiled inside it)
    async_step_s: float | None = None
    first_step_compiles: int = 0  # programs compiled during step 1 (0 when an earlier compile was reused)
    #: the process's page faults and kernel share over the steady steps (measure/page_faults.py), per step
    os_usage: page_faults.StepUsage = field(default_factory=page_faults.StepUsage)


#: loss handles a timed loop holds before it reads them back, after a step's clock has stopped (each step is
#: synchronised, so the values are there and reading them waits on nothing): a long run keeps floats, not one
#: device array a step (a device scalar holds far more host memory than its float)
HANDLES_HELD = 256


def _floats(handle: Any) -> list[float]:
    value = handle.tolist() if hasattr(handle, "tolist") else float(handle)
    return [float(v) for v in value] if isinstance(value, list) else [float(value)]


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of a non-empty list."""
    s = sorted(values)
    k = (len(s) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def stack_calls(batches: list[tuple[Any, ...]], k: int) -> list[tuple[Any, ...]]:
    """Group host batches K at a time, each part stacked on a new leading axis ([K, batch, seq])."""
    if k == 1:
        return batches
    import numpy as np

    return [tuple(np.stack(part) for part in zip(*batches[i:i + k], strict=True))
            for i in range(0, len(batches) - k + 1, k)]


def per_step(timing: Timing, k: int) -> Timing:
    """Timing of calls that each ran K steps, expressed per step.

    A steady call's time is divided by K. The first call holds the compilation and K steps; its
    ``first_step_s`` becomes the call minus K-1 median steady steps (compile + one step, as elsewhere), so a
    planned run's total time (first step + (N-1) steps) stays comparable with single-step strategies.
    """
    if k == 1:
        return timing
    steps = [s / k for s in timing.step_s]
    first = timing.first_step_s - (k - 1) * (percentile(steps, 50) if steps else timing.first_step_s / k)
    window = timing.async_step_s / k if timing.async_step_s is not None else None
    faults = timing.os_usage.page_faults_per_step
    os_usage = timing.os_usage if faults is None else replace(timing.os_usage, page_faults_per_step=round(faults / k, 1))
    return replace(timing, first_step_s=first, step_s=steps, steps_per_call=k,
                   async_step_s=window, os_usage=os_usage)


def time_steps(
    step: Callable[[int], Any],
    sync: Callable[[], None],
    steps: int,
    warmup: int,
    compiles: CompileMonitor,
) -> Timing:
    """Run ``steps`` steps; time each one from dispatch to ``sync()`` returning.

    ``step(i)`` dispatches step ``i`` and returns a handle of its loss (a device scalar; converted with
    ``float`` outside every step's clock, :data:`HANDLES_HELD` at a time, so reading it costs no host sync inside
    the timed region, and a run of any length holds a few handles, not one a step).
    The first ``max(warmup, 1)`` steps are warm-up: step 1 carries the compilation and is reported apart.
    """
    handles: list[Any] = []
    losses: list[float] = []
    times: list[float] = []
    compiles_at_steady = 0
    warm = max(warmup, 1)
    compile_s0, compiles_at_start, first_compiles = compiles.seconds(), compiles.count(), 0
    usage0 = None
    start = time.perf_counter()
    for i in range(steps):
        if i == warm:
            compiles_at_steady, usage0 = compiles.count(), page_faults.usage()  # outside any timed step
        t0 = time.perf_counter()
        handles.append(step(i))
        sync()
        times.append(time.perf_counter() - t0)
        if i == 0:
            first_compiles = compiles.count() - compiles_at_start
        if len(handles) >= HANDLES_HELD:  # outside the step's clock, on synchronised values
            losses += [v for h in handles for v in _floats(h)]
            handles.clear()
    wall = time.perf_counter() - start
    usage1 = page_faults.usage()
    os_usage = page_faults.per_step(usage0, usage1, steps - warm)
    if (os_usage.page_faults_per_step or 0) >= page_faults.FAULTS_PER_STEP:  # enough to matter: cost one
        os_usage = page_faults.per_step(usage0, usage1, steps - warm, page_faults.fault_us())  # after the clock
    compiles_during = compiles.count() - compiles_at_steady if steps > warm else 0
    losses += [v for h in handles for v in _floats(h)]  # a K-step call returns K losses
    return Timing(first_step_s=times[0], step_s=times[warm:], losses=losses,
                  compiles_during_steps=compiles_during, compile_s=compiles.seconds() - compile_s0,
                  wall_s=wall, first_step_compiles=first_compiles, os_usage=os_usage)


def time_window(step: Callable[[int], Any], sync: Callable[[], None], n: int, compiles: CompileMonitor,
                warmup: int = 0) -> float | None:
    """Seconds per step of ``n`` steps dispatched back to back, the device synchronised before the first and
    after the last only: host work (Python, dispatch, the next batch) overlaps the device's, as in a training
    loop that never reads a value back. :func:`time_steps` syncs after every step, which a launch-bound run
    (torch eager on a GPU) pays for in every step; this window does not. ``warmup`` untimed steps first (an
    input pipeline started for the window fills meanwhile, as the timed loop's did in its warm-up). None for
    ``n < 1`` or when something compiled inside the window (it would not be a steady-state time)."""
    if n < 1:
        return None
    for i in range(warmup):
        step(i)
    sync()
    n_compiles = compiles.count()
    t0 = time.perf_counter()
    for i in range(warmup, warmup + n):
        step(i)  # the loss handles are dropped: reading one back would sync
    sync()
    elapsed = time.perf_counter() - t0
    return None if compiles.count() != n_compiles else elapsed / n
