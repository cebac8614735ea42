"""Profiler traces of a few steady-state steps, taken with each framework's own profiler.

The traced steps run AFTER the measured ones, so the profiler's overhead never touches the reported step
times. A trace is a file a person opens to see where the time of one step goes:

- torch: ``torch.profiler`` exported as a Chrome trace (``trace.json``); open it in https://ui.perfetto.dev
  or ``chrome://tracing``.
- JAX: ``jax.profiler.trace`` writes a TensorBoard profile (``plugins/profile/<run>/*.xplane.pb``) and a
  Perfetto trace (``*.trace.json.gz``); open the latter in https://ui.perfetto.dev, or the directory with
  ``tensorboard --logdir DIR`` (profile plugin / XProf).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from twinbench import backends

#: Steady-state steps recorded in a trace: enough to see a step repeat, few enough to keep files small.
TRACE_STEPS = 3

HINTS = {
    "torch": "Chrome trace: open in https://ui.perfetto.dev (Open trace file) or chrome://tracing",
    "jax": "Perfetto trace: open in https://ui.perfetto.dev; or `tensorboard --logdir DIR` "
           "(profile plugin) on the directory holding plugins/profile",
}


def trace_steps(framework: str, step: Callable[[int], Any], sync: Callable[[], None], out_dir: Path,
                n: int = TRACE_STEPS) -> str:
    """Run ``n`` more steps under the framework's profiler, writing into ``out_dir``; return the trace path.

    ``step(i)`` dispatches step ``i``; ``sync()`` waits for the device. One untraced step is run first so
    the profiler starts on a warm, steady-state step.
    """
    backend = backends.get(framework)  # ValueError for a framework without a profiler
    out_dir.mkdir(parents=True, exist_ok=True)
    step(0)
    sync()
    return backend.profile_steps(step, sync, out_dir, n)


def hint(framework: str) -> str:
    """How to open a trace of ``framework``."""
    return HINTS.get(framework, "")
