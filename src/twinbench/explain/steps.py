"""Finding a trace's steps, and a step's window on a device; shared by the torch and JAX readers.

Steps come from, in order: the ``--step-marker NAME`` the user gives; the profiler's own step events
(``ProfilerStep#N``, ``jax.profiler.StepTraceAnnotation``); twinbench's ``twinbench_step``; the user's
annotations (``record_function`` / ``TraceAnnotation``) whose name says step or iteration; failing those, the
repeating top-level pattern (torch: the top-level op that starts each repetition on the busiest thread; JAX:
the executions of the main XLA module on the device). Each reader says which it used.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

_NUMBERED = re.compile(r"(#\d+.*|_\d+)$")
_STEPLIKE = re.compile(r"step|iter", re.IGNORECASE)


class TraceError(ValueError):
    """A trace that cannot be read, or one in which no steps can be found."""


def is_steplike(name: str) -> bool:
    """Whether an annotation's name says step or iteration (what :func:`from_markers` looks for)."""
    return bool(_STEPLIKE.search(name))


def base(name: str) -> str:
    """A marker's name without its step number: ``ProfilerStep#7`` and ``twinbench_step_3`` -> their stem."""
    return _NUMBERED.sub("", name)


@dataclass
class Marked:
    """An annotation-like event: name, start, end (any one time unit)."""

    name: str
    start: float
    end: float


@dataclass
class Steps:
    spans: list[tuple[float, float]]
    method: str
    notes: list[str] = field(default_factory=list)


def parse_window(text: str) -> tuple[int | None, int | None]:
    """``--steps A:B`` (``A:``, ``:B``): the steps found, counted from 0 in trace order, A to B-1, as a Python
    slice reads; a :class:`TraceError` line for anything else."""
    a, sep, b = text.partition(":")
    try:
        lo, hi = (int(a) if a.strip() else None), (int(b) if b.strip() else None)
    except ValueError:
        lo = hi = -1
    if not sep or (lo is not None and lo < 0) or (hi is not None and hi < 1) or (
            lo is not None and hi is not None and hi <= lo):
        raise TraceError(f"--steps {text!r}: a window A:B of the steps found, counted from 0 (A:B takes A to B-1; "
                         "A: and :B leave one end open), e.g. 100:120")
    return lo, hi


def bounds(n: int, window: tuple[int | None, int | None], method: str) -> tuple[int, int, list[str]]:
    """(first, past the last, notes) of a ``--steps`` window among ``n`` steps found by ``method``: an end past
    the last step is cut there (and said); a start past it is one :class:`TraceError` line."""
    lo, hi = window[0] or 0, n if window[1] is None else window[1]
    if lo >= n:
        raise TraceError(f"--steps {lo}:{'' if window[1] is None else hi}: the trace has {n} steps "
                         f"(0 to {n - 1}, from {method})")
    if hi > n:
        return lo, n, [f"--steps {lo}:{hi}: the trace has {n} steps, {lo} to {n - 1} explained"]
    return lo, hi, []


def select(found: Steps, window: tuple[int | None, int | None] | None) -> Steps:
    """The steps of ``window`` (:func:`parse_window`) among those found; all of them when None."""
    if window is None:
        return found
    n = len(found.spans)
    lo, hi, notes = bounds(n, window, found.method)
    return Steps(found.spans[lo:hi], f"{found.method}; steps {lo} to {hi - 1} of {n} (--steps)",
                 [*found.notes, *notes])


class Within:
    """Which of ``spans`` holds a time: the first (in their order) with start <= t <= end, by bisection when
    the spans are sorted by start (a long trace has thousands), else by a scan."""

    def __init__(self, spans: Sequence[tuple[float, float]]) -> None:
        self.spans = list(spans)
        self.starts = [s for s, _ in self.spans]
        self.sorted = all(a <= b for a, b in itertools.pairwise(self.starts))
        self.reach = list(itertools.accumulate((e for _, e in self.spans), max))  # the latest end so far

    def first(self, t: float) -> int:
        """The index of the first span holding ``t``, -1 when none does."""
        if not self.sorted:
            return next((i for i, (s, e) in enumerate(self.spans) if s <= t <= e), -1)
        last = bisect.bisect_right(self.starts, t) - 1  # spans after it start after t
        i = bisect.bisect_left(self.reach, t)  # the first span whose end reaches t
        return i if i <= last else -1


def top_level(events: Sequence[Marked]) -> list[Marked]:
    """The events not inside another of them (a marker nested in itself counts once)."""
    out: list[Marked] = []
    for e in sorted(events, key=lambda e: (e.start, -e.end)):
        if out and e.start >= out[-1].start and e.end <= out[-1].end:
            continue
        out.append(e)
    return out


def from_markers(events: Iterable[Marked], marker: str | None, profiler_names: Sequence[str],
                 user_names: set[str] | None = None) -> Steps | None:
    """Steps from named events: the user's ``marker``; else the first of ``profiler_names`` present; else the
    repeating step-like user annotation with the most time. None when there is none of those."""
    events = list(events)
    if marker:
        found = [e for e in events if e.name == marker or base(e.name) == marker]
        if not found:
            raise TraceError(f"no event named {marker!r} (--step-marker) in the trace")
        return Steps(_spans(found), f"--step-marker {marker}")
    for name in profiler_names:
        found = [e for e in events if base(e.name) == name]
        if found:
            return Steps(_spans(found), f"{name} events")
    if user_names is None:
        return _repeating_annotation(events, lambda n: bool(_STEPLIKE.search(n)))
    return (_repeating_annotation([e for e in events if e.name in user_names], lambda n: bool(_STEPLIKE.search(n)))
            or _repeating_annotation(top_level([e for e in events if e.name in user_names]),
                                     lambda n: not _FRAMEWORK.match(n))
            or _repeating_annotation(top_level([e for e in events if e.name in user_names]),
                                     lambda n: not _FRAMEWORK.match(n), least=1))


_FRAMEWORK = re.compile(r"^(nccl:|Optimizer\.|enumerate\(DataLoader\)|DistributedDataParallel|## |"
                        r"autograd::|CompiledFunction|Torch-Compiled)")


def _repeating_annotation(events: Sequence[Marked], wanted: Callable[[str], bool], least: int = 2) -> Steps | None:
    """The annotation (by base name) occurring ``least`` times or more with the most time among those
    ``wanted``."""
    counts: Counter[str] = Counter()
    time: Counter[str] = Counter()
    for e in events:
        if wanted(e.name):
            counts[base(e.name)] += 1
            time[base(e.name)] += e.end - e.start
    repeating = [n for n, c in counts.items() if c >= least]
    if not repeating:
        return None
    name = max(repeating, key=lambda n: time[n])
    how = "repeats" if least > 1 else "the only user annotation of its kind: one step"
    return Steps(_spans([e for e in events if base(e.name) == name]), f"the annotation {name!r} ({how})")


def _spans(found: Sequence[Marked]) -> list[tuple[float, float]]:
    return [(e.start, e.end) for e in top_level(found)]


def repeating_pattern(top: Sequence[Marked]) -> Steps | None:
    """Steps from a thread's top-level events: the name that starts each repetition (one that occurs >= 2
    times, as often as the rarest repeating name, first in the trace); a step runs from one occurrence to the
    next. None when nothing repeats."""
    counts = Counter(e.name for e in top)
    repeating = {n: c for n, c in counts.items() if c >= 2}
    if not repeating:
        return None
    fewest = min(repeating.values())
    first = next(e.name for e in top if repeating.get(e.name) == fewest)
    starts = [e.start for e in top if e.name == first]
    end = max(e.end for e in top)
    spans = list(itertools.pairwise(starts))
    if not spans:
        return None
    if end > starts[-1]:  # the last repetition runs to the end of the pattern's last event
        last = [e for e in top if e.start >= starts[-1]]
        if [e.name for e in last] == [e.name for e in top if starts[-2] <= e.start < starts[-1]]:
            spans.append((starts[-1], end))
    return Steps(spans, f"the repeating top-level pattern (each step starts at {first!r}; no step markers)")


def union(intervals: Iterable[tuple[float, float]], lo: float, hi: float) -> float:
    """The length of the union of ``intervals`` clipped to ``[lo, hi]``."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted((max(s, lo), min(e, hi)) for s, e in intervals):
        if e <= s:
            continue
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s  # type: ignore[operator]
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s  # type: ignore[operator]
    return total


def device_windows(spans: Sequence[tuple[float, float]], kernels: Sequence[Sequence[tuple[float, float]]],
                   earlier_end: float) -> list[tuple[float, float]]:
    """Each step's window on a device, from the host steps ``spans`` and the (start, end) of the kernels each
    launched: it starts at the host step's start, or later when the device was still busy with earlier work
    (``earlier_end`` for the first step, the previous window's end after), but never after the step's first
    kernel; it ends at the host step's end or its last kernel's end, whichever is later, but never after the
    next window starts. Consecutive windows tile the device's timeline whether the host or the device is ahead,
    and the device's idle time within a window is the step's idle."""
    out: list[tuple[float, float]] = []
    prev_end = earlier_end
    for (t0, t1), mine in zip(spans, kernels, strict=True):
        first = min((s for s, _ in mine), default=t0)
        start = min(max(t0, prev_end), first)
        if out and out[-1][1] > start:
            out[-1] = (out[-1][0], max(out[-1][0], start))
        end = max([t1, *(e for _, e in mine)])
        out.append((start, end))
        prev_end = end
    return out
