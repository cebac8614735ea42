"""When a step's results are ready on the device, seen without stalling the user's loop.

With asynchronous dispatch (JAX; PyTorch on CUDA) a step call returns as soon as the work is queued, so a
timer around the call measures dispatch, not the step. The doctor adds the device sync itself, off the
loop's path: each step's output is handed to one watcher thread, which calls ``block_until_ready`` on it
and records the moment it returned (``Recorder.step_ready``). The loop goes on dispatching as it would
without the doctor, and the recorder can tell, per iteration, how long the device waited for the host.

The recorded time is late by at most the interpreter's thread switch interval (5 ms by default) when the
loop's thread holds the GIL at that moment: the device's idle time is then under-, never over-estimated.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from twinbench.doctor.recorder import Recorder


class ReadyWatcher:
    """One daemon thread that waits on step outputs in call order and records when each was ready."""

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        self.queue: queue.SimpleQueue[tuple[str, int, Callable[[], object]] | None] = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        self.failed = 0  # waits that raised (the output was donated to the next step first): no time known

    def submit(self, key: str, index: int, wait: Callable[[], object]) -> None:
        """Record when ``wait()`` (e.g. ``array.block_until_ready``) returns, as call ``index`` of ``key``."""
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="twinbench-doctor-ready", daemon=True)
            self.thread.start()
        self.queue.put((key, index, wait))

    def _run(self) -> None:
        while (item := self.queue.get()) is not None:
            key, index, wait = item
            try:
                wait()
            except Exception:  # donated to (deleted by) the next step before we waited on it
                self.failed += 1
                continue
            self.rec.step_ready(key, index)

    def close(self, timeout: float = 5.0) -> None:
        """Wait (at most ``timeout`` s) for the pending steps, then end the thread."""
        if self.thread is not None:
            self.queue.put(None)
            self.thread.join(timeout)
            self.thread = None
