"""One ranked answer to "why is my port slower": explain's gap joined with the doctor's findings.

Where both traces are folders ``twinbench doctor SCRIPT --trace DIR`` wrote, each holds the doctor's report
(``doctor.json``: the findings with their evidence, the user's line and the fix, and the observations with the
doctor's own A/Bs). The answer puts each finding of the slower side on the gap rows it shows in, one declaration
per finding kind (:data:`CAUSES`: jax-recompile -> compilation, a host sync -> host time no op covers, eager
ops -> the ops dispatched one by one, input-bound -> the input phase...), sizes it in ms a step from those rows
(the slower side's less the faster side's, each side's rows put on its step measured without the profiler where
the doctor measured one), ranks the causes by size, and says what is left as unexplained, with the largest rows
no finding names. A finding of the whole side (thread oversubscription, page faults) has no rows of its own:
where the doctor ran an A/B of its fix in the script's run (the thread check) it is sized by that A/B's gain a
step (as written less fixed, medians, its spread the +-), and named only where the A/B confirmed it; without one,
where it is worse than on the faster side it is said as possibly part of what is left, unsized (on the corpus,
taking all that was left gave a torch pool of 8 threads 15.6 ms a step where its A/B gained 1.1). A finding whose rows do not go the gap's
way beyond the noise, a finding of the faster side and a memory finding are said as not in the gap.

Each row is claimed by one cause (the largest first), so two findings of the same rows (a host sync and the
nnx graph traversal both land in host time) are not counted twice. The noise a cause is told apart from is the larger of the
two sides' spread of traced steps (``step_spread_ms``), or explain's own measured noise where it gives one, and
at least 1% of the slower step.

``doctor.json`` is data: read bounded (:func:`twinbench.folder_io.read_small`) and decoded into the typed
:class:`DoctorReport` (msgspec, as the record is); a file that is not one is a note, the gap is explained all
the same.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from twinbench.doctor.observations import ReadCheck, ThreadCheck  # the doctor's own types of its A/Bs
from twinbench.explain import compilation
from twinbench.explain.side import Side
from twinbench.folder_io import read_small, terminal

NAME = "doctor.json"
MAX_BYTES = 8 << 20  # the doctor's report with its observations is tens of KB
SAID = 240  # characters of a finding's evidence and fix in the answer (the doctor's report has the rest)


# ------------------------------------------------------------------------------- the doctor's report, typed

class Finding(msgspec.Struct, frozen=True):
    id: str
    severity: str = "info"
    title: str = ""
    evidence: str = ""
    fix: str = ""
    location: str = ""
    caused_by: str = ""  # the finding that causes this one (compile-dominates <- jax-recompile)


class ClockAB(msgspec.Struct, frozen=True):
    loop_less_known_ms: float
    prebuilt_ms: float


class InputCheck(msgspec.Struct, frozen=True):
    """The doctor's A/B of the input: the step on a batch already built against the loop (summary.input_ab)."""
    wall: ClockAB | None = None


class Observations(msgspec.Struct, frozen=True):
    read_check: ReadCheck | None = None
    input_check: InputCheck | None = None
    thread_check: ThreadCheck | None = None  # cpu-oversubscribed's A/B (doctor/thread_check.py)
    per_step: dict[str, float] = {}  # counters per steady step: runq_s:s, the loop's wait for a CPU others held


class DoctorReport(msgspec.Struct, frozen=True):
    """What of ``twinbench doctor --json`` (docs/doctor.md) the answer reads; every other field is ignored."""
    findings: list[Finding] = []
    script: str | None = None
    iter_ms: float | None = None
    observations: Observations = msgspec.field(default_factory=Observations)


def doctor_file(arg: str) -> Path | None:
    """The doctor's report of a trace argument: ``doctor.json`` in the folder given, or beside the trace file,
    or above a JAX profile's ``plugins/profile/RUN/``; None when there is none."""
    p = Path(arg)
    places = [p] if p.is_dir() else [p.parent]
    if len(p.parts) >= 4 and p.parent.parent.name == "profile" and p.parent.parent.parent.name == "plugins":
        places.append(p.parent.parent.parent.parent)
    return next((d / NAME for d in places if (d / NAME).is_file()), None)


def read_report(arg: str) -> tuple[DoctorReport | None, str | None]:
    """(the doctor's report beside a trace, a note): (None, None) when there is none, (None, note) when one is
    there but unreadable or not the doctor's."""
    path = doctor_file(arg)
    if path is None:
        return None, None
    try:
        return msgspec.json.decode(read_small(path, MAX_BYTES), type=DoctorReport), None
    except (OSError, msgspec.DecodeError) as e:
        return None, f"{path}: not twinbench doctor's report ({terminal(e, 120)}); the answer leaves that side's findings out"


# ------------------------------------------------------------------------- which rows each finding shows in

@dataclass(frozen=True)
class AB:
    """An A/B the doctor ran of a finding: the loop as written against it with the cause removed, ms a step."""
    as_written_ms: float
    without_ms: float
    spread_ms: float | None = None  # the gain's spread (a whole-side finding is sized by the A/B: its +-)

    @property
    def gain_ms(self) -> float:
        return self.as_written_ms - self.without_ms


def _read_ab(r: DoctorReport) -> AB | None:
    c = r.observations.read_check
    return AB(c.waited_ms, c.deferred_ms) if c and c.waited_ms and c.deferred_ms else None


def _thread_ab(r: DoctorReport) -> AB | None:
    """The thread check: the script's steps as written against those at the fix's thread count (medians), the
    gain's spread (twice the standard error of the medians' difference)."""
    c = r.observations.thread_check
    fig = c.figures() if c else None
    return AB(*fig) if fig else None


def _input_ab(r: DoctorReport) -> AB | None:
    c = r.observations.input_check
    return AB(c.wall.loop_less_known_ms, c.wall.prebuilt_ms) if c and c.wall else None


@dataclass(frozen=True)
class Cause:
    """How the answer reads one kind of finding: what it names (``what``), the gap rows (``phase / category``
    patterns) where its time shows, and the doctor's A/B of it where it runs one. No rows: not a time cause
    (memory, an error). ``whole``: the whole side (the machine): no rows of its own, never sized by the trace;
    sized by its A/B (``ab``: its gain a step, the A/B's spread its +-) where the doctor ran one."""
    what: str
    rows: tuple[str, ...] = ()
    whole: bool = False
    ab: Any = None  # Callable[[DoctorReport], AB | None]


COMPILATION = ("* / compilation",)
HOST = ("rest / idle",)  # host time no op covers: the loop's Python, waits, dispatch
#: one declaration per finding id of the doctor (tests/explain/test_answer.py checks every registered id has one)
CAUSES: dict[str, Cause] = {
    "jax-recompile": Cause("compilation: the step compiled again for new input shapes", COMPILATION),
    "torch-recompile": Cause("compilation: torch.compile recompiling for new inputs", COMPILATION),
    "compile-dominates": Cause("compilation", COMPILATION),
    "jax-unrolled-loop": Cause("compilation of an unrolled loop", COMPILATION),
    "torch-graph-break": Cause("graph breaks: the compiled step split, Python between its parts", HOST),
    "jax-eager-ops": Cause("the step run op by op (not jitted): one dispatch per operation", ("rest / *",)),
    "jax-python-control-flow": Cause("an error in the step (Python control flow on traced values)"),
    "script-error": Cause("the script failed"),
    "jax-host-sync": Cause("the host waiting for each step (a result read every step)", HOST, ab=_read_ab),
    "torch-host-sync": Cause("the host waiting for the device (a result read every step)", HOST, ab=_read_ab),
    "nnx-graph-overhead": Cause("nnx.jit's graph traversal each step", HOST),
    "input-bound": Cause("waiting for the next batch (the input pipeline)", ("input / *", *HOST), ab=_input_ab),
    "jax-host-transfer": Cause("the batch copied to the device each step", ("input / *", "* / data movement")),
    "jax-replicated-batch": Cause("the batch replicated to every device", ("input / *", "* / data movement")),
    "jax-pmap-legacy": Cause("legacy pmap (an API to move off; its step is sized by the findings about it)"),
    "jax-no-donation": Cause("memory (the step's buffers not donated), not time"),
    "jax-attention-kernel": Cause("attention written out (unfused)", ("* / attention",)),
    "float64-compute": Cause("products computed in float64 (fp32 is the default)", ("* / matmul", "* / attention")),
    "cpu-oversubscribed": Cause("more threads than free cores (the whole side slowed)", whole=True, ab=_thread_ab),
    "page-faults": Cause("page faults (memory mapped afresh each step)", whole=True),
}


# ----------------------------------------------------------------------------------------------- the answer

class Named(msgspec.Struct):
    """One ranked cause: ``ms`` of the gap a step, ``noise`` its uncertainty, the doctor's finding behind it."""
    what: str
    ms: float
    noise: float
    rows: list[str]
    finding: str = ""
    evidence: str = ""
    location: str = ""
    fix: str = ""
    ab: str = "not run"  # confirmed (gain ms) / not confirmed / not run: the doctor's own A/B


class Answer(msgspec.Struct):
    gap_ms: float
    clock: str  # "run" (the doctor's mean iteration), "untraced" (its median step without the profiler), "traced"
    slower: str
    faster: str
    causes: list[Named]
    unexplained_ms: float
    unnamed_rows: list[tuple[str, float]]  # rows beyond the noise that no finding names
    not_in_gap: list[tuple[str, str]]  # (finding id, why)
    notes: list[str]
    slow_step_ms: float = 0.0  # the slower side's step, on the clock the gap is on
    waits: list[tuple[str, float, float]] = []  # (run, ms a step its loop waited for a CPU others held, its step)
    unsized: list[tuple[str, str]] = []  # (finding id, what and its fix): the whole side's, which may be in what is left


#: the doctor's step without the profiler puts a side's rows on it only when it is a clock of the same steps: timed
#: over this many steps at least, and within this factor of the traced step (a profiler costs tens of percent; a
#: figure this far off timed something else: a compile the traced steps did not have, the doctor's own checks)
CLOCK_STEPS = 2
CLOCK_APART = 4.0


def _clock(side: Side, traced: float | None = None) -> tuple[float | None, str]:
    """(a side's step measured without the profiler, or None; the reason when one is there but not used): a clock
    of the ``traced`` step (its whole traced step unless given: the part of it that compiled nothing)."""
    m = side.measured
    untraced = float(m.untraced_step_ms or 0.0) if m else 0.0
    traced = float(side.step_ms or 0.0) if traced is None else traced
    if not untraced or not traced:
        return None, ""
    n = int(m.untraced_steps or 0) if m else 0
    if n < CLOCK_STEPS or not 1 / CLOCK_APART <= untraced / traced <= CLOCK_APART:
        return None, (f"{side.run}: the doctor's step without the profiler ({untraced:.1f} ms over {n} steps) is "
                      f"not a clock of its {traced:.1f} ms traced step (" + (f"fewer than {CLOCK_STEPS} steps" if
                      n < CLOCK_STEPS else f"over {CLOCK_APART:g}x apart") + "): the traced steps are the answer's")
    return untraced, ""


def _on_run(side: Side, rep: DoctorReport | None) -> tuple[dict[str, float], float] | None:
    """(``phase / category`` -> ms a step, the step) of one side put on the doctor's mean iteration over its whole
    run (``iter_ms``, the step its headline gives: what a clock around the training loop shows), or None where
    the doctor's report gives none. A few traced steps compile at their own rate (two recompiles in four traced
    steps of a run that recompiled five times in forty): so where the run compiled after its first step, the
    compilation row is the run's own, its mean less its steady step (the doctor's median without the profiler,
    else the traced step less its compiling), and the other rows are put on that steady step; elsewhere every
    row is put on the mean."""
    mean = rep.iter_ms if rep is not None else None
    traced = float(side.step_ms or 0.0)
    if not mean or mean <= 0 or not traced:
        return None
    cells = {f"{p} / {c}": v for p, row in side.cells.items() for c, v in row.items()}
    facts = compilation.facts(side)
    compiled = float(cells.get(compilation.ROW, 0.0))
    rest = traced - compiled
    steady = _clock(side, rest)[0] or rest
    if facts is not None and (facts.compiles or facts.retraces) and 0 < steady < mean:
        out = {row: v * steady / rest for row, v in cells.items() if row != compilation.ROW} if rest > 0 else {}
        out[compilation.ROW] = mean - (sum(out.values()) if out else 0.0)
        return out, mean
    return {row: v * mean / traced for row, v in cells.items()}, mean


def _cells(side: Side, clock: float | None) -> tuple[dict[str, float], float]:
    """(``phase / category`` -> ms a step, the step) of one explained trace, its rows put on ``clock`` (the step
    the doctor measured without the profiler) where there is one: the profiler's cost spread as the trace spread
    it."""
    traced = float(side.step_ms or 0.0)
    scale = clock / traced if clock and traced else 1.0
    cells = {f"{p} / {c}": v * scale for p, row in side.cells.items() for c, v in row.items()}
    return cells, (clock or traced)


#: the least noise a cause is told apart from, as a share of the slower side's step: a few traced steps that
#: happen to agree (each compiling, or all disturbed alike) measure no noise, and are not a measurement to 0.1%
NOISE_FLOOR = 0.01
#: a side whose loop waited this share of its iteration for a CPU other processes held is said to have run
#: on a busy machine, with the figure: its milliseconds hold that much of the load, which changes from run to run
WAIT_SAID = 0.10


def _noise(a: Side, b: Side, noise_ms: float | None, slow_step: float, run: float | None = None) -> float:
    """What a cause must exceed to be told apart: ``run`` (the noise of the steps that compiled nothing, on the
    run's clock), else explain's measured noise of the gap where it gives one (``noise_ms``), else the larger of
    the two sides' spread of traced steps; at least :data:`NOISE_FLOOR`."""
    given = run if run is not None else noise_ms
    if given is not None and given >= 0:
        measured = float(given)
    else:
        measured = max(float(s.step_spread_ms or 0.0) for s in (a, b))
    return max(measured, NOISE_FLOOR * slow_step)


def _ab_said(cause: Cause, r: DoctorReport, f: Finding) -> str:
    ab = cause.ab(r) if cause.ab else None
    if ab is None:
        return "not run"
    if ab.gain_ms > 0 and f.severity in ("warning", "error"):
        return f"confirmed by the doctor's A/B ({ab.as_written_ms:.2f} -> {ab.without_ms:.2f} ms a step)"
    return f"not confirmed by the doctor's A/B ({ab.as_written_ms:.2f} -> {ab.without_ms:.2f} ms a step)"


def join(a: Side, b: Side, noise_ms: float | None, arg_a: str, arg_b: str) -> Answer | None:
    """The ranked answer for an explained pair of traces (``gap.pair``'s sides and its measured ``noise_ms``) and
    the trace arguments, or None when neither trace has the doctor's report beside it."""
    result = {"a": a, "b": b}
    reports, notes = [], []
    for arg in (arg_a, arg_b):
        rep, note = read_report(arg)
        reports.append(rep)
        if note:
            notes.append(note)
    if reports[0] is None and reports[1] is None:
        return None if not notes else Answer(0.0, "traced", "", "", [], 0.0, [], [], notes)
    runs = [_on_run(result[s], rep) for s, rep in zip("ab", reports, strict=True)]
    if runs[0] is not None and runs[1] is not None:  # both on the doctor's mean iteration: the run, recompiles
        clock = "run"  # at the run's rate, as the training loop's own clock shows it
        (cells_a, step_a), (cells_b, step_b) = runs
        if any(f is not None and f.compiles for f in map(compilation.facts, (a, b))):  # two gap figures on the page
            notes.append("the summary above is on each side's median step; this answer on the mean iteration, "
                         "which counts a run's compiles at the rate the run had them")
    else:
        clocks = [_clock(result[s]) for s in ("a", "b")]
        measured = all(c for c, _ in clocks)  # both sides on the doctor's clock, or both on their traced steps
        clock = "untraced" if measured else "traced"
        notes += [why for _, why in clocks if why]
        (cells_a, step_a), (cells_b, step_b) = (_cells(result[s], c if measured else None)
                                                for s, (c, _) in zip("ab", clocks, strict=True))
    gap = step_b - step_a
    slow, fast = ("b", "a") if gap >= 0 else ("a", "b")
    sc, fc = (cells_b, cells_a) if slow == "b" else (cells_a, cells_b)
    rep_slow, rep_fast = reports[1 if slow == "b" else 0], reports[0 if slow == "b" else 1]
    given = None
    if clock == "run":  # the steps' noise on the steps that compiled nothing: a run's compiles are counted, not
        from twinbench.explain import causes as evidence  # a spread of its few traced steps

        ra, rb = evidence.noise(a), evidence.noise(b)
        if ra is not None and rb is not None:
            steady = [sum(v for r, v in c.items() if r != compilation.ROW) for c in (cells_a, cells_b)]
            given = evidence.band(steady[0], steady[1], ra, rb)
    noise = _noise(a, b, noise_ms, max(step_a, step_b), given)
    fast_severity = {f.id: _worse(f.severity) for f in (rep_fast.findings if rep_fast else [])}
    excess = {row: sc.get(row, 0.0) - fc.get(row, 0.0) for row in set(sc) | set(fc)}
    claimed: dict[str, str] = {}  # row -> the finding whose cause it was counted in
    not_in: list[tuple[str, str]] = []
    slow_ids = {f.id for f in rep_slow.findings} if rep_slow else set()
    for f in rep_fast.findings if rep_fast else []:
        c = CAUSES.get(f.id)
        if c is not None and c.whole and f.id in slow_ids:  # both sides have it: said once, with the slower's
            continue
        if c is not None and (c.rows or c.whole):
            not_in.append((f.id, f"on the faster side, {result[fast].run}"))
    pending = list(rep_slow.findings) if rep_slow else []
    causes: list[Named] = []
    # the specific causes, largest first, each row claimed once
    while True:
        best: tuple[float, Finding, Cause, list[str]] | None = None
        for f in pending:
            cause = CAUSES.get(f.id)
            if cause is None or cause.whole or not cause.rows:
                continue
            rows = [r for r in excess if r not in claimed and any(fnmatch.fnmatch(r, p) for p in cause.rows)]
            ms = sum(excess[r] for r in rows)
            # a finding another causes (compile-dominates <- jax-recompile) yields the rows to its cause
            key = ms - (1e-6 if f.caused_by else 0.0)
            if best is None or key > best[0]:
                best = (key, f, cause, rows)
        if best is None:
            break
        _, f, cause, rows = best
        pending.remove(f)
        ms = sum(excess[r] for r in rows)
        if f.caused_by and any(c.finding == f.caused_by for c in causes):
            not_in.append((f.id, f"caused by {f.caused_by}: counted there"))
            continue
        taken = sorted({claimed[r] for r in excess if r in claimed and any(fnmatch.fnmatch(r, p) for p in cause.rows)})
        if ms <= noise and taken:
            not_in.append((f.id, f"its rows ({', '.join(cause.rows)}) are counted with {', '.join(taken)}"))
            continue
        if ms <= noise or ms <= 0:
            not_in.append((f.id, f"its rows ({', '.join(cause.rows)}) are {ms:+.1f} ms, within the noise "
                                 f"(+-{noise:.1f} ms)" if ms > 0 else
                           f"its rows ({', '.join(cause.rows)}) are not slower on this side ({ms:+.1f} ms)"))
            continue
        claimed.update(dict.fromkeys(rows, f.id))
        causes.append(_named(cause, f, rep_slow, ms, noise, rows, excess, _compiles(result[slow], rows)))
    left = abs(gap) - sum(c.ms for c in causes)
    unsized: list[tuple[str, str]] = []
    for f in pending:
        cause = CAUSES.get(f.id)
        if cause is None:
            not_in.append((f.id, "a finding the answer has no rows for"))
        elif not cause.whole:
            not_in.append((f.id, f"no time of its own: {cause.what}"))
        elif _worse(f.severity) <= fast_severity.get(f.id, -1):  # the machine's load, on both sides alike
            not_in.append((f.id, "the whole side, and the faster side has it as well"))
        elif (ab := cause.ab(rep_slow) if cause.ab and rep_slow else None) is not None:  # sized by its own A/B
            spread = ab.spread_ms or 0.0
            if _worse(f.severity) >= 1 and ab.gain_ms > 0:  # the doctor's test of the A/B confirmed it
                causes.append(Named(f"{cause.what} (sized by the doctor's A/B of its fix)", round(ab.gain_ms, 3),
                                    round(spread, 3), [], f.id, terminal(f.evidence, SAID), terminal(f.location, 160),
                                    terminal(f.fix, SAID), _ab_said(cause, rep_slow, f)))
                left -= ab.gain_ms
            else:
                not_in.append((f.id, f"its A/B did not confirm it: {ab.as_written_ms:.2f} -> {ab.without_ms:.2f} ms "
                                     f"a step, {ab.gain_ms:+.1f} +-{spread:.1f} ms"))
        elif left > noise:  # rows of its own it has none: it may be part of what is left, not its size
            unsized.append((f.id, f"{cause.what}; fix: {terminal(f.fix, SAID)}"))
        else:
            not_in.append((f.id, "the whole side, and nothing is left of the gap beyond the noise"))
    causes.sort(key=lambda c: -c.ms)
    unnamed = sorted(((r, round(v, 3)) for r, v in excess.items() if r not in claimed and v > noise),
                     key=lambda rv: -rv[1])[:3]
    waits = [(result[k].run, round(w, 3), round(it, 3)) for k, rep in zip("ab", reports, strict=True)
             if rep is not None and (it := rep.iter_ms or 0.0) > 0
             and (w := 1e3 * rep.observations.per_step.get("runq_s:s", 0.0)) >= WAIT_SAID * it]
    return Answer(round(abs(gap), 3), clock, result[slow].run, result[fast].run,
                  causes, round(left, 3), unnamed, not_in, notes, round(max(step_a, step_b), 3), waits, unsized)


def _worse(severity: str) -> int:
    """How serious a severity is: error 2, warning 1, info 0."""
    return {"error": 2, "warning": 1}.get(severity, 0)


def _compiles(side: Side, rows: list[str]) -> str:
    """What compiled, where a cause holds the compilation row: its count in the traced steps and over the run, and
    the shapes that caused it (explain's compilation facts, from the doctor's compile log beside the trace)."""
    if compilation.ROW not in rows:
        return ""
    f = compilation.facts(side)
    if f is None or not f.traced_compiles:
        return ""
    said = f"{f.traced_compiles} compiles in the {f.traced_steps} traced steps"
    if f.compiles and f.steps:
        said += f", {f.compiles} in the run's {f.steps} steps"
    if f.cause and f.argument and f.shapes:
        said += f", caused by the {f.cause} of {f.argument} ({f.shapes[0]} against {f.shapes[1]})"
    return said


def _named(cause: Cause, f: Finding, rep: DoctorReport | None, ms: float, noise: float, rows: list[str],
           excess: dict[str, float], detail: str = "") -> Named:
    shown = sorted(rows, key=lambda r: -excess[r])[:4]
    what = f"{cause.what} ({detail})" if detail else cause.what
    return Named(what, round(ms, 3), round(noise, 3), shown, f.id, terminal(f.evidence, SAID),
                 terminal(f.location, 160), terminal(f.fix, SAID),
                 _ab_said(cause, rep, f) if rep is not None else "not run")


def lines(a: Answer) -> list[str]:
    """The answer as the lines that end explain's summary."""
    if not a.slower:
        return [f"answer: {n}" for n in a.notes]
    clock = {"run": "the doctor's mean iteration over each run, without the profiler",
             "untraced": "measured without the profiler"}.get(a.clock, "traced (no untraced step measured)")
    out = [f"answer: of the gap of {a.gap_ms:.1f} ms a step ({a.slower} slower than {a.faster}, {clock}):"]
    for i, c in enumerate(a.causes, 1):
        share = f" ({c.ms / a.slow_step_ms:.0%} of {a.slower}'s step)" if a.slow_step_ms else ""
        head = f"  {i}. {c.ms:.1f} ms +-{c.noise:.1f}{share}: {c.what}"
        if c.finding:
            head += f" (the doctor's {c.finding}"
            head += f", at {c.location}" if c.location else ""
            head += f"; A/B: {c.ab})"
        out.append(head)
        if c.evidence:
            out.append(f"       evidence: {c.evidence}")
        if c.fix:
            out.append(f"       fix: {c.fix}")
    unnamed = "; rows beyond the noise no finding names: " + ", ".join(f"{r} {v:+.1f} ms" for r, v in a.unnamed_rows) \
        if a.unnamed_rows else ""
    if a.unexplained_ms >= 0:
        out.append(f"  {a.unexplained_ms:.1f} ms unexplained{unnamed}")
    else:  # the causes add up to more than the gap: the faster side is slower elsewhere
        out.append(f"  {-a.unexplained_ms:.1f} ms the other way: the rest of the step is faster on {a.slower}, so the "
                   f"causes above add up to more than the gap{unnamed}")
    for fid, said in a.unsized:
        out.append(f"  of what is left, the doctor's {fid} may be part: {said} (a finding of the whole side has no rows "
                   "of its own, so the trace cannot size it: apply its fix and explain again)")
    for fid, why in a.not_in_gap:
        out.append(f"  not in the gap: {fid} ({why})")
    for run, wait, it in a.waits:  # the doctor's run-queue figure: the load is measured, not assumed away
        out.append(f"  busy machine: {run}'s loop waited {wait:.1f} ms of its {it:.1f} ms iteration for a CPU other "
                   "processes held (the doctor's figure): its milliseconds above hold that load, and so does any "
                   "A/B timed under another; the shares of the step carry over better than the milliseconds")
    out += [f"  note: {n}" for n in a.notes]
    return out



