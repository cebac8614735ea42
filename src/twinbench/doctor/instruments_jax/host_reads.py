"""Host reads: ``jax.Array`` conversion methods (``float``, ``.item()``, printing) wrapped to count where the
user's code reads device values, and how long it waits in them."""

from __future__ import annotations

import functools
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from twinbench.doctor.instruments_jax.common import Hooks, _user_site
from twinbench.doctor.recorder import user_location

HOST_READS = ("__bool__", "__float__", "__int__", "__index__", "item", "tolist", "__format__", "__repr__",
              "__str__", "__array__")


BURST_GAP_S = 0.05  # reads of one user line this close together are one burst (one call reading many values)


class HostReads(Hooks):
    """Counts and times the user's reads of device values."""

    # -- host reads ------------------------------------------------------------------------------------
    def _patch_host_reads(self) -> None:
        try:  # the concrete jax.Array class, without creating an array (that would start the backend
            # before the script could call jax.distributed.initialize or set jax_platforms)
            from jax._src.array import ArrayImpl as array_type
        except ImportError:
            array_type = type(self.jax.numpy.zeros(()))
        rec, sites, local, inst = self.rec, self.read_sites, threading.local(), self
        self.burst: tuple[Any, ...] | None = None  # user frame and line reading, its last read's end, compile_s then

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
                busy = rec.in_flight() if loc is not None else None
                local.depth = depth + 1
                t0 = time.perf_counter()
                try:
                    return orig(self, *args, **kwargs)
                finally:
                    local.depth = depth
                    if loc is not None:
                        inst._time_read(loc[1], t0, time.perf_counter(), busy)

            return read

        for how in HOST_READS:
            if how in array_type.__dict__:
                self._patch(array_type, how, wrap(how, array_type.__dict__[how]))

    def _time_read(self, frame: Any, t0: float, t1: float, busy: tuple[str, int] | None) -> None:
        """Account one host read (``t0``..``t1``) made by the user's ``frame``: its own time; the time of the
        line's burst of reads (from its first read to its last, with what the library did in between: one
        ``dataset[perm]`` with a JAX index is dozens of reads and small ops); and the part of it spent waiting
        for a step still running on the device (``busy``), which is the step's own time, not the host's."""
        rec = self.rec
        rec.seconds["jax_host_read_s"] += t1 - t0
        key = (id(frame), frame.f_lineno)
        compiled = rec.seconds.get("compile_s", 0.0)  # compilation in a burst is compile time, not the reads'
        if self.burst is not None and self.burst[:2] == key and t0 - self.burst[2] < BURST_GAP_S:
            rec.seconds["jax_host_read_span_s"] += max(t1 - self.burst[2] - (compiled - self.burst[3]), 0.0)
        else:
            rec.seconds["jax_host_read_span_s"] += t1 - t0
        self.burst = (*key, t1, compiled)
        if busy is not None:
            ready = rec.ready.get(busy[0], {}).get(busy[1])
            if ready is not None:  # the step ended during this read: the read waited for it until then
                rec.seconds["jax_host_read_blocked_s"] += max(min(t1, ready) - t0, 0.0)
