"""`twinbench advise` end to end on a tiny preset: it reuses the runs already in --out (same run ids), writes
advice.json whose every number is a record's, and adds the advice to the report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from twinbench.record import read_jsonl


def test_advise_end_to_end(traced_run: Path) -> None:
    before = read_jsonl(traced_run / "results.jsonl")
    cmd = [sys.executable, "-m", "twinbench.cli", "advise", "--preset", "tiny", "--strategies", "eager,jit",
           "--steps", "6", "--warmup", "2", "--plan-steps", "20000", "--changes-per-day", "2",
           "--out", str(traced_run)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    after = read_jsonl(traced_run / "results.jsonl")
    assert len(after) == len(before) == 2  # the measured runs were reused, not run again
    advice = json.loads((traced_run / "advice.json").read_text())
    by_id = {r["run_id"]: r for r in after}
    assert advice["recommendation"]["framework"] in {"torch", "jax"}
    for f in advice["frameworks"].values():
        r = by_id[f["run_id"]]
        assert (f["step_ms"], f["first_step_s"], f["peak_mem_bytes"]) == (r["step_ms"], r["first_step_s"],
                                                                          r["peak_mem_bytes"])
        assert f"[{f['run_id']}]" in proc.stdout
    assert "recommendation:" in proc.stdout and "3 cold compile(s)" in proc.stdout
    assert 'data-section="advice"' in (traced_run / "report.html").read_text()


def test_advise_rejects_bad_flags() -> None:
    proc = subprocess.run([sys.executable, "-m", "twinbench.cli", "advise", "--plan-steps", "0"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--plan-steps must be a positive integer" in proc.stderr
    assert "Traceback" not in proc.stderr
