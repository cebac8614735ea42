"""benchmarks/gpu_check.sh --dry-run: the GPU check's flow on the tiny preset on CPU (no torch.compile)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.sh"


@pytest.mark.slow  # two runs, a report and an explain of two more
def test_gpu_check_dry_run_writes_records_and_summary(tmp_path):
    out = tmp_path / "check"
    proc = subprocess.run(["bash", str(SCRIPT), str(out), "--dry-run"], capture_output=True, text=True,
                          env={**os.environ, "PYTHON": sys.executable}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = json.loads((out / "records.json").read_text())
    got = {(r["framework"], r["strategy"], r["precision"], r["status"]) for r in records}
    assert got == {("torch", "eager", "fp32", "ok"), ("jax", "jit+bf16", "bf16", "ok")}
    assert len((out / "results.jsonl").read_text().splitlines()) == 2
    assert "jax/jit+bf16" in (out / "summary.md").read_text()
    assert "command: twinbench compare --preset tiny" in (out / "conditions.txt").read_text()
    assert not (out / "compile-cache").exists()
    explained = json.loads((out / "explain.json").read_text())  # torch:eager against jax:jit, side by side
    assert explained["rows"] and [explained[s]["run"] for s in ("a", "b")] == ["torch/eager", "jax/jit"]
    # the summary names the two runs, or says which check refused a cause (a busy CI machine fails the quiet one)
    summary = explained["summary"]
    assert ("torch/eager" in summary and "jax/jit" in summary) or (summary.startswith("no row is named")
                                                                    and explained["gates"])


def test_gpu_check_usage_errors(tmp_path):
    for args in ([], [str(tmp_path), "--fast"]):
        proc = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True)
        assert proc.returncode == 2 and "usage: benchmarks/gpu_check.sh OUTDIR [--dry-run]" in proc.stderr
