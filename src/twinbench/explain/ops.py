"""The ops of one traced run, grouped, with what they compute: FLOPs and bytes per op (:mod:`.flops`), each
category's achieved FLOP/s and its share of the framework's *measured* matmul peak (the record's
``speed.peak_tflops``), and JAX's forward-pass linearization moved to the backward phase (:mod:`.linearize`).

Every millisecond here is on the scale of the gap table: an op's traced time per undisturbed step, divided
by the overlap the reader found, times ``step_ms / traced_step_ms`` (the measured step over the profiled one).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from twinbench.explain import flops, taxonomy
from twinbench.explain.breakdown import Breakdown
from twinbench.explain.side import Moved, Op, Rate
from twinbench.record_sections import Record

#: categories whose throughput is FLOP/s; the others (memory-bound) are told in bytes per second
COMPUTE = taxonomy.COMPUTE  # declared there (taxonomy.DECLARED)


@dataclass
class OpGroup:
    """One op (torch: an aten name with one input shape; JAX: one HLO instruction) in one phase."""

    phase: str
    category: str
    name: str
    scope: str
    ms: float = 0.0  # per measured step
    raw_ms: float = 0.0  # per traced step, the op's own traced duration: what its FLOP/s are computed from
    calls: float = 0.0  # per step
    flops: float = 0.0  # per step
    bytes: float = 0.0  # per step
    shape: flops.OpShape | None = None
    linearization: bool = False
    shared: bool = False  # a primal forward op the backward reads too (JAX: kept apart for it)
    where: str = ""  # JAX: the tail of the instruction's op_name (what the model called it)
    opaque_ms: float = 0.0  # per traced step: time of kernels whose FLOPs nobody counted (a Pallas custom call)

    def op(self) -> Op:
        """As an explained side lists it (times rounded)."""
        s = self.shape
        return Op(phase=self.phase, category=self.category, name=self.name, scope=self.scope, ms=round(self.ms, 4),
                  raw_ms=round(self.raw_ms, 4), calls=round(self.calls, 2), flops=self.flops, bytes=self.bytes,
                  shape=s.text() if s else "", key=list(s.key() or ()) if s else [], trans=s.trans if s else "",
                  linearization=self.linearization, shared=self.shared, where=self.where)


def _hlo_text(r: Record) -> str:
    """The run's compiled HLO text (``explain.hlo_path``) (plain or gzipped), "" where there is none or it cannot be read (the one
    bounded reader: over its cap it is not read)."""
    from twinbench.explain import files
    from twinbench.explain.steps import TraceError

    path = r.explain.hlo_path
    try:
        return files.read_text(path, "compiled HLO text") if path and Path(path).is_file() else ""
    except TraceError:
        return ""


def groups(r: Record, b: Breakdown, scale: float) -> list[OpGroup]:
    """The run's ops grouped per step, on the gap table's scale (``scale``: measured / traced step); ``r``: the
    run's record, for its compiled HLO text. A trace XLA's program ran (``b.compiler``, recorded by its reader)
    has HLO instructions for rows; any other (torch.profiler's) has aten ops with their recorded shapes."""
    steps = max(b.steps_used, 1)
    per = scale / steps / max(b.overlap, 1e-9)
    out: dict[tuple[Any, ...], OpGroup] = {}
    if b.compiler != "XLA":
        computes: list[tuple[OpGroup, flops.OpShape] | None] = []  # per raw row: where an op's call counts
        for phase, cat, ms, scope, name, detail, _, loose in b.raw:
            torch = detail if isinstance(detail, flops.TorchOp) else flops.TorchOp(None)
            op = torch.op or name
            shape = flops.torch_op(op, torch.args)
            key = (phase, cat, op, shape.text() or "", scope if not shape.batch else "")
            g = out.get(key)
            if g is None:
                g = out[key] = OpGroup(phase, cat, op, scope if not shape.batch else "", shape=shape)
            g.ms += ms * per
            g.raw_ms += ms / steps
            # a GPU op's FLOPs go to its compute kernel (a gemm), not a copy it also launched
            counts = not (torch.op is not None and shape.flops and cat not in COMPUTE)
            computes.append((g, shape) if counts else None)
            if counts and loose:  # entries of no op: each is a call
                _calls(g, shape, loose / steps)
        for sig, n in b.signatures.items():  # an op's kernels: its call and FLOPs once, on its first that counts
            first = next((computes[i] for i in sig if computes[i] is not None), None)
            if first is not None:
                _calls(*first, n / steps)
        return list(out.values())
    text = _hlo_text(r)
    shapes = flops.HloShapes(text) if text else None
    from twinbench.explain.linearize import classify

    lin, shared = classify(text) if text else (set(), set())
    for phase, cat, ms, scope, name, detail, times, _ in b.raw:
        cost = detail if isinstance(detail, flops.XlaCost) else None  # TPU: XLA's own FLOPs and bytes per op
        shape = shapes.op(name) if shapes is not None and cost is None else flops.OpShape()
        is_lin = phase == "forward" and name in lin
        key = (phase, cat, name)
        g = out.get(key)
        if g is None:
            ins = shapes.table.get(name) if shapes is not None else None
            where = cost.where if cost is not None else ""
            g = out[key] = OpGroup(phase, cat, name, scope, shape=shape, linearization=is_lin,
                                   shared=phase == "forward" and name in shared and cat not in COMPUTE,
                                   where=where or ("/".join(ins.op_name.split("/")[-3:]) if ins else ""))
        g.ms += ms * per
        g.raw_ms += ms / steps
        g.calls += times / steps
        g.flops += (cost.flops if cost is not None else shape.flops) * times / steps
        g.bytes += (cost.bytes if cost is not None else shape.bytes) * times / steps
        if cost is not None and cost.opaque:
            g.opaque_ms += ms / steps
    return list(out.values())


def _calls(g: OpGroup, shape: flops.OpShape, calls: float) -> None:
    g.calls += calls
    g.flops += shape.flops * calls
    g.bytes += shape.bytes * calls


def move_linearization(ops: list[OpGroup], cells: dict[str, dict[str, float]],
                       scopes: dict[str, dict[str, float]]) -> Moved:
    """Move JAX's forward-pass linearization (ops only the backward pass uses) from forward to backward in the
    cells and scopes (in place); returns what moved: milliseconds, ops, the largest op names."""
    moved = [g for g in ops if g.linearization and g.ms > 0]
    for g in moved:
        _add(cells.setdefault("forward", {}), g.category, -g.ms)
        _add(cells.setdefault("backward", {}), g.category, g.ms)
        if g.scope and g.scope in scopes:
            _add(scopes[g.scope], "forward", -g.ms)
            _add(scopes[g.scope], "backward", g.ms)
        g.phase = "backward"
    top = sorted(moved, key=lambda g: -g.ms)[:3]
    return Moved(ms=sum(g.ms for g in moved), ops=len(moved), largest=[_named(g) for g in top])


def _add(row: dict[str, float], key: str, ms: float) -> None:
    row[key] = row.get(key, 0.0) + ms


def shared_forward(ops: list[OpGroup]) -> Moved:
    """The forward ops (not matmuls) whose results the backward also reads: milliseconds, count, largest."""
    found = sorted((g for g in ops if g.shared and g.ms > 0), key=lambda g: -g.ms)
    return Moved(ms=sum(g.ms for g in found), ops=len(found), largest=[_named(g) for g in found[:3]])


def _named(g: OpGroup) -> str:
    return f"{g.name} ({g.where}) {g.ms:.2f} ms" if g.where else f"{g.name} {g.ms:.2f} ms"


def age(iso: str | None, now: datetime | None = None) -> str:
    """How long ago an ISO time (UTC) was: ``3 h ago``, ``2 d ago`` ('' when unknown)."""
    if not iso:
        return ""
    try:
        t = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return ""
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    s = ((now or datetime.now(UTC)) - t).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{s / size:.0f} {unit} ago"
    return "just now"


#: a row whose time is more than this share opaque kernels (FLOPs and bytes uncounted: a Pallas kernel is a
#: custom call to XLA's cost model) gets no rate, and explain says nothing of its work or efficiency
OPAQUE_SHARE = 0.1


@dataclass
class _Work:
    """One phase/category's ops summed a step (what :func:`throughput` makes its rates of)."""

    ms: float = 0.0
    raw_ms: float = 0.0
    flops: float = 0.0
    bytes: float = 0.0
    opaque_ms: float = 0.0


def throughput(ops: list[OpGroup], peak_tflops: float | None) -> dict[str, dict[str, Rate]]:
    """Per phase and category: ms, FLOPs and bytes per step, achieved TFLOP/s, its share of the measured
    peak, and GB/s (memory-bound categories). Rates are over the ops' own traced durations (``raw_ms``): the
    gap table's milliseconds are shares of the measured step, which the profiler's overhead between ops and
    ops running concurrently would otherwise fold into every op's rate."""
    work: dict[str, dict[str, _Work]] = {}
    for g in ops:
        w = work.setdefault(g.phase, {}).setdefault(g.category, _Work())
        w.ms += g.ms
        w.raw_ms += g.raw_ms
        w.flops += g.flops
        w.bytes += g.bytes
        w.opaque_ms += g.opaque_ms
    return {phase: {cat: _rate(cat, w, peak_tflops) for cat, w in by_cat.items()} for phase, by_cat in work.items()}


def _rate(cat: str, w: _Work, peak_tflops: float | None) -> Rate:
    if w.opaque_ms > OPAQUE_SHARE * w.raw_ms:  # mostly kernels of uncounted work: no rate
        return Rate(ms=w.ms, raw_ms=w.raw_ms, opaque_ms=w.opaque_ms)
    s = w.raw_ms / 1e3
    tflops = w.flops / s / 1e12 if w.flops and s > 0 else None
    return Rate(ms=w.ms, raw_ms=w.raw_ms, flops=w.flops, bytes=w.bytes, opaque_ms=w.opaque_ms, tflops=tflops,
                peak_share=tflops / peak_tflops if tflops is not None and peak_tflops else None,
                gbps=w.bytes / s / 1e9 if cat not in COMPUTE and w.bytes and s > 0 else None)


def describe(row: Rate | None) -> str:
    """``3.1 GFLOP, 180 GFLOP/s (54% of peak)`` or ``12 GB/s`` ('' when nothing is known)."""
    if row is None:
        return ""
    parts = []
    if row.tflops:
        s = f"{row.tflops * 1e3:.0f} GFLOP/s"
        if row.peak_share is not None:
            s += f" ({row.peak_share:.0%})"
        parts.append(s)
    if row.gbps:
        parts.append(f"{row.gbps:.1f} GB/s")
    return ", ".join(parts)
