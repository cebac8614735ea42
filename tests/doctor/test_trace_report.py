"""What the doctor says of its --trace: the explain command only for a trace explain can read."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from twinbench.cli import doctor as cli_doctor
from twinbench.doctor.trace import TRACE_STEPS


@pytest.fixture
def said(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    buf = io.StringIO()
    monkeypatch.setattr(cli_doctor, "out", Console(file=buf, width=400, color_system=None))
    return buf


def obs(steps: int, traced: int, untraced_ms: float = 9.0) -> dict:
    return {"steps": steps, "info": {"trace": {"steps": list(range(traced)), "framework": "torch"}},
            "trace_timing": {"traced_step_ms": 10.0, "untraced_step_ms": untraced_ms}}


def test_a_whole_trace_gets_the_explain_command_and_the_profilers_cost(tmp_path: Path, said: io.StringIO) -> None:
    cli_doctor.report_trace(tmp_path, obs(12, TRACE_STEPS))
    text = said.getvalue()
    assert "explain with: twinbench explain" in text and "the profiler's own cost 1.0 ms" in text


def test_a_trace_cut_short_or_gone_gets_no_explain_command(tmp_path: Path, said: io.StringIO) -> None:
    cli_doctor.report_trace(tmp_path, obs(5, 1))  # a 5-step script: one traced step
    cli_doctor.report_trace(tmp_path / "removed", obs(12, TRACE_STEPS))  # the script deleted the folder
    text = said.getvalue()
    assert "twinbench explain" not in text
    assert f"1 of the {TRACE_STEPS} traced steps" in text and "is gone since the profiler wrote it" in text


def test_an_untraced_step_slower_than_the_traced_one_is_no_negative_cost(tmp_path: Path, said: io.StringIO) -> None:
    cli_doctor.report_trace(tmp_path, obs(12, TRACE_STEPS, untraced_ms=11.0))
    assert "within the steps' spread" in said.getvalue() and "-1.0" not in said.getvalue()
