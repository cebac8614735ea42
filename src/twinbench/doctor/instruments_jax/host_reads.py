"""Host reads: ``jax.Array`` conversion methods (``float``, ``.item()``, printing) wrapped to count where the
user's code reads device values, and how long it waits in them.

The check of a read's cost (``twinbench doctor`` only, not ``watch()``): a read of one of the step's scalar
outputs (``loss.item()`` right after the step) makes the loop wait for the step, but whether that costs anything
depends on the machine (on a CPU backend the host's work between steps and XLA's threads share the cores, so
dispatching ahead may gain nothing). So from step call ``READ_CHECK_FROM`` on, every other block of
``READ_CHECK_BLOCK`` steps answers those reads with the same output of the step before (ready by then: the
device never waits for the read), and the recorder compares the iterations of the two kinds of block
(``summary.read_check``). The script sees those values one step late during those blocks.
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from twinbench.doctor.instruments_jax.common import Hooks, _user_site
from twinbench.doctor.locations import user_location

HOST_READS = ("__bool__", "__float__", "__int__", "__index__", "item", "tolist", "__format__", "__repr__",
              "__str__", "__array__")


BURST_GAP_S = 0.05  # reads of one user line this close together are one burst (one call reading many values)
READ_CHECK_FROM = 3  # the first step call (0-based) whose reads the check may answer one step late
READ_CHECK_BLOCK = 4  # steps per block of the check: waited, deferred, waited, ...


class HostReads(Hooks):
    """Counts and times the user's reads of device values."""

    # -- host reads ------------------------------------------------------------------------------------
    def step_outputs(self, key: str, index: int, leaves: list[Any]) -> None:
        """Call ``index`` of step candidate ``key`` returned ``leaves``: keep its scalar outputs (and the previous
        call's): a read of one of them returning means the step is done, and the host-read check answers them
        one step late."""
        if key != self.rec.step_key():
            return
        scalars = {pos: x for pos, x in enumerate(leaves)
                   if isinstance(x, self.jax.Array) and getattr(x, "size", 0) == 1}
        self.prev_scalars = self.cur_scalars if self.cur_index == index - 1 else {}
        self.cur_scalars, self.cur_ids, self.cur_index = scalars, {id(x): pos for pos, x in scalars.items()}, index

    def _read_target(self, array: Any) -> Any:
        """The array a user's read of ``array`` converts: ``array`` itself, or, in a deferred block of the
        host-read check, the same output of the step before (recorded in ``Recorder.read_mode``)."""
        pos = self.cur_ids.get(id(array))
        if pos is None or not self.rec.check_reads:
            return array
        i = self.cur_index
        deferred = i >= READ_CHECK_FROM and ((i - READ_CHECK_FROM) // READ_CHECK_BLOCK) % 2 == 1
        prev = self.prev_scalars.get(pos) if deferred else None
        if prev is not None and not prev.is_deleted():
            self.rec.read_mode[i] = "deferred"
            return prev
        self.rec.read_mode.setdefault(i, "waited")
        return array

    def _patch_host_reads(self) -> None:
        try:  # the concrete jax.Array class, without creating an array (that would start the backend
            # before the script could call jax.distributed.initialize or set jax_platforms)
            from jax._src.array import ArrayImpl as array_type
        except ImportError:
            array_type = type(self.jax.numpy.zeros(()))
        rec, sites, local, inst = self.rec, self.read_sites, threading.local(), self
        self.burst: tuple[Any, ...] | None = None  # user frame and line reading, its last read's end, compile_s then
        self.cur_scalars: dict[int, Any] = {}  # the step's latest call: its scalar outputs by position
        self.prev_scalars: dict[int, Any] = {}  # ... and the call's before it
        self.cur_ids: dict[int, int] = {}
        self.cur_index = -1

        def wrap(how: str, orig: Callable) -> Callable:
            @functools.wraps(orig)
            def read(self: Any, *args: Any, **kwargs: Any) -> Any:
                depth = getattr(local, "depth", 0)
                loc = None
                if depth == 0 and not rec.internal and _user_site() is not None:
                    loc = user_location(sys._getframe(1))
                    if loc is not None:
                        rec.count("jax_host_reads")
                        sites[f"{loc[0]} ({how.strip('_')})"] += 1
                target = inst._read_target(self) if loc is not None and inst.cur_ids else self
                busy = rec.in_flight() if loc is not None else None
                local.depth = depth + 1
                t0 = time.perf_counter()
                try:
                    return orig(target, *args, **kwargs)
                finally:
                    local.depth = depth
                    if loc is not None:
                        inst._time_read(loc[1], t0, time.perf_counter(), busy,
                                        target is self and id(self) in inst.cur_ids)

            return read

        for how in HOST_READS:
            if how in array_type.__dict__:
                self._patch(array_type, how, wrap(how, array_type.__dict__[how]))

    def _time_read(self, frame: Any, t0: float, t1: float, busy: tuple[str, int] | None,
                   stepped: bool = False) -> None:
        """Account one host read (``t0``..``t1``) made by the user's ``frame``: its own time; the time of the
        line's burst of reads (from its first read to its last, with what the library did in between: one
        ``dataset[perm]`` with a JAX index is dozens of reads and small ops); and the part of it spent waiting
        for a step still running on the device (``busy``), which is the step's own time, not the host's.
        ``stepped``: the array read is one of that step's outputs, so its return means the step is done."""
        rec = self.rec
        rec.seconds["jax_host_read_s"] += t1 - t0
        key = (id(frame), frame.f_lineno)
        compiled = rec.seconds["compile_s"]  # compilation in a burst is compile time, not the reads'
        if self.burst is not None and self.burst[:2] == key and t0 - self.burst[2] < BURST_GAP_S:
            rec.seconds["jax_host_read_span_s"] += max(t1 - self.burst[2] - (compiled - self.burst[3]), 0.0)
        else:
            rec.seconds["jax_host_read_span_s"] += t1 - t0
        self.burst = (*key, t1, compiled)
        if busy is not None:
            ready = rec.ready.get(busy[0], {}).get(busy[1])
            if ready is None and stepped:  # a read of the running step's own output returned: the step is done
                # (the watcher thread, waiting on the same step, may not have run yet to say so)
                rec.step_ready(busy[0], busy[1], t1)
                ready = t1
            if ready is not None:  # the step ended during this read: the read waited for it until then
                rec.seconds["jax_host_read_blocked_s"] += max(min(t1, ready) - t0, 0.0)
