"""How long the step loop waits for its input: per-step wait times and the share of time spent waiting.

Wraps any iterator of batches; knows nothing of models or frameworks. The wait of a step is the time
``next()`` took to hand it its batch (with prefetching: only the part the pipeline could not hide).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from twinbench.measure.clock import percentile


class InputWaits:
    """``next()`` returns the next batch and records how long the caller waited for it."""

    def __init__(self, batches: Iterable[Any]):
        self._it = iter(batches)
        self.waits: list[float] = []

    def next(self) -> Any:
        t0 = time.perf_counter()
        batch = next(self._it)
        self.waits.append(time.perf_counter() - t0)
        return batch

    def summary(self, warm: int, steady_s: list[float]) -> dict[str, float | None]:
        """``input_wait_ms``: median wait of the steady-state steps (the first ``warm`` are warm-up);
        ``input_stall_pct``: their total wait as a share of their total step time (which includes it)."""
        waits = self.waits[warm:]
        if not waits or not steady_s:
            return {"input_wait_ms": None, "input_stall_pct": None}
        return {"input_wait_ms": percentile(waits, 50) * 1e3,
                "input_stall_pct": 100.0 * sum(waits) / sum(steady_s)}
