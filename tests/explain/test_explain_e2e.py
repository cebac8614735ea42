"""End to end on `tiny`: explain of two results dirs re-runs only the record made without --explain (and says
so); the profiled and timed-by-parts steps are never among the measured ones."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.explain.typed import plain
from twinbench.cli import app
from twinbench.record import read_jsonl

FEW = ["--preset", "tiny", "--steps", "4", "--warmup", "1", "--plan-steps", "10"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("explain")
    plain, explained, out = root / "plain", root / "explained", root / "out"
    r1 = CliRunner().invoke(app, ["compare", "--strategies", "torch:eager", "--out", str(plain), *FEW])
    assert r1.exit_code == 0, r1.output
    r2 = CliRunner().invoke(app, ["compare", "--strategies", "jax:jit", "--explain", "--out", str(explained), *FEW])
    assert r2.exit_code == 0, r2.output
    r3 = CliRunner().invoke(app, ["explain", f"{plain}:torch/eager", f"{explained}:jax/jit", "--out", str(out),
                                  "--json", str(root / "e.json")])
    assert r3.exit_code == 0, r3.output
    return {"plain": read_jsonl(plain / "results.jsonl"), "explained": read_jsonl(explained / "results.jsonl"),
            "rerun": read_jsonl(out / "results.jsonl"), "output": r3.output, "compare": r2.output,
            "json": json.loads((root / "e.json").read_text()), "dir": explained}


def test_only_the_record_without_explain_is_rerun_and_said(runs: dict[str, Any]) -> None:
    assert "re-running torch/eager" in runs["output"]
    assert "re-running jax/jit" not in runs["output"]
    assert [(r["framework"], r["strategy"]) for r in runs["rerun"]] == [("torch", "eager")]
    assert runs["rerun"][0]["run_id"] == runs["plain"][0]["run_id"]  # the same measured spec


def test_profiled_steps_are_not_among_the_timed_ones(runs: dict[str, Any]) -> None:
    for before, after in ((runs["plain"][0], runs["rerun"][0]),):
        assert len(after["losses"]) == len(before["losses"]) == 4  # the timed steps, no more
        assert after["trace_path"] and after["explain_timing"] and not before.get("trace_path")
    jx = runs["explained"][0]
    assert len(jx["losses"]) == 4 and jx["explain_hlo_path"] and jx["explain_timing"]


def test_both_runs_are_broken_down(runs: dict[str, Any]) -> None:
    res = runs["json"]
    for side in ("a", "b"):
        run = res[side]
        assert run["categorized_share"] >= 0.9, run["other"]
        assert sum(run["trace"].values()) == pytest.approx(run["step_ms"], rel=1e-6)
        assert run["trace"]["forward"] > 0 and run["trace"]["backward"] > 0 and run["trace"]["optimizer"] > 0
    assert sum(r["diff_ms"] for r in res["rows"] if r["level"] == 0) == pytest.approx(res["gap_ms"], rel=0.15)
    assert "explain.json" in runs["compare"] and (runs["dir"] / "explain.json").exists()
    assert "Where the step time goes" in (runs["dir"] / "report.html").read_text()


def test_matmul_rows_say_why(runs: dict[str, Any]) -> None:
    """Every matmul row carries both sides' FLOP/s and share of their measured peaks, split into parts that
    sum to its gap; the shapes table matches the two runs' matmuls; the memory rows are there."""
    res = runs["json"]
    matmul = [r for r in res["rows"] if r["row"].endswith("/ matmul") and r["a_ms"] and r["b_ms"]]
    assert matmul
    for r in matmul:
        for side in ("a_throughput", "b_throughput"):
            assert r[side]["tflops"] > 0 and r[side]["peak_share"] > 0, r
        assert sum(r["split"].values()) == pytest.approx(r["diff_ms"], abs=1e-6)
    assert len([s for s in res["shapes"] if s["matched"]]) >= 3, res["shapes"]
    assert res["memory"] and {r["row"] for r in res["memory"]["rows"]} >= {"params", "activations"}
    assert "why:" in runs["output"] and "matmuls by shape" in runs["output"]


def test_the_runs_traces_read_as_files_give_the_same_categories(runs: dict[str, Any]) -> None:
    """A user's trace is read like a run's: the two runs' trace files, fed back to `explain TRACE_A TRACE_B`,
    give each category the same share of its step as explain of the runs (within 5 points)."""
    from twinbench.explain import command

    res = runs["json"]
    files = plain(command.explain_traces(res["a"]["trace_path"], res["b"]["trace_path"]))
    for side in ("a", "b"):
        run, trace = res[side], files[side]
        for phase, cats in run["cells"].items():
            for cat, ms in cats.items():
                if phase == "rest" or cat == "idle":
                    continue  # the trace's own step holds the profiler's overhead; the run's, its measured step
                share_run = ms / run["step_ms"]
                share_file = trace["cells"].get(phase, {}).get(cat, 0.0) / trace["step_ms"]
                assert share_file == pytest.approx(share_run, abs=0.05), (side, phase, cat)
