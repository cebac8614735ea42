"""*Why* one run is slower, beside *where*: each gap row's throughput against its framework's measured peak,
a compute row's gap split into work / peak / efficiency, the matmuls by shape, the memory rows, and the
phases on which the two methods (timing, trace) disagree.

The split of a row whose two sides both do counted FLOPs, with F the row's faster side and S the slower
(t: ms, W: FLOPs per step, P: the framework's measured matmul peak)::

    work       = t_F * W_S / W_F - t_F                       (S does more FLOPs in this row)
    peak       = t_F * W_S / W_F * (P_F / P_S - 1)           (S's lower peak, at F's efficiency)
    efficiency = t_S - t_F * W_S / W_F * P_F / P_S           (the rest: S runs further below its own peak)

The three sum to ``t_S - t_F`` exactly (and carry the sign of the row's B-A).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import msgspec

from twinbench.config import Framework
from twinbench.explain import causes, memory_rows, ops, shape_ab, shapes
from twinbench.explain.breakdown import PHASES, Breakdown
from twinbench.explain.side import (
    Disagreement,
    MemoryGap,
    Moved,
    Op,
    Peak,
    Rate,
    Row,
    ShapeRow,
    ShapeSide,
    Side,
    Split,
)
from twinbench.folder_io import one_line
from twinbench.record_sections import Record

if TYPE_CHECKING:
    from twinbench.explain.result import Explained

TOLERANCE = 0.10
KEEP_OPS = 40  # op rows kept in a run's explanation besides every matmul-shaped one


class RunExtras(msgspec.Struct, kw_only=True, frozen=True):
    """What :func:`run_extras` adds to a side (its fields of the same names)."""

    ops: list[Op]
    throughput: dict[str, dict[str, Rate]]
    linearization: Moved
    shared_forward: Moved
    warnings: list[str]
    peak: Peak


class PairExtras(msgspec.Struct, kw_only=True, frozen=True):
    """What :func:`pair_extras` adds to a pair (its fields of the same names)."""

    shapes: list[ShapeRow]
    memory: MemoryGap | None
    disagreements: list[Disagreement]
    why: list[str]


def run_extras(r: Record, b: Breakdown, scale: float, cells: dict[str, dict[str, float]],
               scopes: dict[str, dict[str, float]], peak_source: str = "") -> RunExtras:
    """A run's ops with FLOPs, its per-category throughput and peak, and (JAX) the forward-pass
    linearization moved to backward in ``cells``/``scopes`` (in place). Returns fields for its explanation.
    ``r``: the run's record (its framework, HLO text, matmul peak and warnings); ``peak_source``: where a peak
    that is not the record's measured one came from (a trace file's device datasheet), "" for a measured one."""
    groups = ops.groups(r, b, scale)
    lin = ops.move_linearization(groups, cells, scopes)
    peak, measured_at = r.speed.peak_tflops, r.speed.peak_measured_at
    tput = ops.throughput(groups, peak)
    kept = [g for g in groups if g.shape is not None and g.shape.key()]
    rest = sorted((g for g in groups if g not in kept), key=lambda g: -g.ms)[:KEEP_OPS]
    return RunExtras(ops=[g.op() for g in sorted(kept + rest, key=lambda g: -g.ms)],
                     throughput=tput, linearization=lin, shared_forward=ops.shared_forward(groups),
                     warnings=[w for w in r.warnings if w.startswith("machine busy")],
                     peak=Peak(tflops=peak, measured_at=measured_at, age=ops.age(measured_at), source=peak_source))


def split(a: Rate | None, b: Rate | None, peak_a: float | None, peak_b: float | None) -> Split | None:
    """work / peak / efficiency of one row (``a``, ``b``: its throughput cells); None when not computable."""
    if not a or not b or not peak_a or not peak_b:
        return None
    if not (a.flops and b.flops and a.ms and b.ms):
        return None
    sign = 1.0 if b.ms >= a.ms else -1.0
    (f, pf), (s, ps) = ((a, peak_a), (b, peak_b)) if sign > 0 else ((b, peak_b), (a, peak_a))
    at_f = f.ms * s.flops / f.flops  # S's work at F's speed
    work = at_f - f.ms
    peak = at_f * (pf / ps - 1)
    eff = s.ms - at_f * pf / ps
    return Split(work_ms=sign * work, peak_ms=sign * peak, efficiency_ms=sign * eff)


def disagreements(a: Side, b: Side) -> list[Disagreement]:
    """Phases whose B-A differs between the methods by more than 10% of the larger step."""
    if not a.timing or not b.timing:
        return []
    step = max(a.step_ms, b.step_ms)
    out = []
    for p in PHASES:
        if p not in a.timing or p not in b.timing or any(p in x.timing_apart for x in (a, b)):
            continue
        td = b.timing[p] - a.timing[p]
        rd = b.phase_ms(p) - a.phase_ms(p)
        if abs(td - rd) > TOLERANCE * step:
            out.append(Disagreement(phase=p, timing_diff_ms=td, trace_diff_ms=rd))
    return out


def _why_phase(p: str, a: Side, b: Side) -> str:
    """What may explain a disagreement on phase ``p``: a known difference of the two methods."""
    if p in ("forward", "backward"):
        why = []
        for side in (a, b):
            sh = side.shared_forward
            if sh.ms > 0.01 * side.step_ms:
                why.append(f"{side.run}'s forward keeps {sh.ops} element-wise results as buffers the backward "
                           f"pass reads too ({sh.ms:.1f} ms, e.g. {sh.largest[0]}): the forward compiled alone "
                           "may fuse them away")
            if side.linearization.ms > 0:
                why.append(f"{side.run}'s forward-pass linearization ({side.linearization.ms:.1f} ms) "
                           "is already counted as backward")
        why.append("timing compiles/runs the forward alone, the trace sees it inside the whole step")
        return "; ".join(why)
    if p == "input":
        return "timing's input is the host step less the device step, noisy on a busy machine"
    if p == "optimizer":
        return "timing's optimizer is a difference of two whole steps, noisy on a busy machine"
    return "idle time has no op in the trace"


def pair_extras(a: Side, b: Side, table: list[Row], named: bool = True) -> PairExtras:
    """Annotate the gap rows (throughput of both sides; a compute row's split; the phases' timing B-A)
    and build the matmul shapes table, the memory rows, and the sentences that say why (``named`` False: the
    evidence checks failed, so no sentence attributes a row: :func:`twinbench.explain.causes.gates`)."""
    pa, pb = a.peak.tflops, b.peak.tflops
    timing_ok = bool(a.timing and b.timing)
    for row in table:
        if row.level == 0:
            p = row.row
            if timing_ok and p in a.timing and p in b.timing and not any(
                    p in x.timing_apart for x in (a, b)):  # no timing B-A from a figure that is none
                row.timing_diff_ms = b.timing[p] - a.timing[p]
            continue
        p, c = row.phase, row.category
        row.a_throughput = _cell(a.throughput.get(p, {}).get(c), row.a_ms)
        row.b_throughput = _cell(b.throughput.get(p, {}).get(c), row.b_ms)
        if c in ops.COMPUTE:
            row.split = split(row.a_throughput, row.b_throughput, pa, pb)
    shape_rows: list[ShapeRow] = shapes.table(a.ops, b.ops, pa, pb)
    mem = memory_rows.rows(a.memory_breakdown, b.memory_breakdown)
    dis = disagreements(a, b)
    said = memory_rows.sentence(mem, a.run, b.run) if mem else ""
    return PairExtras(shapes=shape_rows, memory=mem, disagreements=dis,
                      why=programs_differ(a, b) + sentences(a, b, table if named else [], shape_rows, said, dis))


def _cell(t: Rate | None, ms: float) -> Rate | None:
    """A row's throughput: its FLOPs and bytes, the rates of its ops (over their traced durations), and the
    gap table's own milliseconds (which the split works on)."""
    if t is None:
        return None
    return Rate(ms=ms, flops=t.flops, bytes=t.bytes, tflops=t.tflops, peak_share=t.peak_share, gbps=t.gbps)


def _peak_text(side: Side) -> str:
    pk = side.peak
    if not pk.tflops:
        return f"{side.run}: no measured peak"
    if pk.source:
        return f"{side.run} {pk.tflops * 1e3:.0f} GFLOP/s ({pk.source})"
    age = f", measured {pk.age}" if pk.age else ""
    return f"{side.run} {pk.tflops * 1e3:.0f} GFLOP/s{age}"


#: a matmul's share of its framework's measured peak above which the reader is told what the peak is
ABOVE_PEAK = 1.02


def _above_peak(a: Side, b: Side, shape_rows: list[ShapeRow]) -> list[str]:
    """A line for each run whose matmuls ran above its measured peak (e.g. 112% of it): what that peak is."""
    out = []
    for of, side in ((lambda r: r.a, a), (lambda r: r.b, b)):
        shares = [(of(r).peak_share or 0.0, r) for r in shape_rows if (of(r).peak_share or 0.0) > ABOVE_PEAK]
        if not shares:
            continue
        share, top = max(shares, key=lambda sr: sr[0])
        out.append(f"{side.run}'s matmuls ran at up to {share:.0%} of its measured peak "
                   f"({top.phase} {top.shape}; {_peak_text(side)}): that peak is the fastest square matmul "
                   "twinbench timed in that framework, not the hardware's limit. A shape that suits the library's "
                   "kernels better, or a peak measured at a slower hour of a shared host, runs above it; "
                   "`twinbench peak --remeasure` measures it again")
    return out


#: ops that draw random numbers: torch's generators (in place: ``rand_like`` and dropout call them) and, in a JAX
#: program, the instructions jax.random's bits come from (their ``op_name`` path or the HLO opcode)
_RANDOM_TORCH = re.compile(r"^aten::(bernoulli_?|uniform_|normal_|random_|exponential_|multinomial)$")
_RANDOM_JAX = re.compile(r"jit\(_bernoulli\)|jit\(_uniform\)|jit\(_normal\)|random_bits|threefry2x32|"
                         r"rng[-_]bit[-_]generator")
#: the random-number ops' bytes a step one side moves over the other's from which the two programs are said to
#: differ: 16x, since bytes count random numbers loosely (XLA's generation moves a tensor through several
#: fusions, torch's bernoulli_ writes it once: a pair's sides lie further apart in bytes than in numbers)
PROGRAMS_APART = 16.0


def random_bytes(e: Side) -> float:
    """The bytes a step the ops drawing random numbers move (dropout masks, noise), from the op groups."""
    return sum(o.bytes for o in e.ops  # an op's own names say which it is
               if _RANDOM_TORCH.search(o.name) or _RANDOM_JAX.search(o.where))


def programs_differ(a: Side, b: Side) -> list[str]:
    """Work one side does that the other does not, said as a difference of the programs, not a speed of a
    framework: random numbers (dropout masks broadcast over batch and heads on one side, one per element on the
    other; dropout on one side only), where one side moves over :data:`PROGRAMS_APART` times the other's."""
    ra, rb = random_bytes(a), random_bytes(b)
    hi, lo = max(ra, rb), min(ra, rb)
    if hi < 1e6 or hi < PROGRAMS_APART * lo:  # under 1 MB a step: a little noise, no dropout worth saying
        return []
    more, less = (a, b) if ra >= rb else (b, a)
    other = (f"{less.run} {lo / 1e6:.2f} MB ({hi / lo:.0f}x less)" if lo else f"{less.run} none")
    return [f"programs: {more.run}'s ops drawing random numbers (dropout masks, noise) move {hi / 1e6:.2f} MB a "
            f"step, {other}: the two programs' dropout differs (a mask per element against one broadcast, or "
            "dropout on one side only), a difference of the scripts, not a speed of either framework"]


def shape_claim(a: Side, b: Side, shape_rows: list[ShapeRow], sign: int) -> str:
    """``largest matmul gap by shape: ...`` only where it is stable and an A/B of the shape confirms it: the
    shape's gap, in the gap's direction, beyond its measured noise (:func:`causes.band`), ahead of the next
    shape's by more than their noises combined (so that another trace of the same scripts would not name another
    shape), and the product of that shape run in each side's framework on this machine (:mod:`.shape_ab`) with a
    gap of the same sign beyond its own spread. Where any of these fails the line says so and names none ('' when
    no shape matched)."""
    matched = sorted((r for r in shape_rows if r.matched), key=lambda r: -sign * r.diff_ms)
    if not matched:
        return ""
    ra, rb = causes.noise(a), causes.noise(b)
    if ra is None or rb is None:
        return ("largest matmul gap by shape: none named (a side's noise was not measured: fewer than two traced "
                "steps); the matmuls-by-shape table has each shape's figures")
    noise = [causes.band(r.a.ms, r.b.ms, ra, rb) for r in matched]
    top = sign * matched[0].diff_ms
    ahead = top - sign * matched[1].diff_ms if len(matched) > 1 else top
    apart = (noise[0] ** 2 + noise[1] ** 2) ** 0.5 if len(matched) > 1 else noise[0]
    row = matched[0]
    traced = f"{row.phase} {row.shape} {top:+.2f} ±{noise[0]:.2f} ms in the traces"
    if top <= noise[0] or ahead <= apart:
        return ("largest matmul gap by shape: none named (no shape's gap stands beyond its measured noise and ahead "
                f"of the next one's: {traced}); the matmuls-by-shape table has each shape's figures")
    checked = _shape_ab(a, b, row)
    if isinstance(checked, str):
        return f"largest matmul gap by shape: none named ({traced}; {checked})"
    v = checked
    ab = (f"an A/B of the shape on this machine (fp32, {v.threads} thread each on one core, a fresh process a framework): "
          f"{a.run} {v.a_ms:.3f} ms a call x {v.a_calls:g}, {b.run} {v.b_ms:.3f} ms x {v.b_calls:g}: "
          f"{v.gap_ms:+.2f} ±{v.noise_ms:.2f} ms a step")
    if not v.confirms:
        return f"largest matmul gap by shape: none named ({traced}; {ab}, which does not confirm it)"
    return (f"largest matmul gap by shape (±{noise[0]:.2f} ms, ahead of the next by {ahead:.2f} ms; confirmed by "
            f"{ab}): " + shapes.line(row, a.run, b.run))


_DIMS = re.compile(r"^(?:(\d+)x)?\[(\d+),(\d+)\]x\[(\d+),(\d+)\]")


def _shape_ab(a: Side, b: Side, row: ShapeRow) -> shape_ab.Verdict | str:
    """The A/B of ``row``'s shape in each side's framework on this machine, or why there is none."""
    if a.device != "CPU" or b.device != "CPU":
        return (f"its A/B needs the traces' devices ({a.device or 'unknown'}, {b.device or 'unknown'}), and this "
                "check times a shape on this machine's CPU only")
    m = _DIMS.match(row.shape)
    if not m:
        return f"its dimensions could not be read from {row.shape!r}"
    batch, dm, dk, _, dn = (int(g) if g else 1 for g in m.groups())
    try:  # the program's compiler ran the traced product: XLA's is JAX's (torchax too), any other torch's
        timed = [shape_ab.measure(Framework.JAX if s.compiler == "XLA" else Framework.TORCH, [batch, dm, dk, dn],
                                  side.layout.split("/")[0]) for s, side in ((a, row.a), (b, row.b))]
    except RuntimeError as e:
        return f"its A/B on this machine failed: {one_line(str(e))}"
    return shape_ab.verdict(timed[0], timed[1], row.a.calls or 1.0, row.b.calls or 1.0, row.diff_ms)


def sentences(a: Side, b: Side, table: list[Row], shape_rows: list[ShapeRow], memory: str,
              dis: list[Disagreement]) -> list[str]:
    """The why lines of a pair (``memory``: the memory rows' sentence, '' when either side has none)."""
    out = []
    busy = [f"{s.run}: {s.warnings[0]}" for s in (a, b) if s.warnings]
    if busy:
        out.append("measured on a busy machine, so every millisecond below is uncertain (shapes, FLOPs and "
                   "layouts are not): " + "; ".join(busy))
    gap = b.step_ms - a.step_ms
    sign = 1 if gap >= 0 else -1
    split_rows = sorted((r for r in table if r.split), key=lambda r: -sign * r.diff_ms)
    for r in split_rows[:2]:
        sp = r.split
        assert sp is not None
        work = f" + work {sp.work_ms:+.1f} ms (FLOPs differ)" if abs(sp.work_ms) > 0.01 * abs(r.diff_ms) + 1e-9 else ""
        out.append(f"{r.row} {r.diff_ms:+.1f} ms = peak {sp.peak_ms:+.1f} ms + efficiency "
                   f"{sp.efficiency_ms:+.1f} ms{work}: {a.run} runs it at {_share(r.a_throughput)} of its peak, "
                   f"{b.run} at {_share(r.b_throughput)} (matmul peaks: {_peak_text(a)}; {_peak_text(b)})")
    out += attribution(a, b, table)
    said = shape_claim(a, b, shape_rows, sign)
    if said:
        out.append(said)
    out += _above_peak(a, b, shape_rows)
    for side in (a, b):
        lin = side.linearization
        if lin.ms > 0.005 * side.step_ms:
            out.append(f"{side.run}: {lin.ms:.1f} ms of its forward pass only computes pieces of the "
                       f"derivative ({lin.ops} ops, largest: {', '.join(lin.largest)}); counted as backward, "
                       "as torch and the timing method count them")
    for d in dis:
        out.append(f"the methods disagree on {d.phase}: by trace B-A {d.trace_diff_ms:+.1f} ms, by timing "
                   f"{d.timing_diff_ms:+.1f} ms ({_why_phase(d.phase, a, b)}); read that row with care")
    if memory:
        out.append(memory)
    for letter, side in (("A", a), ("B", b)):
        if side.page_faults:  # kernel time inside the ops' rows, which no trace row tells apart
            fix = ("`--try " + letter + ":host-malloc=tuned` runs it again with twinbench's malloc settings"
                   if side.host_malloc == "system" else f"under GLIBC_TUNABLES={side.glibc_tunables or '(unset)'}")
            out.append(f"{side.run}: {side.page_faults} over its steady steps: part of every row of its "
                       f"step is the kernel zeroing fresh pages for the ops ({fix})")
    return out


#: how much one side must differ (ratio) before a row is said to be the framework's or the implementation's
DIFFERS = 1.2


def _library(side: Side) -> str:
    """Whose kernels ran a side's ops: the fusing compiler its trace's reader recorded (XLA: a JAX or torchax
    program), else torch's (an eager or Inductor trace)."""
    return side.compiler or "torch"


def attribution(a: Side, b: Side, table: list[Row], top: int = 3) -> list[str]:
    """For the rows carrying most of the gap, whose part it is, from what both sides' ops did per step:

    * implementation: the slower side does more work in the row (FLOPs, or bytes for a memory-bound row) by
      over :data:`DIFFERS` x: extra ops, or more bytes moved;
    * framework: the same work (within :data:`DIFFERS` x) at a lower share of its own peak (compute rows) or
      a lower GB/s (memory rows): the framework's kernels run it slower. Two runs compiled by the same
      library (two JAX programs, a torchax program against a JAX twin: both XLA's) have no framework gap: the
      same work run slower there is the implementation's (its dtypes, layouts, what fuses).

    A row with neither (no FLOPs or bytes counted on one side, or both differ) is left unsaid. A row said
    names the slower side's largest ops in it (:func:`row_ops`): where to look, op by op."""
    gap = b.step_ms - a.step_ms
    sign = 1 if gap >= 0 else -1
    rows = sorted((r for r in table if r.level == 1  # the part a fused row may be named for (explain.causes)
                   and sign * r.nameable_ms > 0.02 * abs(gap) + 1e-9), key=lambda r: -sign * r.nameable_ms)[:top]
    out = []
    for r in rows:
        ta, tb = r.a_throughput or Rate(), r.b_throughput or Rate()
        (slow, ts), (fast, tf) = ((b, tb), (a, ta)) if sign > 0 else ((a, ta), (b, tb))
        compute = r.category in ops.COMPUTE
        unit = "FLOPs" if compute else "bytes"
        ws, wf = (ts.flops, tf.flops) if compute else (ts.bytes, tf.bytes)
        if not ws or not wf:
            continue
        what = f"{r.row} ({sign * r.diff_ms:+.1f} ms)"
        before = len(out)
        same = _library(slow) == _library(fast)  # one compiler on both sides: no framework gap
        share_s, share_f, gbps_s, gbps_f = ts.peak_share or 0.0, tf.peak_share or 0.0, ts.gbps or 0.0, tf.gbps or 0.0
        if ws > DIFFERS * wf:
            out.append(f"implementation: {what}: {slow.run} does {ws / wf:.1f}x the {unit} of {fast.run} "
                       "in this row (extra ops" + ("" if compute else ", more bytes moved") + ")")
        elif same and ((compute and share_s and share_f > DIFFERS * share_s)
                       or (not compute and gbps_s and gbps_f > DIFFERS * gbps_s)):
            out.append(f"implementation: {what}: the same {unit} (within {DIFFERS:.1f}x), both compiled by "
                       f"{_library(slow)}, run slower in {slow.run}: how the row is written (its dtypes, "
                       "layouts, what fuses), not the framework")
        elif compute and share_s and share_f > DIFFERS * share_s:
            out.append(f"framework: {what}: the same FLOPs (within {DIFFERS:.1f}x); {_library(slow)}'s "
                       f"kernels run them at {share_s:.0%} of {slow.run}'s peak, "
                       f"{_library(fast)}'s at {share_f:.0%} of {fast.run}'s")
        elif not compute and gbps_s and gbps_f > DIFFERS * gbps_s and ws <= DIFFERS * wf:
            out.append(f"framework: {what}: the same bytes (within {DIFFERS:.1f}x) moved at {gbps_s:.1f} GB/s "
                       f"by {_library(slow)}, {gbps_f:.1f} GB/s by {_library(fast)}")
        largest = row_ops(slow, r.row)
        if len(out) > before and largest:
            out[-1] += f"; largest there in {slow.run}: {largest}"
    return out


def row_ops(side: Side, row: str, n: int = 2) -> str:
    """The ``n`` largest ops of one run in a gap row (``"backward / data movement"``), from its op list
    (``kernels``): ``fusion.1 (transpose(jvp())/convert_element_type) 6.2 ms``; '' when it has none."""
    phase, _, category = row.partition(" / ")
    mine = sorted((k for k in side.kernels if k.phase == phase and k.category == category), key=lambda k: -k.ms)[:n]
    return ", ".join(k.name + (f" ({k.op})" if k.op and k.op != k.name else "") + f" {k.ms:.1f} ms" for k in mine)


def _share(t: Rate | None) -> str:
    return f"{t.peak_share:.0%}" if t is not None and t.peak_share is not None else "?"


# ---------------------------------------------------------------------------------------------- printing
def _tp(t: Rate | ShapeSide | None) -> str:
    if t is None:
        return ""
    if t.tflops:
        s = f"{t.tflops * 1e3:.0f}"
        return s + (f" ({t.peak_share:.0%})" if t.peak_share is not None else "")
    if isinstance(t, Rate) and t.gbps:
        return f"{t.gbps:.1f} GB/s"
    return ""


def throughput_cells(row: Row) -> tuple[str, str, str]:
    """The gap table's extra cells of one row: timing B-A (phases), A and B throughput (categories)."""
    td = row.timing_diff_ms
    return ("" if td is None else f"{td:+.2f}", _tp(row.a_throughput), _tp(row.b_throughput))


def print_extras(result: Explained, out: Any) -> None:
    from rich.table import Table

    assert result.b is not None
    a, b = result.a.run, result.b.run
    if result.shapes:
        t = Table(title=f"matmuls by shape (largest of each run, matched where phase and shape agree; A {a}, B {b})",
                  title_justify="left")
        for col, just in (("phase", "left"), ("shape", "left"), ("A ms", "right"), ("layout", "left"),
                          ("GFLOP/s (peak)", "right"), ("B ms", "right"), ("layout", "left"),
                          ("GFLOP/s (peak)", "right"), ("B-A ms", "right")):
            t.add_column(col, justify=just)  # type: ignore[arg-type]
        for r in result.shapes:
            sa, sb = r.a, r.b
            t.add_row(r.phase, r.shape + ("" if r.matched else " (one run)"), f"{sa.ms:.2f}" if sa.ms else "-",
                      sa.layout, _tp(sa), f"{sb.ms:.2f}" if sb.ms else "-", sb.layout, _tp(sb), f"{r.diff_ms:+.2f}")
        out.print(t)
    mem = result.memory
    if mem:
        t = Table(title=f"memory: B {b} - A {a} = {mem.gap_bytes / memory_rows.MiB:+.0f} MiB at the peak",
                  title_justify="left")
        for col in ("part", "A MiB", "B MiB", "B-A MiB", "share of gap"):
            t.add_column(col, justify="left" if col == "part" else "right")
        for m in mem.rows:
            t.add_row(m.row, f"{m.a_bytes / memory_rows.MiB:.0f}", f"{m.b_bytes / memory_rows.MiB:.0f}",
                      f"{m.diff_bytes / memory_rows.MiB:+.0f}", f"{m.share:.0%}")
        out.print(t)
    for s in result.why:
        out.print(f"  why: {s}", highlight=False)
