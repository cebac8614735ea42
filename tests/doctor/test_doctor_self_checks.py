"""The doctor's own failures are shown and fail the command (exit 3): a broken hook never reads as "no findings"."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from twinbench.doctor.observations import typed
from twinbench.doctor.report import self_errors

# The script breaks the doctor's torch instrument before importing torch (which installs it).
BROKEN = """\
import twinbench.doctor.instruments_torch as instruments


class Broken:
    def __init__(self, rec):
        raise RuntimeError("deliberately broken instrument")


instruments.TorchInstruments = Broken
import torch

print(float(torch.ones(3).sum()))
"""


def test_broken_instrument_is_printed_and_exits_3(tmp_path: Path) -> None:
    script, report = tmp_path / "train.py", tmp_path / "r.json"
    script.write_text(BROKEN)
    proc = subprocess.run([sys.executable, "-m", "twinbench.cli", "doctor", str(script), "--json", str(report)],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "doctor self-check failed" in proc.stdout
    assert "torch: RuntimeError: deliberately broken instrument" in proc.stdout
    assert "no findings" not in proc.stdout or "among what could be watched" in proc.stdout
    doc = json.loads(report.read_text())
    assert doc["self_errors"] == ["instrument: torch: RuntimeError: deliberately broken instrument"]


def test_watch_shows_a_failing_finalizer(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    import twinbench
    from twinbench.doctor import recorder

    original = recorder.Recorder.__init__

    def with_broken_finalizer(self: recorder.Recorder, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)

        def broken() -> None:
            raise ValueError("finalizer deliberately broken")

        self.finalizers.append(broken)

    monkeypatch.setattr(recorder.Recorder, "__init__", with_broken_finalizer)
    with twinbench.watch() as doc:
        pass
    assert doc.self_errors == ["finalizer: ValueError: finalizer deliberately broken"]
    printed = " ".join(capsys.readouterr().err.split())  # as the console wrapped it, in one line
    assert "doctor self-check failed: finalizer: ValueError: finalizer deliberately broken" in printed


def test_every_kind_of_self_error_is_collected() -> None:
    obs = {"info": {"instrument_errors": ["jax jit: KeyError: 'x'"], "finalize_errors": ["TypeError: y"],
                    "donation_error": "RuntimeError: z"}}
    assert self_errors(typed(obs)) == ["instrument: jax jit: KeyError: 'x'", "finalizer: TypeError: y",
                                       "donation check: RuntimeError: z"]
    assert self_errors(typed({"info": {}})) == [] and self_errors(typed({})) == []
