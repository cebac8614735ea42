"""A run's step, attributed: phases x categories (and scopes) in milliseconds per step, from a trace."""

from __future__ import annotations

import itertools
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import msgspec

from twinbench.explain.side import Kernel
from twinbench.explain.taxonomy import COMPILATION, one_compile

PHASES = ("input", "forward", "backward", "optimizer", "rest")
#: a reader's phase for an op a compiler ran (:meth:`Breakdown.add` files it as ``rest / compilation``)
COMPILING = "compiling"
DISTURBED = 1.25  # a traced step this much slower than the fastest was disturbed (descheduled, preempted)


def undisturbed(durations: list[float], b: Breakdown | None = None, compiling: list[float] | None = None) -> list[int]:
    """The indices of the traced steps to attribute: those within ``DISTURBED`` x the fastest. A step that
    another process descheduled is slow in whichever op it was running; averaging it in would blame that op.
    ``compiling``: each step's time a compiler ran in it (:func:`compile_time`): a step that compiled is slow
    for a reason the trace names (the compile, and the first run of what it compiled), not disturbed: it is
    kept. With ``b``: the spread of the kept steps that compiled nothing ((slowest - fastest) / median) goes to
    ``b.step_spread``, and those steps' times over the same mean (``b.step_times``) to the noise explain
    measures."""
    less = compiling or [0.0] * len(durations)
    plain = [i for i, c in enumerate(less) if c <= 0]
    fastest = min((durations[i] for i in plain), default=0.0)
    keep = [i for i, d in enumerate(durations) if less[i] > 0 or d <= DISTURBED * fastest]
    kept = [durations[i] for i in keep if less[i] <= 0]
    if b is not None:
        mean = statistics.fmean(durations[i] for i in keep) if keep else 0.0
        if mean > 0:  # over the attributed step (their mean), which a reader scales to its step
            b.step_times = [t / mean for t in kept]
        if len(kept) >= 2 and statistics.median(kept) > 0:
            b.step_spread = (max(kept) - min(kept)) / statistics.median(kept)
    return keep


def compile_time(spans: list[tuple[float, float]], events: list[tuple[float, float, str]]) -> tuple[
        list[float], list[int]]:
    """Per step span: the time a compiler ran inside it (the union of the compile events ``events``, each
    ``(start, end, name)``, clipped to the span) and the compiles that started in it (the events that are one
    compile each, :func:`taxonomy.one_compile`, else the outermost compile events)."""
    evs = sorted(events, key=lambda e: (e[0], -e[1]))
    # a compile is an outermost event of those that are one each (torch's backend_compile runs inside its
    # frame's _compile.compile_inner), else an outermost compile event
    counted: list[tuple[float, float, str]] = []
    for pool in ([e for e in evs if one_compile(e[2])], evs):
        reach = float("-inf")
        for e in pool:
            if e[0] >= reach:
                counted.append(e)
            reach = max(reach, e[1])
        if counted:
            break
    ms, count = [], []
    for s0, s1 in spans:
        ms.append(union_within([(a, b) for a, b, _ in evs if a < s1 and b > s0], s0, s1))
        count.append(sum(1 for a, _, _ in counted if s0 <= a < s1))
    return ms, count


def union_within(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    """The length of the union of ``intervals`` clipped to ``[lo, hi]``."""
    total, end = 0.0, lo
    for a, b in sorted(intervals):
        a, b = max(a, end), min(b, hi)
        if b > a:
            total += b - a
            end = b
    return total


#: an annotation covering this share of its loop's iteration (start to start) or more spans the whole iteration
WHOLE_ITERATION = 0.95


def step_cut(spans: list[tuple[float, float]], per_ms: float) -> dict[str, float]:
    """What a trace's step annotation spans: its mean length and the loop's iteration (the median time from
    one step's start to the next's), in ms (``per_ms``: the trace's time units per millisecond). An annotation
    spanning under :data:`WHOLE_ITERATION` of the iteration leaves loop work (the batch, logging, a host read)
    outside its steps: the compiled step only, where a ``ProfilerStep`` spans the whole iteration."""
    if len(spans) < 2:
        return {}
    s = sorted(spans)
    pairs = sorted(((a[1] - a[0]) / (b[0] - a[0]), a[1] - a[0], b[0] - a[0])
                   for a, b in itertools.pairwise(s) if b[0] > a[0])
    if not pairs:
        return {}
    coverage, span, period = pairs[len(pairs) // 2]  # the median step: a disturbed one does not decide
    return {"span_ms": span / per_ms, "iteration_ms": period / per_ms, "coverage": coverage}


@dataclass
class OpTime:
    """One op's (or kernel's) time per step, kept whole for tables that need more than the sums (FLOP/s per
    category, matmuls by shape): ``name`` the kernel or op, ``op`` the framework op that launched it (torch
    aten op, XLA instruction), ``shapes`` its input shapes where the trace records them."""

    name: str
    category: str
    phase: str
    op: str = ""
    shapes: str = ""
    ms: float = 0.0
    count: int = 0

    def kernel(self) -> Kernel:
        """As an explained side lists it (ms rounded)."""
        return Kernel(name=self.name, category=self.category, phase=self.phase, op=self.op, shapes=self.shapes,
                      ms=round(self.ms, 5), count=self.count)


@dataclass
class Breakdown:
    """Per-step milliseconds of one traced run. ``cells[phase][category]``; ``rest`` holds the step time no op
    covers (``idle``: on a GPU the device idle between kernels within the step; on a CPU dispatch, Python,
    idle threads); ``other`` lists the largest uncategorized ops; ``ops`` every op's time (:class:`OpTime`)."""

    step_ms: float = 0.0
    cells: dict[str, dict[str, float]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(float)))
    scopes: dict[str, dict[str, float]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(float)))
    other: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    overlap: float = 1.0  # summed op time / the step's busy time (> 1: ops ran concurrently, scaled down)
    source: str = ""
    steps_traced: int = 0  # steps in the trace; those attributed (undisturbed) are the ``finish`` count
    steps_used: int = 0
    ops: dict[tuple[str, str, str, str], OpTime] = field(default_factory=dict)
    device: str = ""  # "GPU" (kernels on a device) or "CPU" (host ops); which device/rank, in ``notes``
    step_method: str = ""  # how the steps were found
    idle: str = ""  # what ``rest/idle`` means for this trace
    notes: list[str] = field(default_factory=list)  # what was chosen for the user (rank, device, steps)
    peak_tflops: float | None = None  # the device's peak where the trace names the device (TPU: datasheet)
    peak_source: str = ""
    hlo_path: str = ""  # JAX: the compiled HLO text its ops were named by ("" when none)
    cut: dict[str, float] = field(default_factory=dict)  # what the step annotation spans (:func:`steps.cut`)
    step_spread: float = 0.0  # the attributed steps' (slowest - fastest) / median: how much one step moves
    step_times: list[float] = field(default_factory=list)  # the attributed steps that compiled nothing, / mean step
    compiles: int = 0  # compiles that started inside the attributed steps (:func:`compile_time`)
    #: the fusing compiler whose kernels the trace holds ("XLA": a JAX profile, whatever framework wrote the
    #: program; "" for an eager torch trace, whose Inductor kernels causes.fuses tells by name): a recorded fact
    compiler: str = ""
    #: every attributed op as read, one row per (phase, category, scope, name, detail): ``[phase, category, ms,
    #: scope, name, detail, times, loose]``, ms summed over the steps used and not yet divided, ``times`` the
    #: entries summed, ``loose`` those that named no op (``ident``); explain/ops.py groups them (FLOPs, shapes
    #: from ``detail``) and divides as ``finish`` did the cells. A row per distinct op, not per event: a long
    #: trace's rows are its step's
    raw: list[list[Any]] = field(default_factory=list)
    #: the ops (``ident``) that launched entries, as the rows of their entries in order (each row once): how many
    #: ops had each such signature. explain/ops.py counts an op's call and FLOPs once, on its first row that
    #: computes (its compute kernel, not a copy it also launched)
    signatures: dict[tuple[int, ...], int] = field(default_factory=dict)
    _rows: dict[tuple[Any, ...], int] = field(default_factory=dict, repr=False)
    _open: dict[int, list[int]] = field(default_factory=dict, repr=False)

    def add(self, phase: str, category: str, ms: float, scope: str = "", name: str = "", op: str = "",
            shapes: str = "", detail: Any = None, ident: int | None = None) -> None:
        """One op's (or kernel's) time in one step. ``detail``: what the op groups read (a reader passes one
        object per distinct detail, so that entries sharing it share a row); ``ident``: the launching op, whose
        entries :meth:`close_ops` turns into a signature."""
        if phase == COMPILING:  # an op run by a compiler at work (torch.compile's tracing, its autotuning)
            phase, category = "rest", COMPILATION
        if phase == "optimizer" and category not in ("matmul", "collectives"):
            category = "optimizer"  # the update is one category, whatever its element-wise ops are
        key = (phase, category, scope, name, _detail_key(detail))
        r = self._rows.get(key)
        if r is None:
            r = self._rows[key] = len(self.raw)
            self.raw.append([phase, category, 0.0, scope, name, detail, 0, 0])
        row = self.raw[r]
        row[2] += ms
        row[6] += 1
        if ident is None:
            row[7] += 1
        else:
            sig = self._open.setdefault(ident, [])
            if r not in sig:
                sig.append(r)
        self.cells[phase][category] += ms
        if scope:
            self.scopes[scope][phase] += ms
        if category == "other" and name:
            self.other[name] += ms
        if name:
            key = (name, op, phase, shapes)
            t = self.ops.get(key)
            if t is None:
                t = self.ops[key] = OpTime(name, category, phase, op, shapes)
            t.ms += ms
            t.count += 1

    def close_ops(self) -> None:
        """The ops whose entries are all added (a reader calls it after each step): their signatures counted."""
        for sig in self._open.values():
            t = tuple(sig)
            self.signatures[t] = self.signatures.get(t, 0) + 1
        self._open.clear()

    def compiling(self, ms: list[float], count: list[int], keep: list[int]) -> None:
        """The kept steps' compile time (:func:`compile_time`, ms each) as ``rest / compilation``, their
        compiles counted."""
        for i in keep:
            if ms[i] > 0:
                self.cells["rest"][COMPILATION] += ms[i]
            self.compiles += count[i]

    def phases(self) -> dict[str, float]:
        return {p: sum(self.cells.get(p, {}).values()) for p in PHASES}

    def categories(self) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for p in PHASES:
            for c, ms in self.cells.get(p, {}).items():
                if p != "rest" or c != "idle":
                    out[c] += ms
        return dict(out)

    def finish(self, steps: int, step_ms: float, busy_ms: float | None = None) -> Breakdown:
        """Divide sums over ``steps`` traced steps; scale ops down when they overlap; fill ``rest/idle``.
        ``busy_ms``: the per-step time anything ran (a device's kernels, their union); without it, the ops'
        sum capped at the step."""
        self.close_ops()
        n = max(steps, 1)
        for table in (self.cells, self.scopes):
            for row in table.values():
                for k in row:
                    row[k] /= n
        for k in self.other:
            self.other[k] /= n
        for t in self.ops.values():
            t.ms /= n
            t.count = round(t.count / n) or 1
        total = sum(sum(r.values()) for r in self.cells.values())
        if busy_ms is not None:  # a compiler runs on the host while the device waits: busy all the same
            busy_ms += self.cells.get("rest", {}).get(COMPILATION, 0.0)
        busy = min(total, step_ms) if busy_ms is None else min(busy_ms, step_ms)
        if total > busy > 0:
            self.overlap = total / busy
            for table in (self.cells, self.scopes):
                for row in table.values():
                    for k in row:
                        row[k] /= self.overlap
        self.step_ms = step_ms
        self.steps_used = steps
        self.cells["rest"]["idle"] += max(step_ms - min(total, busy), 0.0)
        return self

    def to_dict(self) -> dict[str, Any]:
        return {"step_ms": round(self.step_ms, 4), "overlap": round(self.overlap, 3), "source": self.source,
                "steps_traced": self.steps_traced, "steps_used": self.steps_used,
                "cells": {p: {c: round(v, 4) for c, v in row.items() if v} for p, row in self.cells.items()},
                "scopes": {s: {p: round(v, 4) for p, v in row.items() if v} for s, row in self.scopes.items()},
                "other": self.largest_other(), "phases": {p: round(v, 4) for p, v in self.phases().items()},
                "categorized_share": self.categorized_share(), "device": self.device,
                "step_method": self.step_method, "idle": self.idle, "notes": list(self.notes),
                "compiles": self.compiles, "ops": [msgspec.to_builtins(t.kernel()) for t in self.top_ops(200)]}

    def largest_other(self, n: int = 8) -> dict[str, float]:
        """The ``n`` largest uncategorized ops, ms a step."""
        return dict(sorted(((k, round(v, 4)) for k, v in self.other.items()), key=lambda kv: -kv[1])[:n])

    def categorized_share(self) -> float:
        """The share of the ops' time (idle and compiling left out) in a category other than ``other``."""
        cats = self.categories()
        op_ms = sum(v for k, v in cats.items() if k not in ("idle", COMPILATION))  # ops' time, categorized or not
        return round(1 - cats.get("other", 0.0) / op_ms, 4) if op_ms else 0.0

    def top_ops(self, n: int = 10, category: str | None = None) -> list[OpTime]:
        """The ``n`` largest ops (of one category), per step, before any overlap scaling."""
        ops = [t for t in self.ops.values() if category is None or t.category == category]
        return sorted(ops, key=lambda t: -t.ms)[:n]


def _detail_key(detail: Any) -> Any:
    """What makes two entries' details the same row: equal hashable contents, else the same object."""
    if detail is None:
        return None
    try:
        k = tuple(detail.items()) if isinstance(detail, dict) else detail
        hash(k)
        return k
    except TypeError:
        return id(detail)
