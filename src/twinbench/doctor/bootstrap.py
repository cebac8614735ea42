"""Runs a user's script as ``__main__`` with the doctor's instruments installed before any of its code.

Usage (by ``twinbench doctor``, through ``runner.run_script``, with the script's folder as working dir)::

    python -m twinbench.doctor.bootstrap OBSERVATIONS.json MAX_STEPS SCRIPT [SCRIPT_ARGS...]

The script sees the ``sys.argv`` and ``sys.path[0]`` it would see under ``python SCRIPT``. It is ended
cleanly after ``MAX_STEPS`` steps (0: never) or at SIGTERM (the doctor's ``--timeout``), and whatever
happens the observations are written to ``OBSERVATIONS.json`` (which lives outside the script's folder).
While the steps run, the observations so far are written to ``OBSERVATIONS.json.partial`` at most once a
second (at a step's end): a script that ignores SIGTERM is killed at the end of the grace period, and what it
did until then is still reported. ``TWINBENCH_DOCTOR_TRACE=DIR`` records a few steady steps with the
framework's profiler into DIR (``doctor.trace``).
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import sys
import traceback
from typing import Any

from twinbench.doctor.observed import ScriptError, to_builtins
from twinbench.doctor.recorder import Recorder, StopScript
from twinbench.doctor.session import Session

TAIL_LINES = 15


def describe_error(exc: BaseException) -> ScriptError:
    """Type, message and the tail of the traceback, without the bootstrap's own frames."""
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    keep = [ln for ln in lines if "twinbench/doctor/" not in ln and "<frozen runpy>" not in ln
            and "/runpy.py" not in ln]
    text = "".join(keep).rstrip().splitlines()
    if "--------------------" in text:  # JAX appends a note about its filtered frames: not the error
        text = text[:text.index("--------------------")]
    return ScriptError(type=type(exc).__name__, module=type(exc).__module__, message=str(exc)[:1000],
                       traceback_tail="\n".join(text[-TAIL_LINES:]))


def run(script: str, args: list[str], rec: Recorder) -> None:
    """Execute ``script`` as ``__main__``; record how it ended in ``rec``."""
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    try:
        runpy.run_path(script, run_name="__main__")
    except StopScript:
        pass
    except SystemExit as e:
        if e.code not in (0, None):
            rec.error = ScriptError(type="SystemExit", module="builtins", message=f"exit code {e.code}",
                                    traceback_tail=f"the script called sys.exit({e.code!r})", exit_code=e.code if e.code is None or isinstance(e.code, int) else str(e.code))
    except BaseException as e:
        rec.error = describe_error(e)


#: the child processes noted (a pool of thousands is summed, not listed)
MAX_CHILDREN = 64


def note_children(rec: Recorder) -> None:
    """Note every Python process the script starts (``multiprocessing``'s, and torch's and a process pool's
    through it) with the function it runs, in ``rec.info.child_processes``: the doctor watches this process
    only, so a loop trained in children (Hogwild, a hand-made spawn) is said to be there when no step is found."""
    import multiprocessing.process as mpp

    start = mpp.BaseProcess.start

    def started(self: Any) -> None:
        target = getattr(self, "_target", None)
        name = f"{getattr(target, '__module__', '') or ''}:{getattr(target, '__qualname__', '') or type(self).__name__}"
        seen = rec.info.child_processes
        if name in seen or len(seen) < MAX_CHILDREN:
            seen[name] = seen.get(name, 0) + 1
        return start(self)

    mpp.BaseProcess.start = started  # type: ignore[method-assign]


def write_json(path: str, obs: dict[str, Any]) -> None:  # obs: summary.observations
    """Write ``obs`` to ``path`` whole or not at all (a reader never sees half a file)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(obs, f, default=to_builtins)
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    out_path, max_steps, script, *args = argv
    session = Session(max_steps=int(max_steps) or None, capture_stderr=True)
    rec = session.rec
    rec.check_reads = True  # a run of its own: the doctor may answer some reads one step late to check their cost
    rec.snapshot = lambda: write_json(f"{out_path}.partial", {**rec.observations(), "partial": True})
    trace_dir = os.environ.get("TWINBENCH_DOCTOR_TRACE")
    rec.check_input = not trace_dir  # the input check's own calls of the step stay out of a profiler's trace
    if trace_dir:
        from twinbench.doctor.trace import StepProfiler

        StepProfiler(rec, trace_dir).install()

    def on_term(signum: int, frame: Any) -> None:
        rec.timed_out = True
        raise StopScript("--timeout reached")

    signal.signal(signal.SIGTERM, on_term)
    note_children(rec)
    try:
        run(script, args, rec)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        rec.snapshot = None
        obs = session.stop()
        write_json(out_path, obs)
    sys.stdout.flush()
    sys.stderr.flush()
    if rec.timed_out:  # a hung thread must not keep us alive past the doctor's grace period
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
