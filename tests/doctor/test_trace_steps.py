"""``doctor --trace`` and the steps it records: a ``--steps`` that ends before the trace does is refused in one line
before the script runs; a script that ends on the step the profiler started on leaves no trace of no step
(docs/doctor.md). No script runs here: the doctor's run and the profiler are stand-ins."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

import twinbench.doctor as doctor_pkg
from twinbench.cli import app
from twinbench.doctor.observed import Info
from twinbench.doctor.trace import TRACE_FROM, TRACE_STEPS, StepProfiler

CLI = CliRunner()


@pytest.fixture
def runs(monkeypatch):
    calls = []

    def run_doctor(*args, **kwargs):
        calls.append(args)
        raise doctor_pkg.DoctorError("the stand-in doctor ran")

    monkeypatch.setattr(doctor_pkg, "run_doctor", run_doctor)
    return calls


def _errors(result) -> list[str]:
    assert "Traceback" not in result.output, result.output
    return [ln for ln in result.output.splitlines() if ln.startswith("error:")]


@pytest.mark.parametrize("steps", [1, 5, TRACE_FROM + TRACE_STEPS - 1])
def test_steps_that_end_before_the_trace_are_refused_before_the_script_runs(tmp_path, runs, steps):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    trace = tmp_path / "trace"
    result = CLI.invoke(app, ["doctor", str(script), "--steps", str(steps), "--trace", str(trace)])
    assert result.exit_code == 2
    (line,) = _errors(result)
    assert f"--steps {steps}" in line and f"give --steps {TRACE_FROM + TRACE_STEPS} or more" in line, line
    assert not runs and not trace.exists()  # nothing ran, no folder made


def test_steps_that_reach_the_end_of_the_trace_run(tmp_path, runs):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    result = CLI.invoke(app, ["doctor", str(script), "--steps", str(TRACE_FROM + TRACE_STEPS), "--trace",
                              str(tmp_path / "trace")])
    assert _errors(result) == ["error: the stand-in doctor ran"] and len(runs) == 1


class _Profile:
    """torch.profiler.profile's stand-in: what it was asked to do."""

    def __init__(self) -> None:
        self.stopped, self.exported = False, False

    def stop(self) -> None:
        self.stopped = True

    def export_chrome_trace(self, path: str) -> None:
        self.exported = True
        Path(path).write_text(json.dumps({"traceEvents": []}))


def _profiler(tmp_path: Path, recorded: list[int]) -> tuple[StepProfiler, SimpleNamespace]:
    rec = SimpleNamespace(internal=0, info=Info(), traced=(TRACE_FROM - 1, None), step_key=lambda: "train:step",
                          call_index=lambda key: TRACE_FROM - 1 + len(recorded))
    prof = StepProfiler(rec, str(tmp_path / "trace"))
    prof.framework, prof.started, prof.t0, prof.recorded = "torch", _Profile(), 1.0, list(recorded)
    prof._next_annotation = lambda index: None  # no record_function to close
    return prof, rec


def test_a_script_ending_where_the_profiler_started_leaves_no_trace_of_no_step(tmp_path):
    prof, rec = _profiler(tmp_path, [])
    started = prof.started
    prof.stop()
    assert started.stopped
    assert rec.info.trace is None and not any((tmp_path / "trace").rglob("*"))


def test_a_script_ending_inside_the_trace_keeps_the_steps_it_recorded(tmp_path):
    prof, rec = _profiler(tmp_path, [TRACE_FROM])
    prof.stop()
    info = json.loads((tmp_path / "trace" / "trace.json").read_text())
    assert info["steps"] == [TRACE_FROM] and rec.info.trace.files == ["doctor.pt.trace.json"]
