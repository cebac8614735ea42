"""A torch trace's events, once parsed into columns (:class:`torch_trace.Events`), attributed in bounded memory.

The host ops and launches are cut into buckets of time (whole steps each, :data:`spill.PART` events or so) and
each thread's ops are walked in time order, bucket after bucket, its stack carried over (:class:`Walk`): each
op's phase, category and scope come from its parent chain, each launch's op is the innermost ``cpu_op`` around
it. A launch leaves a record (its correlation id, time, op) in a partition by correlation id; the device's
kernels are partitioned alike and joined to their launches one partition at a time; each kernel then goes to the
bucket of the step that launched it (:func:`device`), and the steps are attributed a bucket at a time. On a
CPU-only trace an op's self time is known once the walk leaves it (:func:`host_only`). What is held at once is a
bucket and the tables of distinct names, shapes and chains, whatever the trace's length.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from twinbench.explain import spill, structure, taxonomy
from twinbench.explain import steps as st
from twinbench.explain.breakdown import Breakdown, compile_time, undisturbed
from twinbench.explain.flops import OpArgs, TorchOp
from twinbench.explain.steps import TraceError

#: a host op or launch, as a time bucket holds it
EVENT = np.dtype([("row", "i8"), ("cat", "i1"), ("name", "i4"), ("ts", "f8"), ("dur", "f8"), ("tid", "i4"),
                  ("extra", "i8")])
#: a launch and the op around it (``op`` -1: none)
LAUNCH = np.dtype([("corr", "i8"), ("row", "i8"), ("ts", "f8"), ("kind", "i4"), ("op", "i8"), ("op_kind", "i4"),
                   ("op_name", "i4"), ("op_args", "i4")])
#: a kernel (memcpy, memset) of the device explained
KERNEL = np.dtype([("row", "i8"), ("ts", "f8"), ("dur", "f8"), ("cat", "i1"), ("name", "i4"), ("corr", "i8")])
#: a kernel joined to its launch (``linked`` 0: none in the trace), with the step that launched it
JOINED = np.dtype([("row", "i8"), ("ts", "f8"), ("dur", "f8"), ("cat", "i1"), ("name", "i4"), ("step", "i4"),
                   ("linked", "i1"), ("kind", "i4"), ("op", "i8"), ("op_kind", "i4"), ("op_name", "i4"),
                   ("op_args", "i4")])
#: memo tables (parent chains, names' categories) are emptied past this many entries: they only save work
_MEMO = 1 << 16


#: launches held by the walk before they go to their partitions
_LAUNCHES_HELD = 1 << 16


def _launch_columns() -> dict[str, array[Any]]:
    return {k: array(t) for k, t in (("corr", "q"), ("row", "q"), ("ts", "d"), ("kind", "i"), ("op", "q"),
                                     ("op_kind", "i"), ("op_name", "i"), ("op_args", "i"))}


class Codes:
    """The category codes the walk tells apart (from :mod:`.torch_trace`, which owns them)."""

    def __init__(self, cpu_op: int, user: int, host: set[int], launch: set[int], device: set[int],
                 no_corr: int) -> None:
        self.cpu_op, self.user, self.host, self.launch, self.device = cpu_op, user, host, launch, device
        self.no_corr = no_corr


def step_of(inside: st.Within, times: np.ndarray) -> np.ndarray:
    """:meth:`steps.Within.first` of each time (-1: in no step), vectorized where the spans are sorted."""
    if not inside.sorted:
        return np.array([inside.first(t) for t in times.tolist()], dtype=np.int64)
    last = np.searchsorted(np.asarray(inside.starts), times, side="right") - 1
    first = np.searchsorted(np.asarray(inside.reach), times, side="left")
    return np.where(first <= last, first, -1)


class Walk:
    """Each thread's host ops and launches in time order (outer before inner), walked with a stack."""

    def __init__(self, ev: Any, codes: Codes, scores: Any, phase_scope: Callable[[list[str]], tuple[str, str]],
                 launches: spill.Parts | None, on_pop: Callable[[list[Any]], None] | None) -> None:
        self.ev, self.codes, self.scores, self.phase_scope = ev, codes, scores, phase_scope
        self.launches, self.on_pop = launches, on_pop
        self.kinds: list[tuple[str, str, str]] = []
        self._kind_ids: dict[tuple[str, str, str], int] = {}
        self._threads: dict[int, tuple[list[list[Any]], list[int]]] = {}  # tid -> (stack, its chain of names)
        self._chains: dict[tuple[int, ...], tuple[str, str]] = {}
        self._by_name: dict[int, str] = {}
        self._on_scores: dict[tuple[int, int], bool] = {}

    def kind(self, k: tuple[str, str, str]) -> int:
        i = self._kind_ids.get(k)
        if i is None:
            i = self._kind_ids[k] = len(self.kinds)
            self.kinds.append(k)
        return i

    def bucket(self, r: np.ndarray) -> None:
        """One bucket's events (any order): walked per thread in time order, each thread's stack kept after."""
        c = self.codes
        is_launch = np.isin(r["cat"], list(c.launch))
        # per thread, by (start, longest first); ties: host ops before launches, each in file order
        r = r[np.lexsort((is_launch, -r["dur"], r["ts"], r["tid"]))]
        names, args_of = self.ev.names, self.ev.args_of
        out = _launch_columns()
        current, stack, chain = -1, [], []
        for row, cat, n, t, dur, tid, extra in _rows(r):
            if tid != current:
                current = tid
                stack, chain = self._threads.setdefault(tid, ([], []))
            while stack and t >= stack[-1][1]:
                chain.pop()
                top = stack.pop()
                if self.on_pop is not None:
                    self.on_pop(top)
            key = (*chain, n)
            pc = self._chains.get(key)
            if pc is None:
                if len(self._chains) > _MEMO:
                    self._chains.clear()
                pc = self._chains[key] = self.phase_scope([names[x] for x in key])
            op_cat = self._by_name.get(n)
            if op_cat is None:
                if len(self._by_name) > _MEMO:
                    self._by_name.clear()
                op_cat = self._by_name[n] = taxonomy.torch_any(names[n])
            if op_cat not in ("collectives", "attention") and cat == c.cpu_op and self.scores:
                hit = self._on_scores.get((n, extra))
                if hit is None:
                    if len(self._on_scores) > _MEMO:
                        self._on_scores.clear()
                    hit = self._on_scores[n, extra] = structure.torch_on_scores(
                        names[n], args_of[extra] if extra >= 0 else None, self.scores)
                if hit:
                    op_cat = "attention"
            kind = self.kind((pc[0], op_cat, pc[1]))
            if cat in c.launch:
                if self.launches is not None:
                    owner = next((s for s in reversed(stack) if s[3] == c.cpu_op), None)
                    for k, v in (("corr", extra), ("row", row), ("ts", t), ("kind", kind)):
                        out[k].append(v)
                    for k, v in (("op", -1), ("op_kind", -1), ("op_name", -1), ("op_args", -1)) if owner is None else \
                            (("op", owner[0]), ("op_kind", owner[4]), ("op_name", owner[2]), ("op_args", owner[5])):
                        out[k].append(v)
                    if len(out["row"]) >= _LAUNCHES_HELD:
                        self._launched(out)
                        out = _launch_columns()
                continue
            if stack:
                stack[-1][7] += dur  # the parent's time in ops nested in it
            # [row, end, name, cat, kind, shapes (a cpu_op's args index), dur, child time, start]
            stack.append([row, t + dur, n, cat, kind, extra if cat == c.cpu_op else -1, dur, 0.0, t])
            chain.append(n)
        self._launched(out)

    def _launched(self, out: dict[str, array[Any]]) -> None:
        """The launches walked so far, to their partitions by correlation id."""
        if self.launches is not None and len(out["row"]):
            rec = np.empty(len(out["row"]), dtype=LAUNCH)
            for k, col in out.items():
                rec[k] = np.frombuffer(col, dtype=LAUNCH[k])
            self.launches.add(np.mod(rec["corr"], self.launches.n), rec)

    def end(self) -> None:
        """The ops still open when the events end: left, innermost first."""
        for stack, _ in self._threads.values():
            while stack:
                top = stack.pop()
                if self.on_pop is not None:
                    self.on_pop(top)


def _rows(r: np.ndarray, chunk: int = 1 << 15) -> Iterator[tuple[Any, ...]]:
    """A bucket's events as tuples of Python values, a slice at a time (whole columns as lists would hold
    tens of bytes an event more)."""
    for lo in range(0, len(r), chunk):
        part = r[lo:lo + chunk]
        yield from zip(*(part[k].tolist() for k in EVENT.names), strict=True)


def buckets(ev: Any, spans: list[tuple[float, float]], wanted: Callable[[dict[str, np.ndarray]], np.ndarray],
            store: spill.Spill) -> spill.Parts:
    """The host ops and launches (``wanted`` of a chunk) in buckets of time cut at step starts, each of about
    :data:`spill.PART` events (one step's may hold more), in file order within each."""
    starts = np.sort(np.array([s for s, _ in spans], dtype=np.float64))
    counts = np.zeros(len(starts) + 1, dtype=np.int64)
    for _, c in ev.chunks(("cat", "name", "ts", "dur")):
        m = wanted(c)
        counts += np.bincount(np.searchsorted(starts, c["ts"][m], side="right"), minlength=len(counts))
    cuts: list[float] = []
    held = 0
    for i, n in enumerate(counts.tolist()):
        if held and held + n > spill.PART:
            cuts.append(float(starts[i - 1]))
            held = 0
        held += n
    edges = np.array(cuts, dtype=np.float64)
    parts = spill.Parts(store, EVENT, len(cuts) + 1)
    for first, c in ev.chunks():
        m = wanted(c)
        rec = np.empty(int(m.sum()), dtype=EVENT)
        rec["row"] = np.flatnonzero(m) + first
        for k in ("cat", "name", "ts", "dur", "tid", "extra"):
            rec[k] = c[k][m]
        parts.add(np.searchsorted(edges, rec["ts"], side="right"), rec)
    return parts


def walk(ev: Any, parts: spill.Parts, w: Walk) -> None:
    for p in range(parts.n):
        w.bucket(parts.read(p))
    w.end()


def kernels_of(ev: Any, dev: int, codes: Codes, parts: spill.Parts, t0: float) -> float:
    """The device ``dev``'s kernels into ``parts`` by correlation id; returns the latest end of those that
    started before ``t0`` (``t0`` itself when none did)."""
    before = t0
    devs = np.array(sorted(codes.device), dtype=np.int8)
    for first, c in ev.chunks():
        m = np.isin(c["cat"], devs) & (c["tid"] == dev)
        rec = np.empty(int(m.sum()), dtype=KERNEL)
        rec["row"] = np.flatnonzero(m) + first
        rec["ts"], rec["dur"], rec["cat"], rec["name"] = c["ts"][m], c["dur"][m], c["cat"][m], c["name"][m]
        rec["corr"] = c["extra"][m]
        early = rec["ts"] < t0
        if early.any():
            before = max(before, float((rec["ts"][early] + rec["dur"][early]).max()))
        parts.add(np.mod(rec["corr"], parts.n), rec)
    return before


def join(launches: spill.Parts, kernels: spill.Parts, inside: st.Within, per_bucket: int, no_corr: int,
         out: spill.Parts) -> None:
    """Each kernel joined to its launch by correlation id (of launches sharing an id, the last in the file),
    sent to the bucket of the step it was launched in (by when it ran when it has no launch; none: dropped)."""
    for p in range(launches.n):
        lr, kr = launches.read(p), kernels.read(p)
        if not len(kr):
            continue
        lr = lr[np.lexsort((lr["row"], lr["corr"]))]
        if len(lr):
            lr = lr[np.r_[lr["corr"][1:] != lr["corr"][:-1], True]]
        j = np.minimum(np.searchsorted(lr["corr"], kr["corr"]), max(len(lr) - 1, 0))
        ok = (kr["corr"] != no_corr) & (len(lr) > 0)
        if len(lr):
            ok &= lr["corr"][j] == kr["corr"]
        rec = np.zeros(len(kr), dtype=JOINED)
        for k in ("row", "ts", "dur", "cat", "name"):
            rec[k] = kr[k]
        rec["linked"] = ok
        rec["op"] = -1
        if len(lr):
            hit = lr[j[ok]]
            for k in ("kind", "op", "op_kind", "op_name", "op_args"):
                rec[k][ok] = hit[k]
            when = rec["ts"].copy()
            when[ok] = hit["ts"]
        else:
            when = rec["ts"]
        rec["step"] = step_of(inside, when)
        rec = rec[rec["step"] >= 0]
        out.add(rec["step"] // per_bucket, rec)


def steps_of(bucket: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """A bucket's kernels by step (in step order), each step's in the order they ran (file order for ties)."""
    r = bucket[np.lexsort((bucket["row"], bucket["ts"]))]
    r = r[np.argsort(r["step"], kind="stable")]
    cuts = np.flatnonzero(np.diff(r["step"])) + 1
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(r)], strict=True):
        if hi > lo:
            yield int(r["step"][lo]), r[lo:hi]


def windows(steps: st.Steps, joined: spill.Parts, before: float) -> tuple[list[tuple[float, float]], list[int]]:
    """(each step's window on the device, :func:`steps.device_windows`, from its kernels' first start and last
    end; the steps that launched kernels)."""
    first: list[list[tuple[float, float]]] = [[] for _ in steps.spans]
    for p in range(joined.n):
        for i, k in steps_of(joined.read(p, keep=True)):
            first[i] = [(float(k["ts"].min()), float((k["ts"] + k["dur"]).max()))]
    return st.device_windows(steps.spans, first, before), [i for i, f in enumerate(first) if f]


def attribute(b: Breakdown, steps: st.Steps, joined: spill.Parts, before: float, ev: Any, w: Walk,
              category: Callable[[int, str, str], str], device: str,
              compiling: list[tuple[float, float, str]] | None = None) -> Breakdown:
    """The kernels of the undisturbed steps, added to ``b`` a step at a time; the host's compile events
    (``compiling``, :func:`breakdown.compile_time`) in each step are its compilation."""
    b.device = device
    b.idle = "the device idle between kernels within the step"
    win, with_kernels = windows(steps, joined, before)
    if not with_kernels:
        raise TraceError(f"no kernels of {device} were launched within the {len(steps.spans)} steps found "
                         f"({steps.method})")
    comp_ms, comp_n = compile_time([win[i] for i in with_kernels], compiling or [])
    kept = undisturbed([win[i][1] - win[i][0] for i in with_kernels], b, comp_ms)
    b.compiling([v / 1e3 for v in comp_ms], comp_n, kept)
    keep = {with_kernels[j] for j in kept}
    names, args_of, kinds = ev.names, ev.args_of, w.kinds
    categories: dict[tuple[int, int, str], str] = {}
    details: dict[tuple[int, int], TorchOp] = {}
    shapes: dict[int, str] = {}
    unlinked = total = busy = 0.0
    for p in range(joined.n):
        for i, k in steps_of(joined.read(p)):
            if i not in keep:
                continue
            ts, dur = k["ts"], k["dur"]
            busy += st.union(zip((ts).tolist(), (ts + dur).tolist(), strict=True), *win[i])
            total += float(dur.sum())
            for kd, kc, kn, linked, lkind, op, op_kind, op_name, op_args in zip(
                    *(k[f].tolist() for f in ("dur", "cat", "name", "linked", "kind", "op", "op_kind", "op_name",
                                              "op_args")), strict=True):
                if not linked:
                    unlinked += kd
                phase, op_cat, scope = kinds[op_kind] if op >= 0 else \
                    (kinds[lkind][0] if linked else "rest", "other", "")
                cat = categories.get((kc, kn, op_cat))
                if cat is None:
                    cat = categories[kc, kn, op_cat] = category(kc, names[kn], op_cat)
                detail = None
                if op >= 0:
                    detail = details.get((op_name, op_args))
                    if detail is None:
                        detail = details[op_name, op_args] = TorchOp(args_of[op_args] if op_args >= 0 else None,
                                                                     op=names[op_name])
                    if op_args not in shapes:
                        shapes[op_args] = shapes_text(args_of, op_args)
                b.add(phase, cat, kd / 1e3, scope, name=names[kn], op=names[op_name] if op >= 0 else "",
                      shapes=shapes[op_args] if op >= 0 else "", detail=detail, ident=op if op >= 0 else None)
            b.close_ops()
    n = len(keep)
    if unlinked > 0.01 * total:
        b.notes.append(f"{unlinked / total:.0%} of kernel time has no launch in the trace: charged by when it "
                       "ran, phase 'rest'")
    step_ms = sum(win[i][1] - win[i][0] for i in keep) / n / 1e3
    host_ms = sum(steps.spans[i][1] - steps.spans[i][0] for i in keep) / n / 1e3
    if abs(host_ms - step_ms) > 0.05 * step_ms:
        b.notes.append(f"the host's step is {host_ms:.2f} ms, the device's {step_ms:.2f} ms (from the host step's "
                       "start, or the end of the device's earlier work, to its last kernel's end)")
    return b.finish(n, step_ms, busy_ms=busy / n / 1e3)


def shapes_text(args_of: list[OpArgs], a: int) -> str:
    """The input shapes of args ``a`` as the ops table shows them ("" when none)."""
    dims = args_of[a].dims if a >= 0 else None
    return json.dumps(dims, separators=(",", ":")) if dims else ""
