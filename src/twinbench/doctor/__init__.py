"""twinbench doctor: say why a user's own training script is slow, with the evidence and the fix.

Two entry points giving the same findings:

- :func:`run_doctor` (``twinbench doctor SCRIPT``): runs the script in a fresh process under
  ``twinbench.doctor.bootstrap`` (instruments installed before any user code, the script run as
  ``__main__`` in its own folder), reads back its observations, and diagnoses them.
- :class:`watch` (``with twinbench.watch(): ...``): the same instruments in the current process, for
  notebooks.

Layout: ``recorder`` (events, steps), ``instruments_jax`` / ``instruments_torch`` (the frameworks' hooks),
``session`` (installs them when a framework is imported), ``findings`` (one function per finding id, next
to its threshold), ``report`` (rich text and JSON), ``bootstrap`` (the child process's entry point).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from twinbench.doctor.watching import Diagnosed, watch  # in this process: notebooks, twinbench's own runs

if TYPE_CHECKING:
    from twinbench.doctor.findings import Finding
    from twinbench.doctor.observations import Observations
    from twinbench.doctor.report import DoctorReport

__all__ = ["DoctorError", "DoctorResult", "check_script", "run_doctor", "step", "watch"]


def step() -> None:
    """Mark one training step (call it once per iteration of the loop) when the doctor cannot find the step
    itself; the most specific signal wins, so this one overrides every other. Does nothing outside the doctor.
    """
    from twinbench.doctor.recorder import ACTIVE, MARK_KEY

    if ACTIVE:
        rec = ACTIVE[-1]
        rec.step_call(MARK_KEY, "marked")
        rec.step_done(MARK_KEY)


class DoctorError(Exception):
    """The doctor itself could not run (bad script path, no observations): one line, exit 2."""


@dataclass
class DoctorResult(Diagnosed):
    findings: list[Finding]  # worst first
    observations: Observations
    output_tail: str  # the last lines the script printed
    timed_out: bool

    def report(self, script: str | None = None) -> DoctorReport:
        """The report of this run (what ``--json`` writes, and ``doctor.json`` beside a trace)."""
        from twinbench.doctor.report import document

        return document(self.findings, self.observations, script)

    def to_json(self, script: str | None = None) -> str:
        """:meth:`report` as the JSON text ``--json`` writes."""
        import json

        import msgspec

        return json.dumps(msgspec.to_builtins(self.report(script)), indent=1)


PYTHON_SUFFIXES = (".py", ".pyw")
CODING = re.compile(r"^[ \t\f]*#.*?coding[:=]", re.MULTILINE)  # PEP 263: a script in another encoding


def check_script(script: str | Path) -> Path:
    """The script's resolved path, or a one-line :class:`DoctorError` if it is missing or not Python: a
    ``.py`` file of text, or a file without that suffix whose first line is a ``python`` shebang (a JSON, YAML
    or notes file that happens to parse as Python is not run)."""
    path = Path(script).expanduser()
    if not path.exists():
        raise DoctorError(f"SCRIPT {script}: no such file")
    if not path.is_file():
        raise DoctorError(f"SCRIPT {script}: not a file (give the path of a Python training script)")
    try:
        with open(path, "rb") as f:
            head = f.read(65536)
    except OSError as e:
        raise DoctorError(f"SCRIPT {script}: cannot be read ({e.strerror or e})") from None
    text = head.decode("utf-8", errors="replace")
    if b"\0" in head or ("\ufffd" in text and not CODING.search("\n".join(text.splitlines()[:2]))):
        raise DoctorError(f"SCRIPT {script}: not a Python script (binary content; expected a .py file)")
    first = text.split("\n", 1)[0]
    if path.suffix not in PYTHON_SUFFIXES and not (first.startswith("#!") and "python" in first):
        raise DoctorError(f"SCRIPT {script}: not a Python script (expected a .py file, or a python shebang "
                          "on its first line)")
    return path.resolve()


def check_python(python: str | Path | None, timeout: float = 60.0) -> str:
    """The interpreter the script runs under: ``python`` (a path, or a name on PATH) after checking that it
    runs and is Python >= 3.10 (twinbench's bootstrap needs nothing else there), else this one. The check is
    bounded by ``timeout`` (at most a minute): an interpreter that never answers, or leaves a child holding its
    output, is stopped with its process group (``runner.run_script``) and named in one line."""
    from twinbench import runner

    if python is None:
        return sys.executable
    exe = shutil.which(str(Path(python).expanduser())) or str(Path(python).expanduser())
    if not os.path.isfile(exe) or not os.access(exe, os.X_OK):
        raise DoctorError(f"--python {python}: no such executable")
    limit = min(timeout, 60.0)
    try:
        out = runner.run_script([exe, "-c", "import sys; print(sys.version_info >= (3, 10))"], Path.cwd(), limit,
                                grace_s=1.0, tail_lines=5)
    except OSError as e:
        raise DoctorError(f"--python {python}: could not run it ({e})") from None
    if out.timed_out:
        raise DoctorError(f"--python {python}: did not answer within {limit:g} s (is it a Python interpreter?)")
    last = [ln.strip() for ln in out.output_tail.splitlines() if ln.strip()]
    if out.returncode != 0 or not last or last[-1] != "True":
        raise DoctorError(f"--python {python}: not a Python 3.10+ interpreter ({out.output_tail.strip()[-200:]})")
    return exe


def died(returncode: int | None) -> str:
    """How a script that ended without its own end died: the signal's name (``SIGSEGV``) or its exit code."""
    import signal

    if returncode is not None and returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}, without the interpreter's own end (os._exit or a crash in native code)"


def run_doctor(script: str | Path, args: list[str] | None = None, steps: int | None = None,
               timeout: float = 600.0, grace_s: float = 10.0, python: str | Path | None = None,
               trace_dir: str | Path | None = None) -> DoctorResult:
    """Run ``script`` with ``args`` under the doctor's bootstrap and diagnose what it did.

    ``python``: the interpreter to run the script with (default: the one running twinbench), e.g. the
    virtual environment the script's packages live in; twinbench's own source is put on its path, and the
    bootstrap imports nothing there but the script's framework. At ``timeout`` the script is asked to stop
    (SIGTERM: it reports what it saw); ``grace_s`` later it is killed, and the observations it wrote as it
    ran (at most a second old, at a step's end) are reported (``killed`` in the observations), or, when it
    never finished a step, :class:`DoctorError`. ``trace_dir``: record a few steady steps with the framework's
    profiler there (:mod:`twinbench.doctor.trace`), with, for JAX, the compiled HLO dumped beside them.
    """
    import json

    from twinbench import runner
    from twinbench.doctor.findings import diagnose
    from twinbench.doctor.observations import typed

    path = check_script(script)
    exe = check_python(python, timeout)
    with tempfile.TemporaryDirectory(prefix="twinbench-doctor-") as tmp:
        obs_path = Path(tmp, "observations.json")
        cmd = [exe, "-m", "twinbench.doctor.bootstrap", str(obs_path), str(steps or 0), str(path),
               *(args or [])]
        env = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}  # write nothing in the script's folder
        if python is not None:  # twinbench itself need not be installed there: its source goes on the path
            src = str(Path(__file__).resolve().parent.parent.parent)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH", "")) if p)
        if trace_dir is not None:
            from twinbench.doctor.trace import trace_env

            env.update(trace_env(Path(trace_dir)))
        run = runner.run_script(cmd, path.parent, timeout, env=env, grace_s=grace_s)
        partial = Path(f"{obs_path}.partial")
        killed = not obs_path.exists() and partial.exists()
        if killed:  # killed after the grace period: what it wrote as it ran
            partial.replace(obs_path)
        if not obs_path.exists():
            if run.timed_out:
                raise DoctorError(f"{script} did not finish within --timeout {timeout:g} s and did not stop "
                                  "when asked (stuck outside Python?); use --steps N to end a long run early")
            last = [ln for ln in run.output_tail.splitlines() if ln.strip()]
            raise DoctorError(f"{script} ended (exit code {run.returncode}) before the doctor could report"
                              + (f": {last[-1][:300]}" if last else ""))
        # json's reader, not msgspec's: the script's process writes with json.dump, which may write NaN
        obs = typed(json.loads(obs_path.read_text()))
    if trace_dir is not None:  # the step time with and without the profiler, beside the trace
        from twinbench.doctor.trace import write_timing

        write_timing(Path(trace_dir), obs)
    obs.timed_out = obs.timed_out or run.timed_out
    obs.killed = killed
    if killed and not run.timed_out:  # it died on its own (a signal, os._exit): not a run that ended
        obs.died = died(run.returncode)
    if obs.machine is not None and obs.machine.page_faults_per_s:  # one fault's cost, measured here, where
        from twinbench.measure.page_faults import fault_us  # the script ran (its own process stays untouched)

        obs.machine.fault_us = fault_us()
    obs.python_given = python is not None
    return DoctorResult(diagnose(obs), obs, run.output_tail, obs.timed_out)

