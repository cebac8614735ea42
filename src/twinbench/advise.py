"""Which framework to use for a planned run: the decision logic of ``twinbench advise``, on records alone.

Model of the planned run (stated in every answer): the planned steps are one day's training; each of the
``changes_per_day`` model changes that day restarts from a cold compile. The compile overhead of a run is
its first step minus one steady step (``first_step_s - step_ms/1e3``), so a plan costs

    total = first_step_s + (plan_steps - 1) * step_ms / 1e3 + changes_per_day * overhead

For each framework the strategy with the least total is its best; the framework with the least total is
recommended. Every number in the answer is either a record field (quoted with its ``run_id``) or this
formula applied to record fields.
"""

from __future__ import annotations

import math
from typing import Annotated

import msgspec

from twinbench.limits import MAX_PLAN_STEPS
from twinbench.record import Record

#: Below this relative difference in planned total, the answer is a close call (timing noise on a busy
#: machine is of this order; see the step-time spread p10-p90 in the records).
CLOSE_CALL = 0.05
#: A winner needing this much more peak memory than the other framework gets the fact as a caveat.
MEMORY_CAVEAT = 0.25

ASSUMPTION = ("the planned steps are one day's training; each model change that day costs one cold compile "
              "(compile overhead = first-step time minus one steady step); steady steps at the median step time")


class Candidate(msgspec.Struct, kw_only=True, frozen=True):
    """One usable run of a framework, by its planned total."""

    strategy: str = ""
    run_id: str = ""
    total_s: float = 0.0


class FrameworkBest(msgspec.Struct, kw_only=True, frozen=True):
    """A framework's best run for the plan: its record's figures and the planned total, with the others ranked."""

    strategy: str = ""
    run_id: str = ""
    first_step_s: float | None = None
    step_ms: float | None = None
    step_ms_p10: float | None = None
    step_ms_p90: float | None = None
    compile_s: float | None = None
    compile_overhead_s: float = 0.0  # the first step less a steady one: what each cold compile costs
    compiles: int = 1  # cold compiles a day: 1 + model changes
    total_s: float = 0.0
    peak_mem_bytes: int | None = None
    peak_mem_source: str | None = None
    candidates: list[Candidate] = []


class Failed(msgspec.Struct, kw_only=True, frozen=True):
    run: str = ""
    run_id: str = ""
    error: str | None = None


class BreakEven(msgspec.Struct, kw_only=True, frozen=True):
    """Where the run that compiles longer overtakes the other (``steps`` None: never)."""

    run: str = ""
    against: str = ""
    steps: float | None = None
    changes_per_day: int = 0
    text: str = ""


class Recommendation(msgspec.Struct, kw_only=True, frozen=True):
    """The framework to use (None: no run succeeded), why, and what it saves against the next best."""

    framework: str | None = None
    strategy: str | None = None
    run_id: str | None = None
    total_s: float | None = None
    saved_s: float | None = None
    close_call: bool = False  # the planned totals are within CLOSE_CALL of each other
    summary: str = ""
    reasons: list[str] = []


class Advice(msgspec.Struct, kw_only=True, frozen=True):
    """``advice.json``: the plan, each framework's best run, the break-even of the two leaders, the recommendation
    and its lines. Every field has a default, so a file of an earlier twinbench (or a part of one) still reads;
    ``report`` reads it with this type (a field of another type: one line naming it)."""

    #: a count :data:`limits.MAX_PLAN_STEPS` bounds
    plan_steps: Annotated[int, msgspec.Meta(ge=1, le=MAX_PLAN_STEPS)] | None = None
    changes_per_day: int = 0
    measured_on: str = ""
    assumption: str = ""
    formula: str = ""
    frameworks: dict[str, FrameworkBest] = {}
    failed: list[Failed] = []
    results: str = ""  # the results.jsonl its run ids are of
    break_even: BreakEven | None = None
    recommendation: Recommendation | None = None
    lines: list[str] = []


def label(r: Record) -> str:
    return r.label()


def usable(r: Record) -> bool:
    """A usable run (``Record.usable``) measured from a cold compile cache (the plan's compiles are cold: see
    ASSUMPTION)."""
    return r.usable() and r.run.compile_cache == "cold"


def overhead_s(r: Record) -> float:
    """Compile (and other one-off) cost of a run: first step minus one steady step, never negative."""
    return max(0.0, r.timing.first_step_s - r.timing.step_ms / 1e3)


def planned_total_s(r: Record, plan_steps: int, changes_per_day: int = 0) -> float:
    """Wall time of the planned run (see the module docstring)."""
    return r.timing.first_step_s + (plan_steps - 1) * r.timing.step_ms / 1e3 + changes_per_day * overhead_s(r)


def break_even(a: Record, b: Record, changes_per_day: int = 0) -> float | None:
    """Plan length (steps) from which ``a`` has the lower planned total than ``b``.

    ``0`` when ``a`` is never behind, ``inf`` when it never catches up. With K changes a day, each of the
    1 + K compiles is paid again, so the break-even moves out by the factor 1 + K.
    """
    oa, ob = overhead_s(a), overhead_s(b)
    sa, sb = a.timing.step_ms / 1e3, b.timing.step_ms / 1e3
    extra = (1 + changes_per_day) * (oa - ob)  # a's extra one-off cost over the day
    saving = sb - sa  # a's saving per step
    if extra <= 0 and saving >= 0:
        return 0.0
    if saving <= 0:
        return math.inf
    return extra / saving


def best_per_framework(records: list[Record], plan_steps: int,
                       changes_per_day: int = 0) -> dict[str, Record]:
    """The usable record of least planned total, per framework."""
    best: dict[str, Record] = {}
    for r in records:
        if not usable(r):
            continue
        cur = best.get(r.run.framework)
        if cur is None or planned_total_s(r, plan_steps, changes_per_day) < planned_total_s(
                cur, plan_steps, changes_per_day):
            best[r.run.framework] = r
    return best


def _mem(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**20:,.0f} MiB"


def _dur(s: float) -> str:
    if s >= 3600:
        return f"{s / 3600:.2f} h"
    if s >= 120:
        return f"{s / 60:.1f} min"
    return f"{s:.1f} s"


def advise(records: list[Record], plan_steps: int, changes_per_day: int = 0, results: str = "") -> Advice:
    """The advice: per-framework best, break-even, recommendation, reasons, lines."""
    if plan_steps <= 0:
        raise ValueError(f"plan_steps must be positive, got {plan_steps}")
    if changes_per_day < 0:
        raise ValueError(f"changes_per_day must be >= 0, got {changes_per_day}")
    best = best_per_framework(records, plan_steps, changes_per_day)
    frameworks: dict[str, FrameworkBest] = {}
    for fw, r in sorted(best.items()):
        cands = sorted((x for x in records if x.run.framework == fw and usable(x)),
                       key=lambda x: planned_total_s(x, plan_steps, changes_per_day))
        frameworks[fw] = FrameworkBest(
            strategy=r.run.strategy, run_id=r.run.run_id, first_step_s=r.timing.first_step_s,
            step_ms=r.timing.step_ms, step_ms_p10=r.timing.step_ms_p10, step_ms_p90=r.timing.step_ms_p90,
            compile_s=r.compile.compile_s, compile_overhead_s=overhead_s(r), compiles=1 + changes_per_day,
            total_s=planned_total_s(r, plan_steps, changes_per_day),
            peak_mem_bytes=r.memory.peak_mem_bytes, peak_mem_source=r.memory.peak_mem_source,
            candidates=[Candidate(strategy=x.run.strategy, run_id=x.run.run_id,
                                  total_s=planned_total_s(x, plan_steps, changes_per_day)) for x in cands],
        )
    failed = [Failed(run=label(r), run_id=r.run.run_id, error=r.error) for r in records if r.status != "ok"]
    first = next((r for r in records if usable(r)), records[0] if records else None)
    run, cond = (first.run, first.conditions) if first else (None, None)
    measured_on = (f"{run and run.preset} preset, batch {run and run.batch} x seq {run and run.seq}, "
                   f"{run and run.precision}, on {run and run.device} ({cond and cond.platform}, "
                   f"{run and run.device_count} device(s), {cond and cond.threads} threads); one run per "
                   "strategy: on a busy machine timings are noisy")
    out = Advice(plan_steps=plan_steps, changes_per_day=changes_per_day, measured_on=measured_on,
                 assumption=ASSUMPTION, formula="total = first_step_s + (plan_steps - 1) * step_ms/1e3 + "
                 "changes_per_day * (first_step_s - step_ms/1e3)", frameworks=frameworks, failed=failed,
                 results=results)
    if not best:
        rec = Recommendation(summary="no successful run: nothing to recommend",
                             reasons=[f"{f.run} failed: {f.error}" for f in failed])
        return msgspec.structs.replace(out, recommendation=rec, lines=[rec.summary, *rec.reasons])
    ranked = sorted(best.values(), key=lambda r: planned_total_s(r, plan_steps, changes_per_day))
    win = ranked[0]
    reasons: list[str] = []
    close = False
    be: BreakEven | None = None
    if len(ranked) == 1:
        others = sorted({r.run.framework for r in records} - {win.run.framework})
        reasons.append(f"the only framework with a successful run; {', '.join(others) or 'no other'} "
                       "had none" if others else "only one framework was measured")
        rec = _rec(win, reasons, False, plan_steps, changes_per_day)
    else:
        lose = ranked[1]
        tw, tl = (planned_total_s(r, plan_steps, changes_per_day) for r in (win, lose))
        margin = (tl - tw) / tl if tl > 0 else 0.0
        close = margin < CLOSE_CALL
        lo = label(lose)
        wid, lid = win.run.run_id, lose.run.run_id
        ratio = lose.timing.step_ms / win.timing.step_ms
        if ratio >= 1:
            reasons.append(f"its steady step is {ratio:.2f}x as fast: {win.timing.step_ms:.2f} ms [{wid}] vs "
                           f"{lose.timing.step_ms:.2f} ms [{lid}]")
        else:
            reasons.append(f"its steady step is slower ({win.timing.step_ms:.2f} ms [{wid}] vs "
                           f"{lose.timing.step_ms:.2f} ms [{lid}]), but it compiles less: "
                           f"{overhead_s(win):.2f} s vs {overhead_s(lose):.2f} s per compile")
        n_cmp = 1 + changes_per_day
        if overhead_s(win) > overhead_s(lose):
            reasons.append(f"it pays {overhead_s(win) - overhead_s(lose):.2f} s more per compile "
                           f"(first step {win.timing.first_step_s:.2f} s [{wid}] vs {lose.timing.first_step_s:.2f} s "
                           f"[{lid}]), x {n_cmp} compile(s) a day")
        # break-even between the two leaders, stated from the side of the one that compiles longer
        slow_start, quick_start = (win, lose) if overhead_s(win) >= overhead_s(lose) else (lose, win)
        n = break_even(slow_start, quick_start, changes_per_day)
        if n is not None and math.isfinite(n) and n > 0:
            side = "beyond" if plan_steps > n else "short of"
            text = (f"{label(slow_start)} overtakes {label(quick_start)} after {math.ceil(n):,} steps "
                    f"(with {n_cmp} compile(s) a day); the plan of {plan_steps:,} steps is {side} it")
        elif n == 0:
            text = f"{label(slow_start)} is ahead of {label(quick_start)} from the first step"
        else:
            text = (f"{label(slow_start)} never catches up with {label(quick_start)}: it compiles longer "
                    "and its steps are no faster")
        be = BreakEven(run=label(slow_start), against=label(quick_start),
                       steps=None if n is None or math.isinf(n) else n, changes_per_day=changes_per_day, text=text)
        reasons.append(be.text)
        if close:
            reasons.append(f"the planned totals differ by only {margin:.1%} (< {CLOSE_CALL:.0%}): within the "
                           "noise of one measurement on a busy machine; either framework will do")
        mw, ml = win.memory.peak_mem_bytes, lose.memory.peak_mem_bytes
        if mw and ml and mw > ml * (1 + MEMORY_CAVEAT):
            reasons.append(f"mind the memory: it needs {mw / ml - 1:.0%} more peak memory ({_mem(mw)} [{wid}] vs "
                           f"{_mem(ml)} [{lid}], {win.memory.peak_mem_source or 'peak memory'})")
        rec = _rec(win, reasons, close, plan_steps, changes_per_day, tl - tw, lo)
    out = msgspec.structs.replace(out, break_even=be, recommendation=rec)
    return msgspec.structs.replace(out, lines=lines(out))


def _rec(win: Record, reasons: list[str], close: bool, plan_steps: int, changes: int,
         saved: float | None = None, other: str | None = None) -> Recommendation:
    total = planned_total_s(win, plan_steps, changes)
    verb = "slightly prefer" if close else "use"
    summary = f"{verb} {win.run.framework} ({win.run.strategy}): {_dur(total)} for {plan_steps:,} steps"
    if saved is not None and other:
        summary += f", {_dur(saved)} less than {other}"
    return Recommendation(framework=win.run.framework, strategy=win.run.strategy, run_id=win.run.run_id,
                          total_s=total, saved_s=saved, close_call=close, summary=summary, reasons=reasons)


def lines(advice: Advice) -> list[str]:
    """The answer in a few lines of text, every number with the run id of the record it comes from."""
    k, plan = advice.changes_per_day, advice.plan_steps or 0
    out = [f"measured: {advice.measured_on}",
           f"plan: {plan:,} steps, {k} model change(s) a day -> {1 + k} cold compile(s) per framework"]
    for fw, f in advice.frameworks.items():
        out.append(f"{fw:>5}: best {f.strategy} [{f.run_id}]: first step {f.first_step_s:.2f} s "
                   f"(compile overhead {f.compile_overhead_s:.2f} s), step {f.step_ms:.2f} ms -> "
                   f"total {_dur(f.total_s)}; peak memory {_mem(f.peak_mem_bytes)}")
    if advice.break_even:
        out.append("break-even: " + advice.break_even.text)
    rec = advice.recommendation or Recommendation()
    out.append(f"recommendation: {rec.summary}")
    out += [f"  - {r}" for r in rec.reasons]
    out.append(f"assumption: {advice.assumption}")
    return out
