"""The machine's load when a run starts, less what twinbench's own ended runs still make of it.

Every record carries the load it started under (``load_avg_1m``, ``cpu_count``, ``load_avg_1m_external``), read
by the runner right before it starts a worker (``runner.run_one``) and told to the worker through
``machine.LOAD_ENV``; :class:`LoadMeter` is what reads it and what remembers each ended run's share of it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import resource
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from twinbench.machine import cache_root


@dataclass(frozen=True)
class Reading:
    """:meth:`LoadMeter.reading` as a value (None where the OS does not say)."""

    load_avg_1m: float | None
    cpu_count: int | None
    load_avg_1m_external: float | None  # less what twinbench's own ended runs still add to it


@dataclass
class LoadMeter:
    """The machine's load when a run starts, and how much of it twinbench's own ended runs still make.

    Linux's 1-minute load average is an exponentially damped average (time constant 60 s) of the runnable
    tasks, so a run that just used every core leaves a good part of that in it for the next minute: on
    its own, the next run (of this command, or of the next command of a script) would be flagged as run on
    a busy machine although nothing else runs. So each ended run's average number of runnable tasks is
    remembered with when it ran, in this process and in ``recent_runs.jsonl`` of twinbench's cache
    directory (shared by the twinbench commands run one after another), and its remaining share of the load
    average, runnable x (1 - e^(-duration/60)) x e^(-since_end/60), is taken off: ``load_avg_1m_external``.
    Runs still going are never taken off.

    The runnable tasks are what the load average counts: the threads of this process's descendants in state
    R or D, sampled every ``SAMPLE_S`` while the run goes (Linux ``/proc``). A run of more processes than
    cores (4 torchrun ranks on 2 cores) has more runnable tasks than busy cores, so its CPU time / wall time
    (from ``getrusage(RUSAGE_CHILDREN)``, the floor where ``/proc`` is missing) would leave part of its load
    to be taken for another process's.
    """

    runs: list[tuple[float, float, float]] = field(default_factory=list)  # (end time, duration s, runnable)
    shared: bool = True  # also read and write the history file of the cache directory
    ident: str = field(default_factory=lambda: f"{os.getpid()}-{time.time_ns()}")

    def _history(self) -> Path:
        return cache_root() / "recent_runs.jsonl"

    def _ended(self, now: float) -> list[tuple[float, float, float]]:
        runs = list(self.runs)
        if self.shared:
            try:
                lines = self._history().read_text().splitlines()[-1000:]
            except OSError:
                lines = []
            for line in lines:
                try:
                    end, dur, busy, ident = json.loads(line)
                except (ValueError, TypeError):
                    continue
                if ident != self.ident:
                    runs.append((float(end), float(dur), float(busy)))
        return [r for r in runs if 0 <= now - r[0] < 600]

    def own(self, now: float) -> float:
        return sum(busy * (1 - math.exp(-dur / 60)) * math.exp(-(now - end) / 60)
                   for end, dur, busy in self._ended(now))

    def reading(self) -> Reading:
        """``load_avg_1m``, ``cpu_count``, ``load_avg_1m_external`` now (None where the OS does not say)."""
        try:
            load = os.getloadavg()[0]
            cpus = len(os.sched_getaffinity(0))
        except (OSError, AttributeError):
            return Reading(load_avg_1m=None, cpu_count=os.cpu_count(), load_avg_1m_external=None)
        return Reading(load_avg_1m=round(load, 2), cpu_count=cpus,
                       load_avg_1m_external=round(max(load - self.own(time.time()), 0.0), 2))

    def now(self) -> Reading:
        """:meth:`reading` (the name the commands know it by)."""
        return self.reading()

    def add(self, end: float, duration: float, busy: float) -> None:
        self.runs = [r for r in self.runs if end - r[0] < 600] + [(end, duration, busy)]
        if not self.shared:
            return
        path = self._history()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a") as f:  # one short line per write: concurrent commands do not tear it
                f.write(json.dumps([round(end, 3), round(duration, 3), round(busy, 3), self.ident]) + "\n")
            if path.stat().st_size > 100_000:  # keep the last 10 minutes only
                keep = [ln for ln in path.read_text().splitlines()[-1000:] if _recent(ln, end)]
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text("".join(ln + "\n" for ln in keep))
                tmp.replace(path)
        except OSError:
            pass

    @contextlib.contextmanager
    def track(self) -> Iterator[None]:
        """Remember the runnable tasks of the children run inside this block (at least their busy cores)."""
        def cpu() -> float:
            ru = resource.getrusage(resource.RUSAGE_CHILDREN)
            return ru.ru_utime + ru.ru_stime

        samples: list[int] = []
        stop = threading.Event()
        sampler = threading.Thread(target=_sample_runnable, args=(samples, stop), daemon=True)
        t0, c0 = time.time(), cpu()
        sampler.start()
        try:
            yield
        finally:
            stop.set()
            sampler.join()
            end = time.time()
            if end - t0 > 0.1:
                busy = (cpu() - c0) / (end - t0)
                self.add(end, end - t0, max(busy, sum(samples) / len(samples)) if samples else busy)


SAMPLE_S = 0.25  # how often LoadMeter counts the runnable tasks of a run


def runnable_tasks(pid: int) -> int | None:
    """Threads of ``pid``'s descendants (not ``pid`` itself) in state R or D, the tasks Linux's load average
    counts; None without ``/proc``."""
    proc = Path("/proc")
    if not (proc / str(pid) / "task").is_dir():
        return None
    count, todo, seen = 0, [pid], {pid}
    while todo:
        parent = todo.pop()
        try:
            tids = [t.name for t in (proc / str(parent) / "task").iterdir()]
        except OSError:
            continue
        for tid in tids:
            with contextlib.suppress(OSError):
                kids = {int(c) for c in (proc / str(parent) / "task" / tid / "children").read_text().split()}
                todo.extend(kids - seen)
                seen |= kids
            if parent != pid:
                with contextlib.suppress(OSError, IndexError):
                    stat = (proc / str(parent) / "task" / tid / "stat").read_text()
                    count += stat[stat.rindex(")") + 2] in "RD"
    return count


def _sample_runnable(samples: list[int], stop: threading.Event) -> None:
    while not stop.wait(SAMPLE_S):
        n = runnable_tasks(os.getpid())
        if n is None:
            return
        samples.append(n)


def _recent(line: str, now: float) -> bool:
    try:
        return now - float(json.loads(line)[0]) < 600
    except (ValueError, TypeError, IndexError):
        return False


