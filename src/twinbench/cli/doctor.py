"""``doctor``: a user's own training script run under instruments, and why it is slow."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

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
) -> None:
    """Run your own training script and say why it is slow: each finding with evidence and the fix.

    Usage: twinbench doctor train.py [--steps N] [--timeout S] [--json FILE] [--python PATH] [-- SCRIPT_ARGS...].
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
    try:
        with console.status(f"running {script} under the doctor"):
            result = run_doctor(script, list(script_args or []), steps, timeout, python=python)
    except DoctorError as e:
        fail(str(e))
    except KeyboardInterrupt:
        fail(f"interrupted; {script} was stopped", code=130)
    no_step = no_step_message(result.observations, str(script))
    if no_step and not result.self_errors:  # nothing per step could be said: not a clean bill of health
        if json_path:
            write_text(json_path, json.dumps(result.to_json(str(script)), indent=1), "--json")
        fail(no_step)
    render(out, result.findings, result.observations, str(script))
    if json_path:
        write_text(json_path, json.dumps(result.to_json(str(script)), indent=1), "--json")
    if result.timed_out:
        fail(f"{script} did not finish within --timeout {timeout:g} s; stopped after "
             f"{result.observations.get('steps', 0)} steps (the findings above cover that part); "
             "use --steps N to diagnose a long run quickly")
    if result.self_errors:  # an incomplete report must not pass for a clean one
        raise typer.Exit(3)
    raise typer.Exit(1 if result.serious else 0)

