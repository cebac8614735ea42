"""``doctor``: a user's own training script run under instruments, and why it is slow."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from twinbench.cli.common import (
    app,
    check_json,
    check_timeout,
    console,
    fail,
    out,
    write_text,
)
from twinbench.config import SpecError
from twinbench.folder_io import terminal

if TYPE_CHECKING:
    from twinbench.doctor import DoctorResult
    from twinbench.doctor.observations import Observations


@app.command()
def doctor(
    script: Path = typer.Argument(..., help="your training script (a .py file)", show_default=False),
    script_args: Optional[list[str]] = typer.Argument(  # noqa: UP045
        None, help="arguments for the script, after --", show_default=False),
    steps: Optional[int] = typer.Option(None, help="end the script cleanly after N training steps"),  # noqa: UP045
    timeout: float = typer.Option(600.0, help="seconds before the script is stopped"),
    json_path: Optional[Path] = typer.Option(None, "--json", help="also write the findings here as JSON"),  # noqa: UP045
    python: Optional[str] = typer.Option(  # noqa: UP045
        None, help="run the script under this interpreter (its virtual environment's python); default: twinbench's"),
    trace: Optional[Path] = typer.Option(  # noqa: UP045
        None, "--trace", help="record a few steady steps with the framework's profiler in this folder, for explain"),
) -> None:
    """Run your own training script and say why it is slow: each finding with evidence and the fix.

    Usage: twinbench doctor train.py [--steps N] [--timeout S] [--json FILE] [--python PATH] [--trace DIR]
    [-- SCRIPT_ARGS...]. --trace DIR records steady steps (PyTorch: torch.profiler; JAX: jax.profiler and the
    compiled HLO) and prints the twinbench explain command that reads them.
    Exit code 0: nothing of severity warning or worse; 1: something was found; 2: the doctor could not run
    (or found no training step: mark it with twinbench.doctor.step());
    3: one of the doctor's own instruments or checks failed (printed; the findings may be incomplete).
    """
    from twinbench.doctor import DoctorError, run_doctor
    from twinbench.doctor.report import no_step_message, render

    if steps is not None and steps <= 0:
        fail(f"--steps must be a positive integer, got {steps}")
    check_timeout(timeout)
    check_json(json_path)
    if trace is not None:
        check_trace_steps(steps)
        check_trace_dir(trace)
    try:
        with console.status(f"running {script} under the doctor"):
            result = run_doctor(script, list(script_args or []), steps, timeout, python=python, trace_dir=trace)
    except DoctorError as e:
        fail(str(e))
    except KeyboardInterrupt:
        fail(f"interrupted; {script} was stopped", code=130)
    no_step = no_step_message(result.observations, str(script))
    if no_step and not result.self_errors:  # nothing per step could be said: not a clean bill of health
        if json_path:
            write_text(json_path, result.to_json(str(script)), "--json")
        fail(no_step)
    render(out, result.findings, result.observations, str(script))
    if trace is not None:
        report_trace(trace, result.observations)
        keep_report(trace, result, str(script))
    if json_path:
        write_text(json_path, result.to_json(str(script)), "--json")
    if result.timed_out:
        how = ("it ignored SIGTERM and was killed; the findings above cover the steps seen until then"
               if result.observations.killed else "the findings above cover that part")
        fail(f"{script} did not finish within --timeout {timeout:g} s; stopped after "
             f"{result.observations.steps} steps ({how}); use --steps N to diagnose a long run quickly")
    if result.observations.died:  # the findings hold for the steps seen; the run itself is not clean
        fail(f"{script} ended early, {result.observations.died}, after {result.observations.steps} "
             "steps; the findings above cover the steps seen until then")
    raise typer.Exit(exit_code(result, str(script)))


def exit_code(result: DoctorResult, script: str) -> int:
    """The command's exit code for a run the doctor finished (what its help says): 2 when no step was found (and
    nothing of the doctor's own failed) or the script ran past --timeout, 3 when an instrument or check of the
    doctor failed (an incomplete report must not pass for a clean one), 1 when something of severity warning or
    worse was found, else 0."""
    from twinbench.doctor.report import no_step_message

    if (no_step_message(result.observations, script) and not result.self_errors) or result.timed_out:
        return 2
    if result.self_errors:
        return 3
    return 1 if result.serious else 0



def check_trace_steps(steps: int | None) -> None:
    """--trace with --steps N: N must reach the end of the trace (its first steps compile and warm up, the next
    ones are recorded); a shorter run would record a part of it, or nothing. One line, exit 2."""
    from twinbench.doctor.trace import TRACE_FROM, TRACE_STEPS

    if steps is not None and steps < TRACE_FROM + TRACE_STEPS:
        fail(f"--steps {steps}: --trace records steps {TRACE_FROM + 1} to {TRACE_FROM + TRACE_STEPS} (the first "
             f"{TRACE_FROM} compile and warm up); give --steps {TRACE_FROM + TRACE_STEPS} or more, or no --steps")


def check_trace_dir(trace: Path) -> None:
    """--trace DIR: a folder that can be created and written, empty of an earlier trace; else one line, exit 2."""
    if trace.exists() and not trace.is_dir():
        fail(f"--trace {trace}: a file, not a folder")
    try:
        trace.mkdir(parents=True, exist_ok=True)
        probe = trace / ".twinbench-write-probe"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        fail(f"--trace {trace}: cannot write there ({e.strerror or e})")
    if (trace / "trace.json").exists():
        fail(f"--trace {trace}: already holds a doctor trace; give an empty folder")
    with os.scandir(trace) as it:  # an older profile there would be explained with this run's timing
        held = next((e.name for e in it if e.name != ".twinbench-write-probe"), None)
    if held is not None:
        fail(f"--trace {trace}: not empty (holds {terminal(held, 80)}); a profile there from another run would be "
             "read as this one's: give an empty or new folder")


def keep_report(trace: Path, result: DoctorResult, script: str) -> None:
    """The doctor's report (what --json writes) beside its trace, as ``doctor.json``: explain joins its findings
    with the gap (twinbench.explain.answer). A folder it cannot be written to costs a line, not the run."""
    from twinbench.explain.answer import NAME
    from twinbench.folder_io import write_file

    try:
        write_file(trace, NAME, result.to_json(script))
    except (OSError, SpecError) as e:
        out.print(f"  [yellow]the findings were not kept beside the trace ({e}); explain will not join them[/]",
                  highlight=False)


def report_trace(trace: Path, obs: Observations) -> None:
    """Say where the trace is and the explain command that reads it, or why there is none."""
    from rich.markup import escape

    from twinbench.doctor.observations import TraceTiming, typed
    from twinbench.doctor.trace import TRACE_FROM, TRACE_STEPS, explain_command

    obs = typed(obs)  # (JSON, a test's, read as declared)
    info, error = obs.info.trace, obs.info.trace_error
    if info and not Path(trace).is_dir():  # the script removed or moved it after the profiler wrote it
        out.print(f"  [yellow]no trace: {escape(str(trace))} is gone since the profiler wrote it (did the script "
                  "remove it?); choose a --trace folder the script leaves alone[/]")
    elif info and len(info.steps) < TRACE_STEPS:  # the script ended inside the trace's steps
        out.print(f"  [yellow]no trace explain can read: {len(info.steps)} of the {TRACE_STEPS} "
                  f"traced steps were recorded (the script ran {obs.steps} steps; the trace records "
                  f"steps {TRACE_FROM + 1} to {TRACE_FROM + TRACE_STEPS}); run it for more steps[/]")
    elif info:
        timing = obs.trace_timing or TraceTiming()
        at = f" at {timing.traced_step_ms:.1f} ms a step" if timing.traced_step_ms else ""
        if timing.untraced_step_ms and timing.traced_step_ms:
            cost = timing.traced_step_ms - timing.untraced_step_ms
            at += (f" (the untraced step is {timing.untraced_step_ms:.1f} ms: the profiler's own cost "
                   + (f"{cost:.1f} ms)" if cost > 0 else "is within the steps' spread here)"))
        elif timing.step_time_includes_trace:
            at += " (too few steps ran outside the trace: the step time above includes the traced ones)"
        out.print(f"  trace: {len(info.steps)} steps recorded with {info.framework}'s profiler in {trace}{at}; "
                  f"explain with: {explain_command(trace, info)}", highlight=False)
        if info.timing_error:
            out.print(f"  [yellow]the step times were not written beside the trace: {escape(info.timing_error)}[/]")
        # explain finds the compiled step (step.hlo.txt) in a JAX folder the doctor wrote; --hlo only without it
        kept = (Path(trace) / "step.hlo.txt").is_file()
        hlo = f" --hlo {info.hlo}" if info.hlo and not kept else ""
        pair = (f"twinbench explain TORCH_TRACE_DIR {trace}{hlo}" if info.hlo or kept else  # a JAX trace
                f"twinbench explain {trace} JAX_TRACE_DIR")
        out.print(f"  against the other framework's script, traced the same way: {pair}", highlight=False)
    elif error:
        out.print(f"  [yellow]no trace: the profiler failed ({error})[/]")
    else:
        out.print(f"  [yellow]no trace: the script ran {obs.steps} steps; the trace records steps "
                  f"{TRACE_FROM + 1} to {TRACE_FROM + TRACE_STEPS} (the first {TRACE_FROM} compile and warm up)[/]")
