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
from typing import Any

from twinbench.explain import causes, memory_rows, ops, shapes
from twinbench.explain.breakdown import PHASES, Breakdown
from twinbench.record_sections import Record

TOLERANCE = 0.10
KEEP_OPS = 40  # op rows kept in a run's explanation besides every matmul-shaped one


def run_extras(r: Record, b: Breakdown, scale: float, cells: dict[str, dict[str, float]],
               scopes: dict[str, dict[str, float]], peak_source: str = "") -> dict[str, Any]:
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
    return {"ops": [g.to_dict() for g in sorted(kept + rest, key=lambda g: -g.ms)], "throughput": tput,
            "linearization": lin, "shared_forward": ops.shared_forward(groups),
            "warnings": [w for w in r.warnings if w.startswith("machine busy")],
            "peak": {"tflops": peak, "measured_at": measured_at, "age": ops.age(measured_at), "source": peak_source}}


def split(a: dict[str, Any], b: dict[str, Any], peak_a: float | None, peak_b: float | None) -> dict[str, float] | None:
    """work / peak / efficiency of one row (``a``, ``b``: its throughput cells); None when not computable."""
    if not a or not b or not peak_a or not peak_b:
        return None
    if not (a.get("flops") and b.get("flops") and a.get("ms") and b.get("ms")):
        return None
    sign = 1.0 if b["ms"] >= a["ms"] else -1.0
    (f, pf), (s, ps) = ((a, peak_a), (b, peak_b)) if sign > 0 else ((b, peak_b), (a, peak_a))
    at_f = f["ms"] * s["flops"] / f["flops"]  # S's work at F's speed
    work = at_f - f["ms"]
    peak = at_f * (pf / ps - 1)
    eff = s["ms"] - at_f * pf / ps
    return {"work_ms": sign * work, "peak_ms": sign * peak, "efficiency_ms": sign * eff}


def disagreements(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """Phases whose B-A differs between the methods by more than 10% of the larger step."""
    if not a.get("timing") or not b.get("timing"):
        return []
    step = max(a["step_ms"], b["step_ms"])
    out = []
    for p in PHASES:
        if p not in a["timing"] or p not in b["timing"] or any(p in (x.get("timing_apart") or {}) for x in (a, b)):
            continue
        td = b["timing"][p] - a["timing"][p]
        rd = b["trace"].get(p, 0.0) - a["trace"].get(p, 0.0)
        if abs(td - rd) > TOLERANCE * step:
            out.append({"phase": p, "timing_diff_ms": td, "trace_diff_ms": rd})
    return out


def _why_phase(p: str, a: dict[str, Any], b: dict[str, Any]) -> str:
    """What may explain a disagreement on phase ``p``: a known difference of the two methods."""
    if p in ("forward", "backward"):
        why = []
        for side in (a, b):
            sh = side.get("shared_forward") or {}
            if sh.get("ms", 0) > 0.01 * side["step_ms"]:
                why.append(f"{side['run']}'s forward keeps {sh['ops']} element-wise results as buffers the backward "
                           f"pass reads too ({sh['ms']:.1f} ms, e.g. {sh['largest'][0]}): the forward compiled alone "
                           "may fuse them away")
            if (side.get("linearization") or {}).get("ms", 0) > 0:
                why.append(f"{side['run']}'s forward-pass linearization ({side['linearization']['ms']:.1f} ms) "
                           "is already counted as backward")
        why.append("timing compiles/runs the forward alone, the trace sees it inside the whole step")
        return "; ".join(why)
    if p == "input":
        return "timing's input is the host step less the device step, noisy on a busy machine"
    if p == "optimizer":
        return "timing's optimizer is a difference of two whole steps, noisy on a busy machine"
    return "idle time has no op in the trace"


def pair_extras(a: dict[str, Any], b: dict[str, Any], table: list[dict[str, Any]], named: bool = True) -> dict[str, Any]:
    """Annotate the gap rows (throughput of both sides; a compute row's split; the phases' timing B-A)
    and build the matmul shapes table, the memory rows, and the sentences that say why (``named`` False: the
    evidence checks failed, so no sentence attributes a row: :func:`twinbench.explain.causes.gates`)."""
    pa, pb = a.get("peak", {}).get("tflops"), b.get("peak", {}).get("tflops")
    timing_ok = bool(a.get("timing") and b.get("timing"))
    for row in table:
        if row["level"] == 0:
            p = row["row"]
            if timing_ok and p in a["timing"] and p in b["timing"] and not any(
                    p in (x.get("timing_apart") or {}) for x in (a, b)):  # no timing B-A from a figure that is none
                row["timing_diff_ms"] = b["timing"][p] - a["timing"][p]
            continue
        p, c = row["row"].split(" / ")
        ta = (a.get("throughput") or {}).get(p, {}).get(c)
        tb = (b.get("throughput") or {}).get(p, {}).get(c)
        row["a_throughput"] = _cell(ta, row["a_ms"])
        row["b_throughput"] = _cell(tb, row["b_ms"])
        if c in ops.COMPUTE:
            sp = split(row["a_throughput"], row["b_throughput"], pa, pb)
            if sp is not None:
                row["split"] = sp
    shape_rows = shapes.table(a.get("ops", []), b.get("ops", []), pa, pb)
    mem = memory_rows.rows(a.get("memory_breakdown"), b.get("memory_breakdown"))
    dis = disagreements(a, b)
    return {"shapes": shape_rows, "memory": mem, "disagreements": dis,
            "why": programs_differ(a, b) + sentences(a, b, table if named else [], shape_rows, mem, dis)}


def _cell(t: dict[str, float] | None, ms: float) -> dict[str, float]:
    """A row's throughput: its FLOPs and bytes, the rates of its ops (over their traced durations), and the
    gap table's own milliseconds (which the split works on)."""
    if not t:
        return {}
    return {"ms": ms, **{k: t[k] for k in ("flops", "bytes", "tflops", "peak_share", "gbps") if k in t}}


def _peak_text(side: dict[str, Any]) -> str:
    pk = side.get("peak", {})
    if not pk.get("tflops"):
        return f"{side['run']}: no measured peak"
    if pk.get("source"):
        return f"{side['run']} {pk['tflops'] * 1e3:.0f} GFLOP/s ({pk['source']})"
    age = f", measured {pk['age']}" if pk.get("age") else ""
    return f"{side['run']} {pk['tflops'] * 1e3:.0f} GFLOP/s{age}"


#: a matmul's share of its framework's measured peak above which the reader is told what the peak is
ABOVE_PEAK = 1.02


def _above_peak(a: dict[str, Any], b: dict[str, Any], shape_rows: list[dict[str, Any]]) -> list[str]:
    """A line for each run whose matmuls ran above its measured peak (e.g. 112% of it): what that peak is."""
    out = []
    for key, side in (("a", a), ("b", b)):
        rows = [r for r in shape_rows if (r[key].get("peak_share") or 0) > ABOVE_PEAK]
        if not rows:
            continue
        top = max(rows, key=lambda r: r[key]["peak_share"])
        out.append(f"{side['run']}'s matmuls ran at up to {top[key]['peak_share']:.0%} of its measured peak "
                   f"({top['phase']} {top['shape']}; {_peak_text(side)}): that peak is the fastest square matmul "
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


def random_bytes(e: dict[str, Any]) -> float:
    """The bytes a step the ops drawing random numbers move (dropout masks, noise), from the op groups."""
    return sum(float(o.get("bytes") or 0.0) for o in e.get("ops") or []  # an op's own names say which it is
               if _RANDOM_TORCH.search(str(o.get("name", ""))) or _RANDOM_JAX.search(str(o.get("where", ""))))


def programs_differ(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Work one side does that the other does not, said as a difference of the programs, not a speed of a
    framework: random numbers (dropout masks broadcast over batch and heads on one side, one per element on the
    other; dropout on one side only), where one side moves over :data:`PROGRAMS_APART` times the other's."""
    ra, rb = random_bytes(a), random_bytes(b)
    hi, lo = max(ra, rb), min(ra, rb)
    if hi < 1e6 or hi < PROGRAMS_APART * lo:  # under 1 MB a step: a little noise, no dropout worth saying
        return []
    more, less = (a, b) if ra >= rb else (b, a)
    other = (f"{less['run']} {lo / 1e6:.2f} MB ({hi / lo:.0f}x less)" if lo else f"{less['run']} none")
    return [f"programs: {more['run']}'s ops drawing random numbers (dropout masks, noise) move {hi / 1e6:.2f} MB a "
            f"step, {other}: the two programs' dropout differs (a mask per element against one broadcast, or "
            "dropout on one side only), a difference of the scripts, not a speed of either framework"]


def shape_claim(a: dict[str, Any], b: dict[str, Any], shape_rows: list[dict[str, Any]], sign: int) -> str:
    """``largest matmul gap by shape: ...`` only where it is stable: the shape's gap, in the gap's direction,
    beyond its measured noise (:func:`causes.band`), and ahead of the next shape's by more than their noises
    combined, so that another trace of the same scripts would not name another shape. Where the noise was not
    measured, or the shapes are not told apart, the line says so and names none ('' when no shape matched)."""
    matched = sorted((r for r in shape_rows if r["matched"]), key=lambda r: -sign * r["diff_ms"])
    if not matched:
        return ""
    ra, rb = causes.noise(a), causes.noise(b)
    if ra is None or rb is None:
        return ("largest matmul gap by shape: none named (a side's noise was not measured: fewer than two traced "
                "steps); the matmuls-by-shape table has each shape's figures")
    noise = [causes.band(r["a"]["ms"], r["b"]["ms"], ra, rb) for r in matched]
    top = sign * matched[0]["diff_ms"]
    ahead = top - sign * matched[1]["diff_ms"] if len(matched) > 1 else top
    apart = (noise[0] ** 2 + noise[1] ** 2) ** 0.5 if len(matched) > 1 else noise[0]
    if top <= noise[0] or ahead <= apart:
        return ("largest matmul gap by shape: none named (no shape's gap stands beyond its measured noise and ahead "
                f"of the next one's: {matched[0]['phase']} {matched[0]['shape']} {top:+.2f} ±{noise[0]:.2f} ms); the "
                "matmuls-by-shape table has each shape's figures")
    return (f"largest matmul gap by shape (±{noise[0]:.2f} ms, ahead of the next by {ahead:.2f} ms; the trace's "
            "times, not an A/B of the shape): " + shapes.line(matched[0], a["run"], b["run"]))


def sentences(a: dict[str, Any], b: dict[str, Any], table: list[dict[str, Any]], shape_rows: list[dict[str, Any]],
              mem: dict[str, Any] | None, dis: list[dict[str, Any]]) -> list[str]:
    out = []
    busy = [f"{s['run']}: {s['warnings'][0]}" for s in (a, b) if s.get("warnings")]
    if busy:
        out.append("measured on a busy machine, so every millisecond below is uncertain (shapes, FLOPs and "
                   "layouts are not): " + "; ".join(busy))
    gap = b["step_ms"] - a["step_ms"]
    sign = 1 if gap >= 0 else -1
    split_rows = sorted((r for r in table if r.get("split")), key=lambda r: -sign * r["diff_ms"])
    for r in split_rows[:2]:
        sp = r["split"]
        ta, tb = r["a_throughput"], r["b_throughput"]
        work = f" + work {sp['work_ms']:+.1f} ms (FLOPs differ)" if abs(sp["work_ms"]) > 0.01 * abs(r["diff_ms"]) + 1e-9 else ""
        out.append(f"{r['row']} {r['diff_ms']:+.1f} ms = peak {sp['peak_ms']:+.1f} ms + efficiency "
                   f"{sp['efficiency_ms']:+.1f} ms{work}: {a['run']} runs it at {_share(ta)} of its peak, "
                   f"{b['run']} at {_share(tb)} (matmul peaks: {_peak_text(a)}; {_peak_text(b)})")
    out += attribution(a, b, table)
    said = shape_claim(a, b, shape_rows, sign)
    if said:
        out.append(said)
    out += _above_peak(a, b, shape_rows)
    for side in (a, b):
        lin = side.get("linearization") or {}
        if lin.get("ms", 0) > 0.005 * side["step_ms"]:
            out.append(f"{side['run']}: {lin['ms']:.1f} ms of its forward pass only computes pieces of the "
                       f"derivative ({lin['ops']} ops, largest: {', '.join(lin['largest'])}); counted as backward, "
                       "as torch and the timing method count them")
    for d in dis:
        out.append(f"the methods disagree on {d['phase']}: by trace B-A {d['trace_diff_ms']:+.1f} ms, by timing "
                   f"{d['timing_diff_ms']:+.1f} ms ({_why_phase(d['phase'], a, b)}); read that row with care")
    if mem:
        out.append(memory_rows.sentence(mem, a["run"], b["run"]))
    for letter, side in (("A", a), ("B", b)):
        if side.get("page_faults"):  # kernel time inside the ops' rows, which no trace row tells apart
            fix = ("`--try " + letter + ":host-malloc=tuned` runs it again with twinbench's malloc settings"
                   if side.get("host_malloc") == "system" else
                   f"under GLIBC_TUNABLES={side.get('glibc_tunables') or '(unset)'}")
            out.append(f"{side['run']}: {side['page_faults']} over its steady steps: part of every row of its "
                       f"step is the kernel zeroing fresh pages for the ops ({fix})")
    return out


#: how much one side must differ (ratio) before a row is said to be the framework's or the implementation's
DIFFERS = 1.2


def _library(run: str) -> str:
    return "XLA" if run.startswith("jax") else "torch" if run.startswith("torch") else run.split("/")[0]


def attribution(a: dict[str, Any], b: dict[str, Any], table: list[dict[str, Any]], top: int = 3) -> list[str]:
    """For the rows carrying most of the gap, whose part it is, from what both sides' ops did per step:

    * implementation: the slower side does more work in the row (FLOPs, or bytes for a memory-bound row) by
      over :data:`DIFFERS` x: extra ops, or more bytes moved;
    * framework: the same work (within :data:`DIFFERS` x) at a lower share of its own peak (compute rows) or
      a lower GB/s (memory rows): the framework's kernels run it slower. Two runs compiled by the same
      library (two JAX programs, a torchax program against a JAX twin: both XLA's) have no framework gap: the
      same work run slower there is the implementation's (its dtypes, layouts, what fuses).

    A row with neither (no FLOPs or bytes counted on one side, or both differ) is left unsaid. A row said
    names the slower side's largest ops in it (:func:`row_ops`): where to look, op by op."""
    gap = b["step_ms"] - a["step_ms"]
    sign = 1 if gap >= 0 else -1
    rows = sorted((r for r in table if r["level"] == 1  # the part a fused row may be named for (explain.causes)
                   and sign * r.get("named_ms", r["diff_ms"]) > 0.02 * abs(gap) + 1e-9),
                  key=lambda r: -sign * r.get("named_ms", r["diff_ms"]))[:top]
    out = []
    for r in rows:
        ta, tb = r.get("a_throughput") or {}, r.get("b_throughput") or {}
        (slow, ts), (fast, tf) = ((b, tb), (a, ta)) if sign > 0 else ((a, ta), (b, tb))
        compute = r["row"].split(" / ")[-1] in ops.COMPUTE
        unit, key = ("FLOPs", "flops") if compute else ("bytes", "bytes")
        ws, wf = ts.get(key) or 0.0, tf.get(key) or 0.0
        if not ws or not wf:
            continue
        what = f"{r['row']} ({sign * r['diff_ms']:+.1f} ms)"
        before = len(out)
        same = _library(slow["run"]) == _library(fast["run"])  # one compiler on both sides: no framework gap
        if ws > DIFFERS * wf:
            out.append(f"implementation: {what}: {slow['run']} does {ws / wf:.1f}x the {unit} of {fast['run']} "
                       "in this row (extra ops" + ("" if compute else ", more bytes moved") + ")")
        elif same and ((compute and ts.get("peak_share") and tf.get("peak_share")
                        and tf["peak_share"] > DIFFERS * ts["peak_share"])
                       or (not compute and ts.get("gbps") and tf.get("gbps") and tf["gbps"] > DIFFERS * ts["gbps"])):
            out.append(f"implementation: {what}: the same {unit} (within {DIFFERS:.1f}x), both compiled by "
                       f"{_library(slow['run'])}, run slower in {slow['run']}: how the row is written (its dtypes, "
                       "layouts, what fuses), not the framework")
        elif compute and ts.get("peak_share") and tf.get("peak_share") and                 tf["peak_share"] > DIFFERS * ts["peak_share"]:
            out.append(f"framework: {what}: the same FLOPs (within {DIFFERS:.1f}x); {_library(slow['run'])}'s "
                       f"kernels run them at {ts['peak_share']:.0%} of {slow['run']}'s peak, "
                       f"{_library(fast['run'])}'s at {tf['peak_share']:.0%} of {fast['run']}'s")
        elif not compute and ts.get("gbps") and tf.get("gbps") and tf["gbps"] > DIFFERS * ts["gbps"]                 and ws <= DIFFERS * wf:
            out.append(f"framework: {what}: the same bytes (within {DIFFERS:.1f}x) moved at {ts['gbps']:.1f} GB/s "
                       f"by {_library(slow['run'])}, {tf['gbps']:.1f} GB/s by {_library(fast['run'])}")
        largest = row_ops(slow, r["row"])
        if len(out) > before and largest:
            out[-1] += f"; largest there in {slow['run']}: {largest}"
    return out


def row_ops(side: dict[str, Any], row: str, n: int = 2) -> str:
    """The ``n`` largest ops of one run in a gap row (``"backward / data movement"``), from its op list
    (``kernels``): ``fusion.1 (transpose(jvp())/convert_element_type) 6.2 ms``; '' when it has none."""
    phase, _, category = row.partition(" / ")
    mine = sorted((k for k in side.get("kernels") or [] if k.get("phase") == phase and k.get("category") == category),
                  key=lambda k: -k["ms"])[:n]
    return ", ".join(f"{k['name']}" + (f" ({k['op']})" if k.get("op") and k["op"] != k["name"] else "")
                     + f" {k['ms']:.1f} ms" for k in mine)


def _share(t: dict[str, float]) -> str:
    return f"{t['peak_share']:.0%}" if t.get("peak_share") is not None else "?"


# ---------------------------------------------------------------------------------------------- printing
def _tp(t: dict[str, float] | None) -> str:
    if not t:
        return ""
    if t.get("tflops"):
        s = f"{t['tflops'] * 1e3:.0f}"
        return s + (f" ({t['peak_share']:.0%})" if t.get("peak_share") is not None else "")
    if t.get("gbps"):
        return f"{t['gbps']:.1f} GB/s"
    return ""


def throughput_cells(row: dict[str, Any]) -> tuple[str, str, str]:
    """The gap table's extra cells of one row: timing B-A (phases), A and B throughput (categories)."""
    td = row.get("timing_diff_ms")
    return ("" if td is None else f"{td:+.2f}", _tp(row.get("a_throughput")), _tp(row.get("b_throughput")))


def print_extras(result: dict[str, Any], out: Any) -> None:
    from rich.table import Table

    a, b = result["a"]["run"], result["b"]["run"]
    if result.get("shapes"):
        t = Table(title=f"matmuls by shape (largest of each run, matched where phase and shape agree; A {a}, B {b})",
                  title_justify="left")
        for col, just in (("phase", "left"), ("shape", "left"), ("A ms", "right"), ("layout", "left"),
                          ("GFLOP/s (peak)", "right"), ("B ms", "right"), ("layout", "left"),
                          ("GFLOP/s (peak)", "right"), ("B-A ms", "right")):
            t.add_column(col, justify=just)  # type: ignore[arg-type]
        for r in result["shapes"]:
            sa, sb = r["a"], r["b"]
            t.add_row(r["phase"], r["shape"] + ("" if r["matched"] else " (one run)"),
                      f"{sa['ms']:.2f}" if sa["ms"] else "-", sa["layout"], _tp(sa), f"{sb['ms']:.2f}" if sb["ms"] else "-",
                      sb["layout"], _tp(sb), f"{r['diff_ms']:+.2f}")
        out.print(t)
    mem = result.get("memory")
    if mem:
        t = Table(title=f"memory: B {b} - A {a} = {mem['gap_bytes'] / memory_rows.MiB:+.0f} MiB at the peak",
                  title_justify="left")
        for col in ("part", "A MiB", "B MiB", "B-A MiB", "share of gap"):
            t.add_column(col, justify="left" if col == "part" else "right")
        for r in mem["rows"]:
            t.add_row(r["row"], f"{r['a_bytes'] / memory_rows.MiB:.0f}", f"{r['b_bytes'] / memory_rows.MiB:.0f}",
                      f"{r['diff_bytes'] / memory_rows.MiB:+.0f}", f"{r['share']:.0%}")
        out.print(t)
    for s in result.get("why", []):
        out.print(f"  why: {s}", highlight=False)
