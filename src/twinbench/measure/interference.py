"""How much CPU other processes used while a run's steps were being timed: measured, not guessed.

The 1-minute load average is a damped figure that lags by tens of seconds: a run started 3 s after the
machine went idle still sees ~1 of "load", and a run started during a burst of short jobs looks quiet. This
meter reads, around the timed steps themselves, the busy time of every core (``/proc/stat``: everything but
idle and iowait) and the CPU time of the run's own process tree (``/proc/PID/stat`` of the worker and all its
descendants; under torchrun, of the agent that started the ranks, so sibling ranks count as the run's own).
The difference is what other processes took while the steps ran: ``interference_cores`` (the average number
of cores they kept busy). Linux only; elsewhere the fields are absent and the load average remains.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

#: other processes using more than this share of the machine's cores during the timed steps: "machine busy"
BUSY_SHARE = 0.10
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def core_busy_s() -> dict[str, float] | None:
    """Seconds each core has spent busy since boot (``/proc/stat``: user..steal, not idle/iowait)."""
    try:
        with open("/proc/stat") as f:
            lines = [x.split() for x in f if x.startswith("cpu") and not x.startswith("cpu ")]
    except OSError:
        return None
    out = {}
    for parts in lines:
        vals = [int(v) for v in parts[1:9]]  # user nice system idle iowait irq softirq steal
        out[parts[0]] = (sum(vals) - vals[3] - vals[4]) / _TICK
    return out


def _children(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def _cpu_s(pid: int) -> float:
    """utime + stime of a process (all its threads) and of its waited-for children."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(v) for v in fields[11:15]) / _TICK  # utime stime cutime cstime


_SCHEDSTAT = threading.local()  # per thread: its own schedstat file, kept open (a read is then one syscall, not an open, a read and a close)


def runqueue_wait_s() -> float | None:
    """Seconds the calling thread has waited for a CPU while ready to run (``/proc/thread-self/schedstat``,
    its second field): time other processes took from it, not time it waited for input. None where the
    kernel does not say."""
    fd = getattr(_SCHEDSTAT, "fd", None)
    if fd is None or _SCHEDSTAT.pid != os.getpid():  # a forked child reads its own thread's file, not its parent's
        try:
            fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            fd = -1
        _SCHEDSTAT.fd, _SCHEDSTAT.pid = fd, os.getpid()
    if fd < 0:
        return None
    try:
        return int(os.pread(fd, 128, 0).split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def tree_cpu_s(root: int) -> float:
    """CPU seconds of ``root`` and every process below it."""
    total, todo, seen = 0.0, [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += _cpu_s(pid)
        todo += _children(pid)
    return total


def own_root() -> int:
    """The process whose tree is the run: the worker, or under torchrun the agent above its ranks."""
    return os.getppid() if os.environ.get("TORCHELASTIC_RUN_ID") else os.getpid()


@dataclass
class Meter:
    """``with Meter() as m: <timed steps>``; then :meth:`fields` for the record."""

    root: int = field(default_factory=own_root)
    _t0: float = 0.0
    _busy0: dict[str, float] | None = None
    _own0: float = 0.0
    result: dict[str, object] = field(default_factory=dict)

    def __enter__(self) -> Meter:
        self._busy0, self._own0, self._t0 = core_busy_s(), tree_cpu_s(self.root), time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.perf_counter() - self._t0
        busy1, own1 = core_busy_s(), tree_cpu_s(self.root)
        if self._busy0 is None or busy1 is None or wall <= 0:
            return
        per_core = {c: round(min(max((busy1[c] - self._busy0.get(c, busy1[c])) / wall, 0.0), 1.0), 3)
                    for c in busy1}
        total = sum(busy1[c] - self._busy0.get(c, busy1[c]) for c in busy1)
        external = max(total - (own1 - self._own0), 0.0) / wall
        self.result = {"interference_cores": round(external, 3), "cpu_busy_per_core": per_core,
                       "interference_window_s": round(wall, 3)}

    def fields(self) -> dict[str, object]:
        return dict(self.result)


def busy_warning(interference_cores: float | None, cpu_count: int | None) -> str | None:
    """The "machine busy" warning from the measured interference (None: quiet, or not measured): the cores
    other processes kept busy during the timed steps, of the run's ``cpu_count``."""
    ext, cpus = interference_cores, cpu_count or os.cpu_count() or 1
    if ext is None or ext <= BUSY_SHARE * float(cpus):
        return None
    return (f"machine busy: other processes kept {ext:.2f} of {cpus} core(s) busy during the timed steps "
            f"(above {BUSY_SHARE:.0%} of the machine); its timings are not reliable")
