"""--trace DIR: a tiny traced compare leaves one profiler trace per framework, linked from the report, and
the traced steps are not among the measured ones."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from twinbench.record import read_jsonl


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
