"""The doctor's output: a readable rich report, and the JSON document (a contract, see docs/doctor-findings.md, "The JSON")."""

from __future__ import annotations

from typing import Any

import msgspec
from rich.console import Console, Group
from rich.panel import Panel
from rich.text import Text

from twinbench.doctor.findings import Finding
from twinbench.doctor.observations import Observations, Python, typed

STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


class DoctorReport(msgspec.Struct, kw_only=True):
    """The doctor's report: what ``--json`` writes and ``doctor.json`` beside a trace holds (docs/doctor-findings.md,
    "The JSON"). Fields are only added, never renamed: ``twinbench explain`` reads it with a Struct of its own
    (``explain.answer.DoctorReport``), and older reports stay readable by every field's default."""
    findings: list[Finding] = msgspec.field(default_factory=list)  # worst first
    steps: int = 0
    step_ms: float | None = None
    compile_s: float = 0.0
    wall_s: float = 0.0
    script: str | None = None
    step_fn: str | None = None
    step_signal: str | None = None
    frameworks: list[str] = msgspec.field(default_factory=list)
    stopped_early: bool = False
    timed_out: bool = False
    self_errors: list[str] = msgspec.field(default_factory=list)  # the doctor's own failures (self_errors)
    python: Python | None = None
    iter_ms: float | None = None
    not_checked: dict[str, str] = msgspec.field(default_factory=dict)  # a check skipped for this step -> why
    # everything the text is made from (split, per-step rates, notes, info)
    observations: Observations = msgspec.field(default_factory=Observations)


def self_errors(obs: Observations) -> list[str]:
    """The doctor's own failures during the run: an instrument that could not be installed or raised on the
    script's call path, a finalizer that raised, the donation/memory check that failed. Each one means
    the findings may be incomplete (``twinbench doctor`` then exits 3)."""
    info = obs.info
    out = [f"instrument: {e}" for e in info.instrument_errors]
    out += [f"finalizer: {e}" for e in info.finalize_errors]
    if info.donation_error:
        out.append(f"donation check: {info.donation_error}")
    return out


def document(findings: list[Finding], obs: Observations, script: str | None = None) -> DoctorReport:
    """The report of these findings and observations."""
    obs = typed(obs)  # (JSON, a test's, read as declared)
    return DoctorReport(findings=findings, steps=obs.steps, step_ms=obs.step_ms, compile_s=obs.compile_s,
                        wall_s=obs.wall_s, script=script, step_fn=obs.step_fn, step_signal=obs.step_signal,
                        frameworks=obs.frameworks, stopped_early=obs.stopped_early, timed_out=obs.timed_out,
                        self_errors=self_errors(obs), python=obs.python, iter_ms=obs.iter_ms,
                        not_checked=dict(not_checked(obs)), observations=obs)


def to_json(findings: list[Finding], obs: Observations, script: str | None = None) -> dict[str, Any]:
    """:class:`DoctorReport` as JSON's builtins (``json.dumps`` writes them; a record keeps them whole, its
    ``doctor`` section being opaque: record_sections.OPAQUE)."""
    return msgspec.to_builtins(document(findings, obs, script))


LOOKED_FOR = ("torch's Optimizer.step, loss.backward(), the script's jitted functions (jax.jit, nnx.jit), "
              "jax.grad/value_and_grad calls outside jit, an Optax update outside jit")
MARK_STEP = ("mark the step yourself: call twinbench.doctor.step() once per loop iteration (it does nothing "
             "outside the doctor)")
HOW_TO_MARK = f"{MARK_STEP}, or run the loop inside `with twinbench.watch():`"


#: the module of torch's DataLoader worker loop (a process started for it is no training)
LOADER_WORKERS = "torch.utils.data"


def no_step_message(obs: Observations, script: str) -> str | None:
    """The one-line reason to stop when the script ran to its end but no training step was found, else None
    (a script that failed or timed out is reported as such)."""
    obs = typed(obs)
    if obs.step_fn or obs.error or obs.timed_out:
        return None
    seen = "+".join(obs.frameworks) or "neither JAX nor PyTorch imported"
    children = {k: n for k, n in obs.info.child_processes.items()
                if not k.startswith(LOADER_WORKERS)}  # a DataLoader's workers load; they do not train
    where = ""
    if children:
        runs = ", ".join(f"{k.rsplit(':', 1)[-1]} x{n}" for k, n in children.items())
        where = (f"; it started {sum(children.values())} Python process(es) ({runs}), which the doctor does not "
                 "watch: a loop trained there is not seen (nor marked there), so call its training function in the "
                 "script's own process (one worker, no Process) to have it diagnosed")
    return (f"no training step found in {script} ({seen}; it ran {obs.wall_s:.1f} s): looked for "
            f"{LOOKED_FOR}" + (where if where else f"; {HOW_TO_MARK}"))


def summary_line(obs: Observations) -> str:
    """The run in one line: the frameworks, the step and how it was found, its time, compile and wall time."""
    obs = typed(obs)
    step_ms = obs.step_ms
    fw = "+".join(obs.frameworks) or "no framework seen"
    signal = obs.step_signal or obs.step_kind
    step = (f"step = {obs.step_fn} (found by {signal}), " if obs.step_fn else "no step found, ")
    stepped = obs.info.torch_optimizers
    if len(stepped) > 1 and obs.step_fn in stepped:  # one iteration steps each: its calls are the step's
        counts = obs.candidates
        step += (f"one of {len(stepped)} optimizers stepping in the loop ("
                 + ", ".join(f"{k} {v}: {counts.get(k, 0)} steps" for k, v in stepped.items())
                 + "; the one stepping least often marks an iteration), ")
    it = obs.iter_ms
    # under the doctor's instruments (wrappers, the watcher and sampler threads) a step takes longer than alone,
    # by up to a few ms a step on the JAX CPU examples: said, not hidden
    pace = (f": {it:.2f} ms a step (the mean steady iteration, one step start to the next, as a clock around the "
            "loop shows it, under the doctor's instruments, which lengthen each step by up to a few ms)") if it else (f": {step_ms:.2f} ms a step (median, steady)" if step_ms else "")
    return (f"{fw}; {step}{obs.steps} steps" + pace
            + (" [the rate the loop dispatched its steps: their results could not be waited on; --steps N "
               "times them to the end]" if obs.step_timing == "dispatch" else "")
            + (" [from the 2nd step to all steps done]" if obs.step_timing == "end-to-end" else "")
            + f", compile {obs.compile_s:.2f} s, wall {obs.wall_s:.1f} s"
            + (" (stopped at --steps)" if obs.stopped_early else "")
            + (" (stopped at --timeout)" if obs.timed_out else ""))


def not_checked(obs: Observations) -> list[tuple[str, str]]:
    """The checks the doctor skipped for this step, each with why (``info.skipped``: a pmapped step's program is not
    read back, so neither unrolled layers nor the attention kernel is checked)."""
    return list(obs.info.skipped.items())


#: the median step differs from the headline's mean by more than this share: the steps vary (said beside it)
VARY_SHARE = 0.10


def pace_details(obs: Observations) -> str | None:
    """What the headline's one step time holds, each other figure named for what it is: the step function's
    own part of each step (a torch step's forward, backward and update; a jitted step's call to its results
    ready), and the median step where slow steps move the mean (a busy machine, an evaluation every N steps).
    None when there is nothing beside the headline."""
    obs = typed(obs)
    it, median = obs.iter_ms, obs.step_ms
    if not it:
        return None
    parts = []
    own = obs.split.step_ms if obs.split else None
    if own is not None:
        kind = obs.step_kind or ""
        what = ("the forward, backward and update" if kind.startswith("torch") else
                f"{obs.step_fn or 'the step'} from its call to its results ready")
        if own <= it:
            parts.append(f"{what} {own:.2f} ms of it (central steps; the rest is the loop's own code and its input)")
        else:  # measured over the central steps, the mean over all: on a busy machine the two need not nest
            parts.append(f"{what} {own:.2f} ms over the central steps, about all of it (the mean over every steady "
                         "step is lower: the steps vary)")
    if median and abs(median - it) > VARY_SHARE * it:
        parts.append(f"the steps vary: the median step is {median:.2f} ms, "
                     + ("slow steps raise the mean" if median < it else "fast steps lower the mean"))
    return "; ".join(parts) or None


def render(console: Console, findings: list[Finding], obs: Observations, title: str,
           watching: bool = False) -> None:
    """Print one panel per finding, worst first, under a one-line summary of the run."""
    obs = typed(obs)
    console.print(f"[bold]twinbench doctor[/] {title}", highlight=False)
    console.print(f"  {summary_line(obs)}", highlight=False)
    if details := pace_details(obs):
        console.print(f"  of each step: {details}", highlight=False)
    for what, why in not_checked(obs):
        console.print(f"  not checked: {what}: {why}", highlight=False)
    py = obs.python
    if py:
        console.print(f"  python: {py.executable} ({py.version})"
                      + ("" if obs.python_given or watching else "; another interpreter: --python PATH"),
                      highlight=False)
    if not obs.step_fn and not obs.error:
        how = MARK_STEP if watching else HOW_TO_MARK  # inside twinbench.watch() already
        console.print(Text(f"  no training step found: looked for {LOOKED_FOR}; {how}", style="yellow"))
    elif obs.steady_steps < 2 and not obs.error:
        console.print("  [dim]fewer than 2 steady steps were seen: per-step findings need a longer run[/]")
    errors = self_errors(obs)
    for e in errors:  # as plain text: an exception message may hold [brackets]
        console.print(Text.assemble(("  doctor self-check failed: ", "bold red"), e))
    if errors:
        console.print("  [red]the findings below may be incomplete[/] (a bug in twinbench's doctor: please report it)")
    if not findings and not obs.step_fn:
        return
    if not findings:
        console.print("  [green]no findings[/]: nothing of severity info or worse"
                      + (" among what could be watched" if errors else ""))
        return
    for f in findings:
        body = Group(
            *([Text.assemble(("at: ", "bold"), f.location)] if f.location else []),
            *([Text.assemble(("caused by: ", "bold"), f"{f.caused_by} (its fix first)")] if f.caused_by else []),
            Text(f.evidence, style="default"),
            Text.assemble(("fix: ", "bold"), f.fix),
            Text(f.doc, style="dim underline") if f.doc else Text(""),
        )
        console.print(Panel(body, title=Text.assemble((f"{f.severity.upper()} ", STYLE[f.severity]),
                                                      (f"{f.id}", "bold"), f": {f.title}"),
                            title_align="left", border_style=STYLE[f.severity]))
    counts = {s: sum(f.severity == s for f in findings) for s in STYLE}
    console.print("  " + ", ".join(f"{n} {s}" for s, n in counts.items() if n), highlight=False)
