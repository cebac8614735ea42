"""Per-run explanations (both methods, their checks) and the gap table between two runs.

The trace gives each phase's and category's *share* of a traced step; profiled steps run slower than the
measured ones, so those shares are applied to the run's measured ``step_ms`` (a share of a measured time,
never a profiled time). The timing method gives milliseconds directly. Each run's checks: the timing phases
sum to the measured step (scaled to it, with a note when they were off by more than 10%); the two methods agree per phase within 10% of the step (otherwise the
output says so); categorized time >= 90% (otherwise the largest "other" members are listed).
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from twinbench.explain import (
    causes,
    compilation,
    doctor_timing,
    files,
    jax_trace,
    memory_rows,
    torch_trace,
    why,
)
from twinbench.explain.breakdown import DISTURBED, PHASES, WHOLE_ITERATION, Breakdown
from twinbench.explain.result import Explained
from twinbench.explain.side import Cut, Row, Side, typed
from twinbench.explain.steps import TraceError
from twinbench.folder_io import terminal
from twinbench.measure import page_faults
from twinbench.record import Record, as_record, condition_warnings
from twinbench.record_sections import Conditions, Explain, Run, Speed

TOLERANCE = 0.10
CATEGORIZED_MIN = 0.90


def label(r: Record) -> str:
    """``torch/eager`` (``Record.label``)."""
    return as_record(r).label()


def read_trace(r: Record) -> Breakdown:
    """The breakdown of a record's trace, read as what it is: a JAX profile (the record carries the compiled HLO
    text that names its ops, or the file is one), else a Chrome trace; raises :class:`TraceError` when it has
    none or it is unreadable."""
    r = as_record(r)
    path = r.trace.path
    if not path:
        raise TraceError(f"{r.label()}: no trace ({r.trace.error or 'run without --trace/--explain'})")
    if not r.explain.hlo_path and not needs_hlo(path):  # no compiled HLO beside it, and no JAX profile
        return torch_trace.read(path)
    hlo_path = r.explain.hlo_path
    if not hlo_path:
        raise TraceError(f"{r.label()}: no compiled HLO text beside the trace (run with --explain)")
    return jax_trace.read(path, files.read_text(hlo_path, "compiled HLO text"))


def needs_hlo(path: str) -> bool:
    """Whether a record's trace is one its compiled HLO text names the ops of: a JAX profile (its xplane, the
    Chrome export beside it, or the folder jax.profiler wrote), by what the file is (:func:`files.kind`)."""
    p = Path(path)
    return p.is_dir() or files.kind(p) in ("jax-chrome", "xplane")


def explain_run(r: Record) -> Side:
    """One run: measured step, phases by timing and by trace (scaled to the measured step), checks."""
    r = as_record(r)
    b = read_trace(r)
    timing = dict(r.explain.timing or {})
    busy = busy_warnings(r)
    notes = list(busy)
    if not timing and r.explain.error:
        notes.append(f"timing: {r.explain.error}")
    negative = {p: v for p, v in timing.items() if not isinstance(v, (int, float)) or v < 0}
    for p, v in negative.items():  # a phase that came out negative is no measurement: not shown as one
        del timing[p]
        notes.append(f"timing: {p} not measured (its difference of timed runs came out {v} ms: "
                     f"{'the machine was busy' if busy else 'noise larger than the phase'})")
    c = r.conditions
    e = explain_breakdown(b, r.label(), float(r.timing.step_ms or 0.0), timing, notes, r)
    return msgspec.structs.replace(
        e, run_id=r.run.run_id, trace_path=r.trace.path, memory_breakdown=memory_rows.measured(r.memory.breakdown),
        busy=bool(busy),
        host_malloc=r.value("host_malloc"), glibc_tunables=c.glibc_tunables,
        page_faults=page_faults.describe(c.page_faults_per_step, c.kernel_cpu_share)
        if page_faults.costly(c.kernel_cpu_share, c.page_faults_per_step, c.fault_cpu_share) else None)


def explain_trace(arg: str, step_marker: str | None = None, rank: int | None = None, device: int | None = None,
                  hlo: str | None = None, steps: tuple[int | None, int | None] | None = None) -> Side:
    """Any trace file (see :mod:`.trace_file`): its own traced step, no timing method, the same checks."""
    from twinbench.explain import trace_file

    kind, path, b = trace_file.read(arg, step_marker, rank, device, hlo or doctor_timing.step_hlo(arg), steps)
    hlo_path = b.hlo_path or str(path.parent / "step.hlo.txt")
    recorded = doctor_timing.conditions(arg, path)  # the load and step kind twinbench doctor saw, if it ran
    load = recorded.load
    busy = [f"machine busy: other processes kept {load.others_cores:.1f} of {load.cores} cores busy while "
            "twinbench doctor recorded the steps"] if load is not None and load.busy else []
    e = explain_breakdown(b, f"{kind}:{trace_label(path)}", b.step_ms, {}, list(busy),
                          trace_record(kind, hlo_path, b.peak_tflops, busy, load.cores if load else None),
                          b.peak_source)
    e = msgspec.structs.replace(e, trace_path=str(path), recorded=recorded, busy=bool(busy))
    measured, note = doctor_timing.read(arg, path)  # the step twinbench doctor timed without the profiler
    if measured is not None:
        e = msgspec.structs.replace(e, measured=measured)
        e = msgspec.structs.replace(e, notes=e.notes + doctor_timing.notes(e))
    if note:
        e = msgspec.structs.replace(e, notes=[*e.notes, note])
    return e


def trace_record(framework: str, hlo_path: str | None = None, peak_tflops: float | None = None,
                 warnings: list[str] | None = None, cpu_count: int | None = None) -> Record:
    """What a trace file says of its run, as the record :func:`explain_breakdown` reads: its framework, the
    compiled HLO text beside it, the device's peak and the warnings of the steps twinbench doctor recorded.
    No run was measured (strategy ``?``, as :func:`twinbench.record.as_record` gives a hand-made record)."""
    return Record(status="ok", run=Run(framework=framework, strategy="?"), warnings=list(warnings or []),
                  conditions=Conditions(cpu_count=cpu_count), speed=Speed(peak_tflops=peak_tflops),
                  explain=Explain(hlo_path=hlo_path))


def trace_label(path: Path) -> str:
    """A trace named by where it came from, not by its file's stem alone (``jax.profiler`` names its file after
    the host, ``vm``): a JAX profile by the folder given to ``jax.profiler`` (the one above
    ``plugins/profile/DATE/``), any other trace by its folder and stem (``nanogpt_torch/trace``)."""
    name = path.name
    for ext in (".gz", ".json", ".xplane.pb", ".pt.trace"):
        name = name.removesuffix(ext)
    parts = path.resolve().parts
    if len(parts) >= 5 and parts[-4:-2] == ("plugins", "profile"):
        return parts[-5]
    folder = path.resolve().parent.name
    label = f"{folder}/{name}" if folder else name
    return label if len(label) <= 48 else "…" + label[-47:]


def explain_breakdown(b: Breakdown, run: str, step: float, timing: dict[str, float],
                      notes: list[str], r: Record, peak_source: str = "") -> Side:
    """A breakdown's shares applied to ``step`` ms (the measured step of a run, the traced one of a trace);
    ``r``: the run's record (for a trace file, :func:`trace_record`), read by the why rows; ``peak_source``:
    where a peak that is not the record's measured one came from (:func:`twinbench.explain.why.run_extras`)."""
    scale = step / b.step_ms if b.step_ms else 0.0
    cells = {p: {c: v * scale for c, v in row.items() if v} for p, row in b.cells.items()}
    scopes = {s: {p: v * scale for p, v in row.items() if v} for s, row in b.scopes.items()}
    extras = why.run_extras(r, b, scale, cells, scopes, peak_source)  # (JAX) moves forward-pass linearization to backward
    trace_phases = {p: sum(cells.get(p, {}).values()) for p in PHASES}
    share, other = b.categorized_share(), b.largest_other()
    notes = list(b.notes) + notes
    timing_raw = dict(timing)
    timing_scale, unmeasured = 1.0, {}
    if timing:
        timing, note = scale_timing(timing, step)
        if note:
            notes.append(note)
        raw_sum = sum(timing_raw.get(p, 0.0) for p in PHASES)
        timing_scale = step / raw_sum if step and raw_sum > 0 else 1.0  # the column's header says it
        unmeasured = apart(timing, trace_phases, step)
        for p in PHASES:
            if p in unmeasured:
                shown = f" ({timing_raw[p]:.1f} ms timed, scaled to the step)" if abs(timing_scale - 1) > 1e-9 else ""
                notes.append(f"timing's {p} is {timing[p]:.1f} ms{shown} against the trace's {trace_phases[p]:.1f} ms "
                             f"({unmeasured[p]:.1f}x apart): a figure two methods disagree on by that much is not a "
                             "measurement; the trace's figure is the one the gap table uses, timing's is left out "
                             "of its B-A")
            elif p in timing and step and abs(timing[p] - trace_phases[p]) > TOLERANCE * step:
                notes.append(f"methods disagree on {p}: timing {timing[p]:.1f} ms, trace {trace_phases[p]:.1f} ms")
    if share < CATEGORIZED_MIN:
        top = ", ".join(f"{terminal(k, 80)} {v:.2f} ms" for k, v in list(other.items())[:5])  # op names: data
        notes.append(f"only {share:.0%} of op time categorized; largest 'other': {top}")
    if b.steps_used < b.steps_traced:
        notes.append(f"{b.steps_traced - b.steps_used} of {b.steps_traced} traced steps left out: over "
                     f"{DISTURBED}x the fastest (disturbed by another process?)")
    if b.overlap > 1.05:
        notes.append(f"ops overlapped (summed op time {b.overlap:.2f}x the time anything ran): scaled to it")
    e = Side(run=run, step_ms=step, traced_step_ms=b.step_ms, timing=timing, timing_raw=timing_raw,
             timing_scale=timing_scale, timing_apart=unmeasured, trace=trace_phases, cells=cells, scopes=scopes,
             categorized_share=share, other=other, notes=notes, source=b.source,
             device=b.device, idle=b.idle, device_name=r.run.device, cores=r.conditions.cpu_count,
             programs=programs(b), step_method=b.step_method, steps_traced=b.steps_traced, steps_used=b.steps_used,
             kernels=[t.kernel() for t in b.top_ops(50)], cut=typed(b.cut, Cut) if b.cut else None,
             step_spread_ms=spread_ms(b, step), step_times_ms=[t * step for t in b.step_times],
             compiles=b.compiles, compiler=b.compiler, ops=extras.ops, throughput=extras.throughput,
             linearization=extras.linearization, shared_forward=extras.shared_forward, warnings=extras.warnings,
             peak=extras.peak)
    e = causes.physical(e)  # rates no device reaches are withheld, and said
    for line in e.impossible:
        notes.append(f"{line}: not shown (its FLOPs or bytes are not what ran: a cache served them, or they "
                     "were counted twice)")
    return e


def spread_ms(b: Breakdown, step: float) -> float:
    """How much the attributed steps that compiled nothing move, slowest less fastest, on ``step``'s scale."""
    t = b.step_times
    return (max(t) - min(t)) * step if len(t) >= 2 else b.step_spread * step


def programs(b: Breakdown) -> dict[str, int]:
    """XLA programs other than the step's compiled module that ran each step, with their executions a step
    (a JAX step dispatched op by op runs each op as one: ``jit_dot_general``, ``jit_add``...); {} for torch."""
    out: dict[str, int] = {}
    for t in b.ops.values():
        module, sep, _ = t.name.partition(":")
        if sep and t.phase == "rest" and t.category == "other" and module.startswith("jit_"):
            out[module] = max(out.get(module, 0), t.count)
    return out


def scale_timing(timing: dict[str, float], step: float) -> tuple[dict[str, float], str]:
    """The timing method's phases on the measured step's scale, and a note when that moved them.

    The phases are differences of separately timed, synced runs (host step, placed step, forward,
    forward+backward; see :mod:`.timing`), so they add up, by construction, to the timing's *own* step: one
    synced step at a time, after the measured ones. That step is not the measured step (which runs without a
    sync between steps, JAX dispatching ahead), and can differ from it by more than noise: the phases are
    scaled by measured / timed step so that they add up to the measured step, and the note says by how much.
    """
    tsum = sum(timing.get(p, 0.0) for p in PHASES)
    if not step or tsum <= 0:
        return dict(timing), ""
    factor = step / tsum
    out = {k: (v * factor if k in PHASES else v) for k, v in timing.items()}
    if abs(factor - 1) <= TOLERANCE:
        return out, ""
    return out, (f"timing: its phases (timed one synced step at a time) sum to {tsum:.1f} ms, the measured step "
                 f"is {step:.1f} ms ({tsum / step - 1:+.0%}); shown scaled by {factor:.2f} to the measured step")


#: a phase whose timing and trace figures are this many times apart (the larger over the smaller, each above
#: :data:`TOLERANCE` of the step apart) has no measurement, only two methods that disagree
APART = 2.0


def apart(timing: dict[str, float], trace: dict[str, float], step: float) -> dict[str, float]:
    """The phases whose timing (as shown) and trace figures are over :data:`APART` times apart, and by how
    much (the larger over the smaller; a phase one method puts at zero: the other's ms over 1% of the step)."""
    out = {}
    for p in PHASES:
        t, r = timing.get(p), trace.get(p, 0.0)
        if t is None or not step or abs(t - r) <= TOLERANCE * step:
            continue
        lo = max(min(t, r), 0.01 * step)
        if max(t, r) / lo > APART:
            out[p] = max(t, r) / lo
    return out


def busy_warnings(r: Record) -> list[str]:
    """The record's warnings that the machine was busy while it ran (its own, or from its measured load): a
    gap or a phase measured under contention is not a result, and every explain output says so."""
    r = as_record(r)
    saved = [w for w in r.warnings if w.startswith("machine busy")]
    return list(dict.fromkeys(saved + [w for w in condition_warnings(r) if w.startswith("machine busy")]))


def rows(a: Side, b: Side, expand: str = "categories") -> list[Row]:
    """Gap rows: each phase, then (expanded) its categories or scopes; A ms, B ms, B-A, share of the gap."""
    gap = b.step_ms - a.step_ms
    out = []

    def row(name: str, level: int, va: float, vb: float) -> None:
        out.append(Row(row=name, level=level, a_ms=va, b_ms=vb, diff_ms=vb - va, share=(vb - va) / gap if gap else 0.0))

    for p in PHASES:
        row(p, 0, a.trace.get(p, 0.0), b.trace.get(p, 0.0))
        if expand == "scopes":
            names = sorted(set(a.scopes) | set(b.scopes))
            for s in names:
                va, vb = a.scopes.get(s, {}).get(p, 0.0), b.scopes.get(s, {}).get(p, 0.0)
                if va or vb:
                    row(f"{p} / {s}", 1, va, vb)
        else:
            cats = sorted(set(a.cells.get(p, {})) | set(b.cells.get(p, {})))
            for c in cats:
                row(f"{p} / {c}", 1, a.cells.get(p, {}).get(c, 0.0), b.cells.get(p, {}).get(c, 0.0))
    return out


def largest(table: list[Row], level: int = 1) -> Row:
    """The row (at ``level``) that carries the most of the gap, in the gap's direction."""
    cand = [r for r in table if r.level == level] or [r for r in table if r.level == 0]
    sign = 1 if sum(r.diff_ms for r in table if r.level == 0) >= 0 else -1
    return max(cand, key=lambda r: sign * r.diff_ms)


def plus_minus(ms: float | None) -> str:
    """A measured noise as printed beside a figure of one decimal: `` ±0.4``; steps that agree to under the last
    decimal (a device's steps) print `` ±<0.1``, not a noise of exactly zero; nothing where none was measured."""
    if ms is None:
        return ""
    return f" ±{ms:.1f}" if ms >= 0.05 else " ±<0.1"


def sentence(a: Side, b: Side, table: list[Row]) -> str:
    gap = b.step_ms - a.step_ms
    slow, fast = (b, a) if gap >= 0 else (a, b)
    sign = 1 if gap >= 0 else -1
    level = 1 if any(r.level == 1 for r in table) else 0  # --scopes on traces that name no scopes: phases
    top = causes.named(table, gap, level)

    def pm(r: Row) -> str:  # its measured noise, where both sides' was measured (causes.mark)
        return plus_minus(r.uncertainty_ms)

    def part(r: Row) -> str:
        ms = r.nameable_ms
        if r.row == compilation.ROW:  # its count, and what the doctor recorded of why it compiled
            return f"{ms / gap if gap else 0.0:.0%} {compilation.said(r, a, b, pm(r))}"
        said = f"{ms / gap if gap else 0.0:.0%} {r.row} ({sign * ms:+.1f}{pm(r)} ms"
        if r.fused_with:  # capped: the rest of the row's difference is work the other side fused elsewhere
            said += (f" of its {sign * r.diff_ms:+.1f}: the rest is the same work fused into "
                     f"{', '.join(r.fused_with)} on the other side")
        return said + ")"

    attributed = sum(r.diff_ms for r in table if r.level == 0)
    # the rows large enough to be named that their noise withheld: said, with the noise that withheld them
    held = [r for r in table if r.level == level and r.within_noise_ms and not causes.unattributed(r)
            and sign * r.diff_ms >= causes.NAMED_SHARE * abs(gap)]
    small = (f"; rows under {causes.NAMED_SHARE:.0%} of the gap each are not named"
             if len(top) < 3 and sum(r.level == level for r in table) > len(top) + len(held) else "")
    withheld = ("; withheld: " + ", ".join(
        f"{r.row} {sign * r.diff_ms:+.1f} ms, within the measured noise of ±{r.within_noise_ms or 0.0:.1f} ms"
        for r in held[:3]) if held else "")
    whole = causes.gap_noise(a, b)
    said = "; ".join(map(part, top)) if top else "no row carries a part of it beyond its measured noise"
    traced = f"{abs(gap):.1f}" + plus_minus(whole)
    ck = causes.clock(a, b)
    if ck and ck.gap_ms * gap > 0:  # framed on the clock: the rows split the traced gap, the same way
        head = (f"{slow.run}'s extra {abs(ck.gap_ms):.1f} ms per step over {fast.run} by the clock (twinbench "
                f"doctor, without the profiler; {causes.profiler_share(ck)}{causes.median_note(ck)}); traced, "
                f"{traced} ms")
    elif ck:  # the clock has no gap beyond its floor, or the other way within it: said, and the traced rows
        head = f"{causes.clock_head(a, b)}; traced, {slow.run}'s extra {traced} ms per step over {fast.run}"
    else:
        head = f"{slow.run}'s extra {traced} ms per step over {fast.run}"
    text = head + ": " + said + withheld + small + f" (rows sum to {abs(attributed):.1f} ms of it)"
    if whole is not None and abs(gap) <= whole:
        text = f"the whole gap is within the measured noise (±{whole:.1f} ms a step): " + text
    idle = [r for r in table if causes.unattributed(r) and sign * r.diff_ms >= causes.NAMED_SHARE * abs(gap)]
    if idle:
        text += ("; " + ", ".join(f"{r.row} {sign * r.diff_ms:+.1f} ms" for r in idle)
                 + " is host time no op covers (the loop's Python, dispatch, and the profiler's own cost per op): "
                 "a trace cannot say which; time the loop without the profiler (twinbench doctor SCRIPT)")
    if top and abs(top[0].share) > 1:  # a row larger than the whole gap: say what offsets it
        back = sorted((r for r in table if r.level == level and sign * r.diff_ms < 0), key=lambda r: sign * r.diff_ms)[:3]
        if back:
            text += (f"; {top[0].row} is larger than the whole gap because rows go the other way: "
                     + ", ".join(f"{r.row} {sign * r.diff_ms:+.1f} ms" for r in back)
                     + f" ({fast.run} slower there)")
    return text


def cut_line(a: Side, b: Side) -> str:
    """One line when the two runs' step annotations span different things (one the whole loop iteration, the
    other the compiled step only), with the figures and how much of the gap that difference is ("" when they
    are cut alike or a trace has too few steps to tell)."""
    ca, cb = a.cut, b.cut
    if ca is None or cb is None:
        return ""
    whole = {x.run: c.coverage >= WHOLE_ITERATION for x, c in ((a, ca), (b, cb))}
    if len(set(whole.values())) < 2:
        return ""

    def said(x: Side, c: Cut) -> str:
        if c.coverage >= WHOLE_ITERATION:
            return f"{x.run}'s steps span the whole loop iteration ({c.span_ms:.1f} ms)"
        if c.aligned:
            return (f"{x.run}'s annotation only {c.span_ms:.1f} ms of its {c.iteration_ms:.1f} ms iteration "
                    "(its ops ran after it), so its steps were taken start to start")
        return (f"{x.run}'s only {c.span_ms:.1f} ms of its {c.iteration_ms:.1f} ms iteration "
                f"({c.iteration_ms - c.span_ms:.1f} ms of loop work between its steps: the batch, logging, "
                "host reads)")

    gap_traced = (b.traced_step_ms or b.step_ms) - (a.traced_step_ms or a.step_ms)
    gap_iter = cb.iteration_ms - ca.iteration_ms
    if ca.aligned or cb.aligned:
        return f"steps cut differently, aligned: {said(a, ca)}; {said(b, cb)}. The gap is iteration against iteration"
    return (f"steps cut differently: {said(a, ca)}; {said(b, cb)}. Iteration against iteration (start to start) "
            f"the gap is {gap_iter:+.1f} ms, not {gap_traced:+.1f} ms: {gap_traced - gap_iter:+.1f} ms of the "
            "traced gap is what the two annotations leave in or out (its rest / idle row), not the step")


def explain_pair(ra: Record, rb: Record, expand: str = "categories") -> Explained:
    return pair(explain_run(ra), explain_run(rb), expand)


def pair(a: Side, b: Side, expand: str = "categories") -> Explained:
    """The gap table of two explained runs or traces."""
    table = rows(a, b, expand)
    causes.mark(a, b, table)
    failed = causes.gates(a, b)  # the evidence a named row needs; where it fails, no row is named
    extras = why.pair_extras(a, b, table if expand != "scopes" else [], named=not failed)
    summary = causes.refusal(failed) if failed else sentence(a, b, table)
    if failed and causes.clock(a, b):  # framed on the side the clock says is slower, rows named or not
        summary = f"{causes.clock_head(a, b)}. {summary[0].upper()}{summary[1:]}"
    if expand == "scopes" and not any(r.level for r in table):
        summary = ("--scopes: neither run names twinbench's scopes (embed, block{i}.attn, block{i}.mlp, head, loss "
                   "as jax.named_scope / record_function names): rows by phase only. " + summary)
    for line in (cut_line(a, b), doctor_timing.gap_line(a, b), causes.busy_line(a, b)):
        if line:
            summary = f"{summary}\n  {line}"
    busy = [x.run for x in (a, b) if x.busy]  # its noise measured and said (causes.busy_line)
    return Explained(a=a, b=b, gap_ms=b.step_ms - a.step_ms, rows=table, largest=largest(table), summary=summary,
                     shapes=extras.shapes, memory=extras.memory, disagreements=extras.disagreements, why=extras.why,
                     busy=busy, gates=failed, noise_ms=causes.gap_noise(a, b))
