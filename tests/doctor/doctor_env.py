"""The environment of the doctor's runs of example scripts: the suite's, with XLA's own CPU fusion emitters and
code generation split.

tests/conftest.py switches both off to compile faster; the doctor's findings (jax-unrolled-loop: info below 0.5 s
of compile spent on the copies, warning from it; compile-dominates from 1 s) are thresholds on compile seconds,
so the scripts compile as a user's would.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from suite_xla_flags import NOT_FOR_THE_DOCTOR


def doctor_env(**extra: str) -> dict[str, str]:
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if f not in NOT_FOR_THE_DOCTOR]
    return {**os.environ, "XLA_FLAGS": " ".join(flags), **extra}


def run_like_the_command(script: Path, args: list[str] | None = None, steps: int | None = None,
                         timeout: float = 240, **extra: str) -> tuple[int, dict[str, Any] | None, str]:
    """What ``twinbench doctor SCRIPT [--steps N] --json FILE`` gives, without a process for the command itself:
    the exit code (the command's own ``exit_code``), the JSON report (None where the command writes none) and the
    output (the script's, or the one-line error). The script runs as under the command, in a fresh bootstrap
    process with :func:`doctor_env`'s environment; the diagnosis runs here (tests/doctor/test_doctor_cli.py runs
    the command). One at a time: each run stops every process the test process started meanwhile."""
    from twinbench.cli.doctor import exit_code
    from twinbench.doctor import DoctorError, run_doctor
    from twinbench.doctor.report import no_step_message

    saved = {k: os.environ.get(k) for k in ("XLA_FLAGS", *extra)}
    env = doctor_env(**extra)
    os.environ.update({k: env[k] for k in saved})
    try:
        result = run_doctor(script, args or [], steps, timeout)
    except DoctorError as e:
        return 2, None, str(e)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    report = json.loads(result.to_json(str(script)))  # as the command writes it
    code = exit_code(result, str(script))
    no_step = no_step_message(result.observations, str(script))
    return code, report, result.output_tail + (f"\n{no_step}" if no_step else "")
