"""One real traced tiny compare (a process per run), checked here by every test that needs a real run's
results: --trace DIR leaves one profiler trace per framework, linked from the report, and the traced steps are
not among the measured ones; the report page of the run renders in Chromium and its screenshot is not blank;
the Markdown twin links its plots; `twinbench advise` reuses the runs (last: it adds its advice to the run's
report). One file, so that the compare runs once whichever worker of a parallel test run takes it."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import decoded_plots, rendered_dom, run_chromium

from twinbench.record import read_jsonl


@pytest.fixture(scope="module")
def traced_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real `twinbench compare --preset tiny --trace` of torch eager and JAX jit (one process per run)."""
    out = tmp_path_factory.mktemp("traced")
    cmd = [sys.executable, "-m", "twinbench.cli", "compare", "--preset", "tiny", "--strategies", "eager,jit",
           "--steps", "6", "--warmup", "2", "--out", str(out), "--trace", str(out / "traces")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:] + proc.stdout[-2000:]
    return out


def records(run: Path) -> dict[str, dict]:
    return {r["framework"]: r for r in read_jsonl(run / "results.jsonl")}


def test_each_framework_writes_a_trace(traced_run: Path) -> None:
    recs = records(traced_run)
    assert set(recs) == {"torch", "jax"}
    torch_trace = Path(recs["torch"]["trace_path"])
    events = json.loads(torch_trace.read_text())["traceEvents"]
    assert any("twinbench_step_0" in str(e.get("name")) for e in events)
    jax_trace = Path(recs["jax"]["trace_path"])
    assert jax_trace.name.endswith(".json.gz") and jax_trace.is_relative_to(traced_run / "traces")
    with gzip.open(jax_trace, "rt") as f:
        assert "twinbench_step" in f.read()
    for r in recs.values():
        assert r["status"] == "ok" and r["trace_error"] is None


def test_traced_steps_stay_out_of_the_measurement(traced_run: Path) -> None:
    for r in records(traced_run).values():
        assert len(r["losses"]) == r["steps"] == 6  # the profiled steps ran after these, unrecorded


def test_report_links_the_traces(traced_run: Path) -> None:
    html = (traced_run / "report.html").read_text()
    assert 'data-section="traces"' in html and "ui.perfetto.dev" in html
    for r in records(traced_run).values():
        rel = Path(r["trace_path"]).relative_to(traced_run.resolve())
        assert f"href='{rel}'" in html


@pytest.mark.slow  # headless Chromium and a real traced run
def test_screenshot_of_a_real_run_is_not_blank(chromium: str, traced_run: Path, tmp_path: Path) -> None:
    html_path = traced_run / "report.html"  # written by compare itself
    dom = rendered_dom(chromium, html_path, tmp_path)
    plots = decoded_plots(dom)
    assert {"cumulative", "loss"} <= set(plots) and all(w > 100 for w in plots.values()), plots
    shot = tmp_path / "shot.png"
    proc = run_chromium(chromium, tmp_path, f"--screenshot={shot}", "--window-size=1280,1800", html_path.as_uri())
    assert shot.exists(), proc.stderr[-1500:]
    from PIL import Image

    img = Image.open(shot).convert("L")
    assert img.size == (1280, 1800)
    lo, hi = img.getextrema()
    assert hi - lo > 100  # text and plots on a white page, not a blank or error page
    dark = sum(img.histogram()[:128]) / (img.width * img.height)
    assert 0.005 < dark < 0.5, dark


def test_markdown_twin_links_plot_files_beside_it(traced_run: Path) -> None:
    md = (traced_run / "report.md").read_text()
    for pid in re.findall(r"\(plots/([a-z-]+)\.png\)", md):
        assert (traced_run / "plots" / f"{pid}.png").stat().st_size > 1000
    assert "(plots/cumulative.png)" in md


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
