"""`twinbench advise`: a bad flag is one line (end to end on the traced tiny run: tests/report/test_trace.py)."""

from __future__ import annotations

import subprocess
import sys


def test_advise_rejects_bad_flags() -> None:
    proc = subprocess.run([sys.executable, "-m", "twinbench.cli", "advise", "--plan-steps", "0"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--plan-steps must be a positive integer" in proc.stderr
    assert "Traceback" not in proc.stderr
