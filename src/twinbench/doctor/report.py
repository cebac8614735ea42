"""The doctor's output: a readable rich report, and the JSON document (a contract, see docs/doctor-findings.md, "The JSON")."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.text import Text

from twinbench.doctor.findings import Finding

STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def self_errors(obs: dict[str, Any]) -> list[str]:
    """The doctor's own failures during the run: an instrument that could not be installed or raised on the
    script's call path, a finalizer that raised, the donation/memory check that failed. Each one means
    the findings may be incomplete (``twinbench doctor`` then exits 3)."""
    info = obs.get("info") or {}
    out = [f"instrument: {e}" for e in info.get("instrument_errors") or []]
    out += [f"finalizer: {e}" for e in info.get("finalize_errors") or []]
    if info.get("donation_error"):
        out.append(f"donation check: {info['donation_error']}")
    return out


def to_json(findings: list[Finding], obs: dict[str, Any], script: str | None = None) -> dict[str, Any]:
    """``{"findings": [...], "steps", "step_ms", "compile_s", "wall_s", ..., "self_errors"}``."""
    return {
        "findings": [f.to_dict() for f in findings],
        "steps": obs.get("steps", 0),
        "step_ms": obs.get("step_ms"),
        "compile_s": obs.get("compile_s", 0.0),
        "wall_s": obs.get("wall_s", 0.0),
        "script": script,
        "step_fn": obs.get("step_fn"),
        "step_signal": obs.get("step_signal"),
        "frameworks": obs.get("frameworks", []),
        "stopped_early": obs.get("stopped_early", False),
        "timed_out": obs.get("timed_out", False),
        "self_errors": self_errors(obs),
        "python": obs.get("python"),
        "iter_ms": obs.get("iter_ms"),
        "not_checked": dict(not_checked(obs)),  # checks skipped for this step, with why
        "observations": obs,  # everything the text is made from (split, per-step rates, notes, info)
    }


LOOKED_FOR = ("torch's Optimizer.step, loss.backward(), the script's jitted functions (jax.jit, nnx.jit), "
              "jax.grad/value_and_grad calls outside jit, an Optax update outside jit")
MARK_STEP = ("mark the step yourself: call twinbench.doctor.step() once per loop iteration (it does nothing "
             "outside the doctor)")
HOW_TO_MARK = f"{MARK_STEP}, or run the loop inside `with twinbench.watch():`"


#: the module of torch's DataLoader worker loop (a process started for it is no training)
LOADER_WORKERS = "torch.utils.data"


def no_step_message(obs: dict[str, Any], script: str) -> str | None:
    """The one-line reason to stop when the script ran to its end but no training step was found, else None
    (a script that failed or timed out is reported as such)."""
    if obs.get("step_fn") or obs.get("error") or obs.get("timed_out"):
        return None
    seen = "+".join(obs.get("frameworks", [])) or "neither JAX nor PyTorch imported"
    children = {k: n for k, n in ((obs.get("info") or {}).get("child_processes") or {}).items()
                if not k.startswith(LOADER_WORKERS)}  # a DataLoader's workers load; they do not train
    where = ""
    if children:
        runs = ", ".join(f"{k.rsplit(':', 1)[-1]} x{n}" for k, n in children.items())
        where = (f"; it started {sum(children.values())} Python process(es) ({runs}), which the doctor does not "
                 "watch: a loop trained there is not seen (nor marked there), so call its training function in the "
                 "script's own process (one worker, no Process) to have it diagnosed")
    return (f"no training step found in {script} ({seen}; it ran {obs.get('wall_s', 0.0):.1f} s): looked for "
            f"{LOOKED_FOR}" + (where if where else f"; {HOW_TO_MARK}"))


def summary_line(obs: dict[str, Any]) -> str:
    step_ms = obs.get("step_ms")
    fw = "+".join(obs.get("frameworks", [])) or "no framework seen"
    signal = obs.get("step_signal") or obs.get("step_kind")
    step = (f"step = {obs['step_fn']} (found by {signal}), " if obs.get("step_fn") else "no step found, ")
    stepped = (obs.get("info") or {}).get("torch_optimizers") or {}
    if len(stepped) > 1 and obs.get("step_fn") in stepped:  # one iteration steps each: its calls are the step's
        counts = obs.get("candidates") or {}
        step += (f"one of {len(stepped)} optimizers stepping in the loop ("
                 + ", ".join(f"{k} {v}: {counts.get(k, 0)} steps" for k, v in stepped.items())
                 + "; the one stepping least often marks an iteration), ")
    it = obs.get("iter_ms")
    # under the doctor's instruments (wrappers, the watcher and sampler threads) a step takes longer than alone,
    # by up to a few ms a step on the JAX CPU examples: said, not hidden
    pace = (f": {it:.2f} ms a step (the mean steady iteration, one step start to the next, as a clock around the "
            "loop shows it, under the doctor's instruments, which lengthen each step by up to a few ms)") if it else (f": {step_ms:.2f} ms a step (median, steady)" if step_ms else "")
    return (f"{fw}; {step}{obs.get('steps', 0)} steps" + pace
            + (" [the rate the loop dispatched its steps: their results could not be waited on; --steps N "
               "times them to the end]" if obs.get("step_timing") == "dispatch" else "")
            + (" [from the 2nd step to all steps done]" if obs.get("step_timing") == "end-to-end" else "")
            + f", compile {obs.get('compile_s', 0.0):.2f} s, wall {obs.get('wall_s', 0.0):.1f} s"
            + (" (stopped at --steps)" if obs.get("stopped_early") else "")
            + (" (stopped at --timeout)" if obs.get("timed_out") else ""))


def not_checked(obs: dict[str, Any]) -> list[tuple[str, str]]:
    """The checks the doctor skipped for this step, each with why (``info.skipped``: a pmapped step's program is not
    read back, so neither unrolled layers nor the attention kernel is checked)."""
    return [(k, v) for k, v in ((obs.get("info") or {}).get("skipped") or {}).items()]


#: the median step differs from the headline's mean by more than this share: the steps vary (said beside it)
VARY_SHARE = 0.10


def pace_details(obs: dict[str, Any]) -> str | None:
    """What the headline's one step time holds, each other figure named for what it is: the step function's
    own part of each step (a torch step's forward, backward and update; a jitted step's call to its results
    ready), and the median step where slow steps move the mean (a busy machine, an evaluation every N steps).
    None when there is nothing beside the headline."""
    it, median = obs.get("iter_ms"), obs.get("step_ms")
    if not it:
        return None
    parts = []
    own = (obs.get("split") or {}).get("step_ms")
    if own is not None:
        kind = obs.get("step_kind") or ""
        what = ("the forward, backward and update" if kind.startswith("torch") else
                f"{obs.get('step_fn') or 'the step'} from its call to its results ready")
        if own <= it:
            parts.append(f"{what} {own:.2f} ms of it (central steps; the rest is the loop's own code and its input)")
        else:  # measured over the central steps, the mean over all: on a busy machine the two need not nest
            parts.append(f"{what} {own:.2f} ms over the central steps, about all of it (the mean over every steady "
                         "step is lower: the steps vary)")
    if median and abs(median - it) > VARY_SHARE * it:
        parts.append(f"the steps vary: the median step is {median:.2f} ms, "
                     + ("slow steps raise the mean" if median < it else "fast steps lower the mean"))
    return "; ".join(parts) or None


def render(console: Console, findings: list[Finding], obs: dict[str, Any], title: str,
           watching: bool = False) -> None:
    """Print one panel per finding, worst first, under a one-line summary of the run."""
    console.print(f"[bold]twinbench doctor[/] {title}", highlight=False)
    console.print(f"  {summary_line(obs)}", highlight=False)
    if details := pace_details(obs):
        console.print(f"  of each step: {details}", highlight=False)
    for what, why in not_checked(obs):
        console.print(f"  not checked: {what}: {why}", highlight=False)
    py = obs.get("python") or {}
    if py:
        console.print(f"  python: {py.get('executable')} ({py.get('version')})"
                      + ("" if obs.get("python_given") or watching else "; another interpreter: --python PATH"),
                      highlight=False)
    if not obs.get("step_fn") and not obs.get("error"):
        how = MARK_STEP if watching else HOW_TO_MARK  # inside twinbench.watch() already
        console.print(Text(f"  no training step found: looked for {LOOKED_FOR}; {how}", style="yellow"))
    elif obs.get("steady_steps", 0) < 2 and not obs.get("error"):
        console.print("  [dim]fewer than 2 steady steps were seen: per-step findings need a longer run[/]")
    errors = self_errors(obs)
    for e in errors:  # as plain text: an exception message may hold [brackets]
        console.print(Text.assemble(("  doctor self-check failed: ", "bold red"), e))
    if errors:
        console.print("  [red]the findings below may be incomplete[/] (a bug in twinbench's doctor: please report it)")
    if not findings and not obs.get("step_fn"):
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
