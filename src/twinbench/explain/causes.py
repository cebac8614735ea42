"""Which gap rows explain may name as where a gap comes from.

A fusing compiler (XLA, for JAX and torchax programs; Inductor, for ``torch.compile``) puts an element-wise op,
a normalization and a reduction into one kernel, and that kernel is filed under one category. The same work
sits in ``backward / element-wise`` on an eager torch trace and in ``backward / normalization`` on a JAX one:
the two rows move in opposite directions, and neither difference is a difference of the programs. So where
either side fuses, a memory-bound row (element-wise, normalization, reductions, data movement) is named for
no more than its phase's memory-bound rows together confirm: its difference, capped at the sum of their
differences, and nothing when that sum goes the other way.

A row is named when this part carries at least :data:`NAMED_SHARE` of the gap (the largest row is named
when none does, if any part of it goes the gap's way) and is beyond its measured noise (:func:`noise`): each
side's noise is the spread of its traced steps that compiled nothing (their standard deviation over their
mean), a row's is that share of the row on each side, combined, and a row is named only when its difference is
over :data:`K` times that (its ``uncertainty_ms``, printed as its ``±``). A busy machine widens the spread, so
fewer rows clear it; it refuses none that do. Rows within their noise are withheld, and the summary says so.
Smaller rows are in the table, not in the sentence. An idle row (host time no op covers: the loop's
Python, dispatch, and the profiler's own cost per op, which lands between ops) is never named as where the
gap comes from: a trace cannot tell those apart, only the loop timed without the profiler can.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from twinbench.explain import taxonomy
from twinbench.explain.side import Clock, GateFailure, Row, Side

MEMORY_BOUND = taxonomy.MEMORY_BOUND  # the categories declared memory-bound (taxonomy.DECLARED)
NAMED_SHARE = 0.10
#: kernel names of a torch.compile program (Inductor's Triton and C++ kernels)
_FUSED_KERNEL = re.compile(r"^(triton_|cpp_fused|fused_)|CompiledFunction")


def fuses(side: Side) -> bool:
    """Whether a run's kernels come from a fusing compiler: XLA (the reader of its trace records it: a JAX or
    torchax run), or Inductor (its kernels' names)."""
    if side.compiler:
        return True
    return any(_FUSED_KERNEL.search(k.name) for k in side.kernels)


#: a row is named when its difference is over K times its combined noise (one standard deviation of each side's
#: steps, in proportion to the row): a normal error passes 3 sigma one way 0.13% of the time; 3 rather than 2
#: because 4-5 traced steps estimate a standard deviation loosely (it can be a third too small)
K = 3.0


def noise(e: Side) -> float | None:
    """One side's relative noise: the standard deviation of its attributed steps that compiled nothing over
    their mean (``step_times_ms``), or, where the doctor timed the steps outside the trace and they moved more,
    theirs (``untraced_spread``: a robust one, over many more steps); None when neither was measured."""
    import statistics

    t = [x for x in e.step_times_ms if x > 0]
    traced = statistics.stdev(t) / statistics.fmean(t) if len(t) >= 2 else None
    untraced = e.measured.untraced_spread if e.measured else None
    found = [x for x in (traced, untraced) if x is not None]
    return max(found) if found else None


def band(a_ms: float, b_ms: float, ra: float, rb: float) -> float:
    """A row's uncertainty, :data:`K` times its combined noise: each side's relative noise on its ms."""
    return K * ((a_ms * ra) ** 2 + (b_ms * rb) ** 2) ** 0.5


def gap_noise(a: Side, b: Side) -> float | None:
    """The whole gap's uncertainty (:data:`K` times the two sides' step noise combined), in ms a step; None when
    a side's noise was not measured."""
    ra, rb = noise(a), noise(b)
    if ra is None or rb is None:
        return None
    return band(a.step_ms, b.step_ms, ra, rb)


def mark(a: Side, b: Side, table: list[Row]) -> None:
    """Give each row ``uncertainty_ms`` (:func:`band`, where both sides' noise was measured) and each category
    row (level 1) ``named_ms``: the part of its B-A that may be named (see the module), with ``within_noise_ms``
    where its noise withheld it, and for a memory-bound row capped by fusion, ``fused_with``: the rows of its
    phase that went the other way."""
    fused = fuses(a) or fuses(b)
    ra, rb = noise(a), noise(b)
    measured = ra is not None and rb is not None
    # where a side's steps were not measured (one step, an old record), the larger spread of its steps is the floor
    spread = max(a.step_spread_ms or 0.0, b.step_spread_ms or 0.0)
    for r in table:
        if measured:
            r.uncertainty_ms = band(r.a_ms, r.b_ms, ra or 0.0, rb or 0.0)
    phase_sum: dict[str, float] = {}
    for r in table:
        if r.level == 1 and r.category in MEMORY_BOUND:
            phase_sum[r.phase] = phase_sum.get(r.phase, 0.0) + r.diff_ms
    for r in table:
        if r.level != 1:
            continue
        d = r.diff_ms
        named = d
        if fused and r.category in MEMORY_BOUND:
            g = phase_sum.get(r.phase, 0.0)
            named = (1 if d >= 0 else -1) * min(abs(d), abs(g)) if d * g > 0 else 0.0
            if abs(named) < abs(d) - 1e-9:
                r.fused_with = [o.row for o in table if o.level == 1 and o.phase == r.phase
                                and o.category in MEMORY_BOUND and o.diff_ms * d < 0]
        floor = (r.uncertainty_ms or 0.0) if measured else spread
        if 0 < abs(named) <= floor:
            named, r.within_noise_ms = 0.0, floor
        r.named_ms = named


def named(table: list[Row], gap: float, level: int, top: int = 3) -> list[Row]:
    """The rows at ``level`` a summary names, largest first in the gap's direction (see the module)."""
    sign = 1 if gap >= 0 else -1
    rows = sorted((r for r in table if r.level == level and not unattributed(r)), key=lambda r: -sign * r.nameable_ms)
    keep = [r for r in rows if sign * r.nameable_ms >= NAMED_SHARE * abs(gap) - 1e-9]
    # else the largest row, when it goes the gap's way at all (a row within the steps' spread has none of it)
    return (keep or [r for r in rows[:1] if sign * r.nameable_ms > 1e-9])[:top]


def unattributed(r: Row) -> bool:
    """An idle row: host time between ops (see the module)."""
    return r.level == 1 and r.category == "idle"


# ------------------------------------------------------------------------------------------------- evidence
# A row is named as a cause only when both runs' traces can carry one: both categorized, their phases the
# program's, every rate they print possible on their device. Where a check fails, no row is named and the
# summary says which check failed and the fact that decides it. A busy machine is no check: its noise is
# measured and each row held to it (:func:`mark`).

CATEGORIZED_MIN = 0.90
#: a step's backward matmul FLOPs over its forward's: each forward product has its weight gradient (1x) and,
#: but for the first layer's, its input gradient (twice the forward in all); recomputing the forward in the
#: backward (remat) adds at most the forward's once more
BACKWARD_OVER_FORWARD = (0.9, 3.2)
#: a conservative bound per CPU core on what any op can reach: FLOP/s (fp32 FMA on AVX-512 units at 5 GHz,
#: two units, with margin) and bytes/s (two 64-byte loads and a store a cycle from L1 at 5 GHz, with margin)
CPU_CORE_FLOPS = 1.0e12
CPU_CORE_BYTES = 1.0e12
#: a device's bytes/s bound over its datasheet memory bandwidth: ops whose working set stays in its caches
#: move bytes faster than its memory does, not this much faster
CACHE_OVER_HBM = 4.0
#: eager dispatches a step from which a JAX step is said to run op by op (the doctor's jax-eager-ops warning)
EAGER_OPS = 20
#: where both traces carry the step twinbench doctor timed without the profiler: the traced gap and that untraced
#: gap may point opposite ways by this share of the faster untraced step before the traces are said not to hold
#: the clock's gap (the profiler's cost per op differs between the sides: many small ops grow most)
CLOCK_FLOOR = 0.10


def limits(e: Side) -> tuple[float | None, float | None, str]:
    """(FLOP/s bound, bytes/s bound, what they are) of the device an explained run ran on; (None, None, '')
    when nothing is known of it (a GPU trace that names no model)."""
    from twinbench.measure import peak

    sheet = peak.datasheet(e.device_name or "")
    if sheet is not None:
        flops = max(v for v in (sheet.bf16_tflops, sheet.fp32_tflops, sheet.tf32_tflops, sheet.int8_tops) if v)
        gbs = (sheet.hbm_gbs or 0) * CACHE_OVER_HBM
        return flops * 1e12 * 1.05, gbs * 1e9 or None, f"{sheet.name} datasheet"
    if e.device != "CPU":
        return None, None, ""
    cores = e.cores
    where = f"{cores} cores" if cores else ""
    if not cores:
        import os

        cores = os.cpu_count() or 1
        where = f"{cores} cores (this machine's; the trace names none)"
    return cores * CPU_CORE_FLOPS, cores * CPU_CORE_BYTES, f"a {where} CPU's bound"


def physical(e: Side) -> Side:
    """Withhold every rate of an explained run above its device's bound (:func:`limits`) from its throughput
    cells and op rows (a rate no device can reach is a count of FLOPs or bytes that is not what ran: data
    a cache served, or work counted twice); the side with them withheld and a line for each (``impossible``)."""
    fl, by, what = limits(e)
    out = []
    throughput = {p: dict(by_cat) for p, by_cat in e.throughput.items()}
    for p, by_cat in throughput.items():
        for c, row in by_cat.items():
            if fl and (row.tflops or 0) * 1e12 > fl:
                out.append(f"{p} / {c} counted at {(row.tflops or 0) * 1e3:.0f} GFLOP/s, over {fl / 1e9:.0f} "
                           f"GFLOP/s ({what})")
                row = by_cat[c] = msgspec.structs.replace(row, tflops=None, peak_share=None)
            if by and (row.gbps or 0) * 1e9 > by:
                out.append(f"{p} / {c} counted at {row.gbps or 0:.0f} GB/s, over {by / 1e9:.0f} GB/s ({what})")
                by_cat[c] = msgspec.structs.replace(row, gbps=None)
    ops = list(e.ops)
    for i, op in enumerate(ops):  # the matmuls-by-shape table rates each op over its own traced time
        rate = op.flops / (op.raw_ms / 1e3) if op.raw_ms else 0.0
        if fl and rate > fl:
            if op.ms > 0.01 * e.step_ms:  # a tiny op's rate is the clock's grain
                out.append(f"{op.phase} {op.shape or op.name} counted at {rate / 1e9:.0f} GFLOP/s, "
                           f"over {fl / 1e9:.0f} GFLOP/s ({what})")
            ops[i] = msgspec.structs.replace(op, flops=0.0)
    return msgspec.structs.replace(e, throughput=throughput, ops=ops, impossible=out)


def eager_dispatches(e: Side) -> tuple[float, str] | None:
    """(dispatches a step, where that figure comes from) when an XLA program's step ran op by op (a JAX run:
    its trace's reader records the compiler): the doctor's count of eager dispatches recorded beside the trace,
    else the XLA programs a step other than the step's own compiled module (each eager op runs as a program of
    its own: ``jit_dot_general``, ``jit_add``...)."""
    if not e.compiler:
        return None
    recorded = e.recorded.eager_ops_per_step if e.recorded else None
    if recorded is not None:
        return (recorded, "counted by twinbench doctor") if recorded >= EAGER_OPS else None
    programs = e.programs
    n = sum(programs.values())
    if n >= EAGER_OPS:
        top = ", ".join(sorted(programs, key=lambda k: -programs[k])[:3])
        return n, f"XLA programs run a step besides the compiled step ({top}...)"
    return None


def categorized_facts(a: Side, b: Side) -> list[str]:
    """Each side under :data:`CATEGORIZED_MIN` of its op time categorized, with its phases and, for a JAX step run
    op by op, its dispatches a step (else its largest uncategorized ops)."""
    out = []
    for side in (a, b):
        share = side.categorized_share
        if share < CATEGORIZED_MIN:
            fact = (f"{side.run}: only {share:.0%} of its op time is categorized (forward "
                    f"{side.phase_ms('forward'):.1f}, backward {side.phase_ms('backward'):.1f}, optimizer "
                    f"{side.phase_ms('optimizer'):.1f} ms)")
            eager = eager_dispatches(side)
            if eager:
                fact += (f"; the JAX step runs op by op: {eager[0]:.0f} dispatches a step ({eager[1]}): jit it first "
                         "(twinbench doctor SCRIPT says how)")
            elif side.other:
                fact += "; largest uncategorized: " + ", ".join(list(side.other)[:3])
            out.append(fact)
    return out


def rate_facts(a: Side, b: Side) -> list[str]:
    """Each rate a side printed above its device's bound (:func:`physical`)."""
    return [f"{side.run}: {line}: its count is not what ran" for side in (a, b) for line in side.impossible]


@dataclass(frozen=True)
class Gate:
    """One evidence check, declared once: its ``check`` id, the ``words`` a refusal says it with, and ``facts``, the
    facts that fail it for a pair ([] when it holds)."""

    check: str
    words: str
    facts: Callable[[Side, Side], list[str]]


#: the evidence a named row needs, in the order a refusal says them (see the block's comment)
GATES = (
    Gate("categorized", f"both runs categorized ({CATEGORIZED_MIN:.0%} of op time)", categorized_facts),
    Gate("phases", "phases consistent with the program",
         lambda a, b: [f for f in (phase_check(a), phase_check(b)) if f]),
    Gate("rates", "every rate possible on its device", rate_facts),
    Gate("clock", "the traced gap the clock's", lambda a, b: [f for f in (clock_check(a, b),) if f]),
)
_GATE = {g.check: g for g in GATES}


def gates(a: Side, b: Side) -> list[GateFailure]:
    """The evidence checks that failed for a pair (:data:`GATES`): each its ``check`` and the ``fact`` that decides
    it; [] when a row may be named. A busy machine is no check: its noise is measured (:func:`noise`) and said
    (:func:`busy_line`)."""
    return [GateFailure(check=g.check, fact=f) for g in GATES for f in g.facts(a, b)]


def busy_line(a: Side, b: Side) -> str:
    """The advice where a side ran on a busy machine: its noise measured, rows named beyond it; a quiet machine
    for the last decimal ('' when neither was busy)."""
    busy = [x for x in (a, b) if x.busy]
    if not busy:
        return ""
    said = []
    for x in busy:
        r = noise(x)
        said.append(f"{x.run}" + (f" (its steps move {r:.0%} from one to the next, one standard deviation)"
                                     if r is not None else " (fewer than two of its traced steps compiled nothing: "
                                     "its noise is not measured, and its rows are held to no noise)"))
    return ("measured on a busy machine: " + "; ".join(said) + f"; a row is named only beyond {K:g} times its "
            "measured noise (its ±); on a quiet machine the noise is smaller, for the last decimal")


def clock(a: Side, b: Side) -> Clock | None:
    """What the doctor's clock says of a pair where both sides carry its untraced step (None otherwise):
    ``gap_ms`` (B-A without the profiler), ``slower`` and ``faster`` (runs, by that clock), ``traced_gap_ms`` (the
    gap the rows split), ``profiler`` (each run's step traced over untraced, less 1: the profiler's share) and
    ``floor_ms`` (:data:`CLOCK_FLOOR` of the faster untraced step)."""
    ma, mb = a.measured, b.measured
    ua, ub = ma.untraced_step_ms if ma else None, mb.untraced_step_ms if mb else None
    if not ua or not ub:
        return None
    gap = ub - ua

    def share(e: Side, u: float) -> float:
        return ((e.measured.traced_step_ms if e.measured else None) or e.traced_step_ms or e.step_ms) / u - 1

    # the clock's step is a median: where fewer than half the steps compiled, it leaves their compiles out, so
    # the traced gap it is held to leaves them out too (the compilation row says them)
    left = {e.run: _compile_ms(e) for e in (a, b) if median_leaves_out_compile(e)}
    traced = (b.step_ms - left.get(b.run, 0.0)) - (a.step_ms - left.get(a.run, 0.0))
    return Clock(gap_ms=gap, slower=b.run if gap >= 0 else a.run, faster=a.run if gap >= 0 else b.run,
                 untraced_ms={a.run: ua, b.run: ub}, traced_gap_ms=traced, compile_left_out=left,
                 profiler={a.run: share(a, ua), b.run: share(b, ub)}, floor_ms=CLOCK_FLOOR * min(ua, ub))


def _compile_ms(e: Side) -> float:
    return float(e.cell_ms("rest", taxonomy.COMPILATION))


def median_leaves_out_compile(e: Side) -> bool:
    """Whether a side compiled inside its traced steps in fewer than half its steps (the doctor's log: the
    script's retraces over its steps; else the traced steps that compiled), so that the doctor's clock, the
    median step, leaves its compiles out."""
    if not _compile_ms(e):
        return False
    log = e.recorded.compiles if e.recorded else None
    if log and log.steps:
        return (log.retraces or log.compiles or 0) < 0.5 * log.steps
    return bool(e.steps_used) and e.compiles < 0.5 * e.steps_used


def clock_head(a: Side, b: Side) -> str:
    """The summary's first words where the doctor's clock is beside both traces ('' otherwise): which side the
    clock says is slower and by how much, and the profiler's share of each side's traced step."""
    c = clock(a, b)
    if c is None:
        return ""
    u = c.untraced_ms
    return (f"by the clock (twinbench doctor, without the profiler) {c.slower} is slower by {abs(c.gap_ms):.1f} "
            f"ms a step ({u[c.slower]:.1f} against {u[c.faster]:.1f} ms); {profiler_share(c)}" + median_note(c))


def median_note(c: Clock) -> str:
    """'' unless the clock's median step leaves a side's compiles out (:func:`median_leaves_out_compile`)."""
    if not c.compile_left_out:
        return ""
    return ("; the clock's step is a median, which leaves out the steps that compiled on "
            + " and ".join(c.compile_left_out) + " (fewer than half): its compilation row is the rest of that side's time")


def profiler_share(c: Clock) -> str:
    """Each side's traced step against the clock's (:func:`clock`): ``traced steps +38% on A and +5% on B
    against the clock`` (the profiler's cost, and on a busy machine the load's)."""
    return "traced steps " + " and ".join(f"{v:+.0%} on {run}" for run, v in c.profiler.items()) + \
        " against the clock"


def clock_check(a: Side, b: Side) -> str:
    """'' unless both runs carry the doctor's untraced step and the traced gap points the other way from it, the
    untraced gap by more than :data:`CLOCK_FLOOR` of the faster untraced step: then the rows would split a gap
    the clock does not show (however small the traced one: a profiler that adds 38% to one side turns a 41 ms gap
    into 16 ms the other way), and the fact says so."""
    c = clock(a, b)
    if c is None:
        return ""
    untraced, traced, floor = c.gap_ms, c.traced_gap_ms, c.floor_ms
    if traced * untraced >= 0 or abs(untraced) <= floor:
        return ""
    slower = lambda gap: b.run if gap > 0 else a.run  # noqa: E731
    return (f"the profiler turned the gap around: traced, {slower(traced)} is slower by {abs(traced):.1f} ms a step; "
            f"measured without the profiler (twinbench doctor), {slower(untraced)} is, by {abs(untraced):.1f} ms: "
            "the traces' rows would split a gap the clock does not show")


def phase_check(e: Side) -> str:
    """'' when a run's phases are consistent with a training step, else the fact that says they are not: its
    backward matmul FLOPs over its forward's outside :data:`BACKWARD_OVER_FORWARD`, or (no FLOPs counted) a
    backward with no forward."""
    t = e.throughput

    def flops(p: str) -> float:
        return sum(r.flops for c in ("matmul", "attention") if (r := t.get(p, {}).get(c)) is not None)

    fw, bw = flops("forward"), flops("backward")
    lo, hi = BACKWARD_OVER_FORWARD
    if bw and not fw:
        return (f"{e.run}: its backward does {bw / 1e9:.3g} GFLOP of matmuls a step and its forward none: the "
                "forward pass was not found")
    if fw and bw and not lo <= bw / fw <= hi:
        return (f"{e.run}: its backward does {bw / fw:.2f}x its forward's matmul FLOPs ({bw / 1e9:.3g} against "
                f"{fw / 1e9:.3g} GFLOP a step), where a training step does {lo:g}-{hi:g}x: its phases are not the "
                "program's")
    fwd, bwd = e.phase_ms("forward"), e.phase_ms("backward")
    if not fw and not bw and bwd > 0 and fwd < 0.1 * bwd:
        return (f"{e.run}: its forward is {fwd:.1f} ms against a {bwd:.1f} ms "
                "backward: the forward pass was not found")
    return ""


def refusal(failed: list[GateFailure]) -> str:
    """The summary's sentence when a check failed: no row named, which checks failed, and their facts."""
    which = ", ".join(dict.fromkeys(_GATE[f.check].words for f in failed))
    return f"no row is named as a cause; check{'s' if ',' in which else ''} failed: {which}. " + "; ".join(
        f.fact for f in failed)
