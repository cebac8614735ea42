"""Where in the user's code the loop's thread runs between step calls, sampled.

A step call of an asynchronous step (JAX) returns before the step is done; what the loop does until its next call
(building the next batch, logging, a tokenizer) runs while the device works, or while it waits. The recorder times
that span and the thread's CPU time in it; this sampler says where it goes: a daemon thread looks at the loop
thread's innermost frame every ``PERIOD_S`` (``sys._current_frames``) and, when the loop is between calls, counts
the user's function it is in (the innermost frame of the user's own files) and the loop's line that called it.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from typing import Any, Protocol

from twinbench.doctor.locations import is_library_file, short_path


class Recorder(Protocol):
    """What the sampler reads of the doctor's recorder (doctor/recorder.py, which owns the sampler)."""

    loop_thread: int | None
    in_call: bool
    internal: int
    calls: dict[str, list[Any]]

STEP_WRAPPERS = "/twinbench/doctor/instruments_jax/steps.py"  # the doctor's wrappers of the step call
JAX_LIBS = ("/jax/", "/jaxlib/", "/flax/", "/optax/")  # the frameworks' own dispatch of operations outside jit
PERIOD_S = 0.005  # between samples; each takes the GIL for a few microseconds
MAX_SAMPLES = 50_000  # kept per run (the rest are not counted)


def _site(frame: Any, loop_code: Any) -> str:
    """``loop line `code` -> user function (file:line)`` for the innermost frame of the user's code under the
    loop's frame, with the library frame doing the work when the innermost frame is a library's."""
    import linecache

    lib = frame if is_library_file(frame.f_code.co_filename) else None
    f = frame
    while f is not None and is_library_file(f.f_code.co_filename):
        if f.f_code.co_filename.endswith(STEP_WRAPPERS):  # the doctor's wrapper of the step: the call, not between
            return ""
        f = f.f_back
    if f is None:
        return "outside the user's code"
    inner = f
    loop = f
    while loop is not None and loop.f_code is not loop_code:
        loop = loop.f_back
    parts = []
    if loop is not None:
        code = linecache.getline(loop.f_code.co_filename, loop.f_lineno).strip()
        parts.append(f"{loop.f_code.co_filename}:{loop.f_lineno}" + (f" `{code[:60]}`" if code else ""))
    if inner is not loop:
        parts.append(f"{inner.f_code.co_name}() at {inner.f_code.co_filename}:{inner.f_code.co_firstlineno}")
    if lib is not None:
        parts.append(f"{short_path(lib.f_code.co_filename)}:{lib.f_lineno}")
    return " -> ".join(parts)


class LoopSampler:
    """Samples the loop's thread between step calls, per iteration (the step call index it follows)."""

    def __init__(self, rec: Recorder, key: str) -> None:
        self.rec, self.key = rec, key
        self.thread_id = rec.loop_thread
        frame = sys._current_frames().get(self.thread_id) if self.thread_id is not None else None
        while frame is not None and is_library_file(frame.f_code.co_filename):
            frame = frame.f_back
        self.loop_code = frame.f_code if frame is not None else None  # the frame that calls the step
        self.samples: list[tuple[int, str, float]] = []  # (steps so far, site, the loop thread's CPU s it weighs)
        self.jax_weight = 0.0  # of them, those whose innermost frame was JAX's, Flax's or Optax's own code
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="twinbench-doctor-sampler", daemon=True)
        self.thread.start()

    def _cpu(self) -> float | None:
        """The loop thread's CPU time so far (None where the platform cannot say)."""
        try:
            return time.clock_gettime(time.pthread_getcpuclockid(self.thread_id))
        except (AttributeError, OSError, TypeError):
            return None

    def _run(self) -> None:
        rec = self.rec
        last = self._cpu()
        while not self.stopped.wait(PERIOD_S) and len(self.samples) < MAX_SAMPLES:
            now = self._cpu()
            # each sample weighs the CPU the loop's thread used since the last one (time it spent descheduled, on
            # a busy machine, weighs nothing); where the clock is unknown, one sample one unit
            weight = (now - last) if now is not None and last is not None else PERIOD_S
            last = now
            if rec.in_call or rec.internal:
                continue
            frame = sys._current_frames().get(self.thread_id)
            if frame is None:
                return  # the loop's thread ended
            site = _site(frame, self.loop_code)
            if site:
                self.samples.append((len(rec.calls[self.key]) - 1, site, weight))
                if any(m in frame.f_code.co_filename for m in JAX_LIBS):  # JAX at work, not the user's input
                    self.jax_weight += weight
            del frame

    def stop(self) -> None:
        self.stopped.set()

    def jax_share(self) -> float | None:
        """The share of the loop thread's CPU time between calls spent in JAX's (Flax's, Optax's) own code:
        operations dispatched outside jit (an index of a device array, a conversion), not the user's input work;
        None without samples."""
        total = sum(w for _, _, w in self.samples)
        return self.jax_weight / total if total > 0 else None

    def sampled_ms(self, iterations: set[int]) -> float | None:
        """The loop thread's CPU time per iteration seen in the user's code between calls in ``iterations`` (every
        site): the doctor's own work around the calls is not in it. None without iterations."""
        if not iterations:
            return None
        return round(1e3 * sum(w for i, _, w in self.samples if i in iterations) / len(iterations), 3)

    def sites(self, iterations: set[int], n: int = 4) -> dict[str, float]:
        """The ``n`` sites where the loop's thread spent most CPU time between calls in ``iterations``: ms of its
        CPU time per iteration each."""
        weights: Counter[str] = Counter()
        for i, site, w in self.samples:
            if i in iterations:
                weights[site] += w
        return {site: round(1e3 * w / len(iterations), 3) for site, w in weights.most_common(n) if w > 0} \
            if iterations else {}
