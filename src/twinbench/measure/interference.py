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
from typing import Any

from twinbench.machine import ranks

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
    return os.getppid() if ranks().torchelastic_run_id else os.getpid()


@dataclass(frozen=True)
class Interference:
    """What other processes took from the machine over a window (the record's conditions of the same names)."""

    interference_cores: float | None = None  # cores they kept busy, on average
    cpu_busy_per_core: dict[str, float | None] = field(default_factory=dict)  # each core's busy share, all processes
    interference_window_s: float | None = None


@dataclass
class Meter:
    """``with Meter() as m: <timed steps>``; then :meth:`fields` for the record."""

    root: int = field(default_factory=own_root)
    _t0: float = 0.0
    _busy0: dict[str, float] | None = None
    _own0: float = 0.0
    result: Interference = field(default_factory=Interference)  # not measured: every field None

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
        self.result = Interference(interference_cores=round(external, 3), cpu_busy_per_core=dict(per_core),
                                   interference_window_s=round(wall, 3))

    def fields(self) -> Interference:
        return self.result


def busy_warning(interference_cores: float | None, cpu_count: int | None) -> str | None:
    """The "machine busy" warning from the measured interference (None: quiet, or not measured): the cores
    other processes kept busy during the timed steps, of the run's ``cpu_count``."""
    ext, cpus = interference_cores, cpu_count or os.cpu_count() or 1
    if ext is None or ext <= BUSY_SHARE * float(cpus):
        return None
    return (f"machine busy: other processes kept {ext:.2f} of {cpus} core(s) busy during the timed steps "
            f"(above {BUSY_SHARE:.0%} of the machine); its timings are not reliable")


#: a run's steady steps spreading wider than this (p90 / p10) while other processes used the cores: that run is
#: the one they disturbed (a run that kept its pace lost a share of the cores, not its steadiness)
SPREAD_DISTURBED = 1.5
#: load average per core from other processes above which a run without a measured interference counts as busy
#: (machine.HIGH_LOAD, repeated: measure/ reads no configuration module)
LOAD_BUSY = 0.5


def _others(r: Any) -> float | None:
    """Cores other processes kept busy around a run: measured during its steps, else its load average's."""
    c = r.conditions
    if c.interference_cores is not None:
        return float(c.interference_cores)
    load = c.load_avg_1m_external if c.load_avg_1m_external is not None else c.load_avg_1m
    return None if load is None else float(load)


def _busy(r: Any) -> bool:
    c, others = r.conditions, _others(r)
    cpus = c.cpu_count or os.cpu_count() or 1
    if others is None:
        return False
    share = BUSY_SHARE if c.interference_cores is not None else LOAD_BUSY
    return others > share * cpus


def disturbed(records: list[Any], names: dict[str, str] | None = None, threads_flag: str = "--threads") -> list[str]:
    """Which side of a comparison the other processes on this machine disturbed, and the one flag that fixes it.

    A run other processes shared the cores with (measured interference over ``BUSY_SHARE`` of the cores, or a
    load average over ``LOAD_BUSY`` per core where not measured) is named disturbed when its steps spread more
    than ``SPREAD_DISTURBED`` (p90 / p10), and as sharing its cores when it ran more threads than the cores the
    others left: a framework that splits every op over all the cores (torch's intra-op pool) waits at each op
    for its slowest thread, so one descheduled thread stalls the step. The others are steady. The flag:
    ``--threads N``, N the cores the others left (at least 1), the same for both frameworks; where every named
    run already fits in those, no flag fixes it and the line says to measure on a quiet machine. No line on a
    quiet machine. ``names``: run_id -> the name its table row shows."""
    ok = [r for r in records if r.status == "ok" and r.timing.step_ms]
    busy = [r for r in ok if _busy(r)]
    if not busy:
        return []
    names = names or {}
    cpus = max(r.conditions.cpu_count or os.cpu_count() or 1 for r in busy)
    others = max(_others(r) or 0.0 for r in busy)
    free = max(int(cpus - others), 1)

    def name(r: Any) -> str:
        return names.get(r.run.run_id) or f"{r.run.framework}/{r.run.strategy}"

    def spread(r: Any) -> float | None:
        lo, hi = r.timing.step_ms_p10, r.timing.step_ms_p90
        return hi / lo if lo and hi else None

    def threads(r: Any) -> int:
        return r.conditions.threads or r.conditions.cpu_count or cpus

    hit = sorted((r for r in busy if (s := spread(r)) is not None and s > SPREAD_DISTURBED),
                 key=lambda r: -(spread(r) or 0.0))  # the most disturbed first
    crowded = [r for r in busy if r not in hit and threads(r) > free]

    def ms(x: float) -> str:
        return f"{x:.0f}" if x >= 100 else f"{x:.3g}"

    def what(r: Any) -> str:
        s = spread(r)
        steps = (f"steps p10-p90 {ms(r.timing.step_ms_p10)}-{ms(r.timing.step_ms_p90)} ms, {s:.1f}x" if s
                 else f"median {ms(r.timing.step_ms)} ms")
        return f"{name(r)} ({threads(r)} thread(s), {steps})"

    how = "measured during its steps" if any(r.conditions.interference_cores is not None for r in busy) else \
        "by the load average"
    line = f"busy machine: other processes kept up to {others:.2f} of {cpus} core(s) busy ({how})"
    if hit:
        line += (f"; disturbed ({'their' if len(hit) > 1 else 'its'} steps spread, most first): "
                 + ", ".join(what(r) for r in hit))
    if crowded:
        line += (f"; {'also ' if hit else ''}sharing its cores (more threads than the {free} core(s) left, so a "
                 "descheduled thread stalls each op): " + ", ".join(what(r) for r in crowded))
    steady = [r for r in ok if r not in hit and r not in crowded]
    if steady and (hit or crowded):
        line += "; steady: " + ", ".join(what(r) for r in steady)
    if not hit and not crowded:
        return [f"{line}; every run kept its pace within a {SPREAD_DISTURBED:g}x spread and fits in the cores left: "
                "absolute times are slower than on a quiet machine, the comparison holds"]
    if any(threads(r) > free for r in hit + crowded):
        line += (f". The flag that fixes it: `{threads_flag} {free}` (every run on the {free} core(s) the others "
                 "leave, the same for both frameworks)")
    else:
        line += ". No flag fixes it (each run already fits in the cores the others leave): measure again on a quiet "\
                "machine"
    return [line]
