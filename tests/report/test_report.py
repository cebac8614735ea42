"""report.html / report.md from synthetic records: every plot present, omitted plots explained, bad dirs
rejected in one line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import synthetic
from typer.testing import CliRunner

from twinbench.cli import app
from twinbench.report import page
from twinbench.report.plots import all_plots

ALL_PLOTS = ("cumulative", "step-vs-batch", "step-vs-seq", "compile-vs-depth", "scaling", "dp-payoff", "input-stall", "loss")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def full_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    d = tmp_path_factory.mktemp("full")
    synthetic.write(d, synthetic.full_set(), extra_lines=["{not json", "[1, 2]", '{"framework": "torch"}'])
    (d / "claims.json").write_text(json.dumps([
        {"claim": "C5", "verdict": "depends", "rule": "scan-layers compile <= 0.5x unrolled at 12 layers",
         "numbers": {"unrolled_s": 11.0, "scan_s": 1.7}, "runs": ["abc123def456"]}]))
    html_path, md_path, res = page.write(d, plan_steps=2000)
    assert res.skipped == 3
    return d, html_path.read_text(), md_path.read_text()


def test_every_plot_kind_is_drawn_and_embedded(full_report: tuple[Path, str, str]) -> None:
    d, html, md = full_report
    embedded = re.findall(r'<img data-plot-img="([a-z-]+)"[^>]*src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert sorted(i for i, _ in embedded) == sorted(ALL_PLOTS)
    for _, b64 in embedded:
        import base64

        assert base64.b64decode(b64).startswith(PNG_MAGIC)
    assert "data-plot-omitted" not in html
    for pid in ALL_PLOTS:
        png = d / "plots" / f"{pid}.png"
        assert png.read_bytes().startswith(PNG_MAGIC)
        assert f"(plots/{pid}.png)" in md


def test_page_is_self_contained(full_report: tuple[Path, str, str]) -> None:
    _, html, _ = full_report
    assert not re.search(r'<(script|link|iframe)\b', html)
    assert not re.search(r'\b(src|href)="(https?:)?//', html)  # nothing fetched from the network


def test_table_failed_rows_conditions_claims(full_report: tuple[Path, str, str]) -> None:
    _, html, md = full_report
    recs = synthetic.full_set()
    assert html.count("<tr class=\"failed\"") == 1
    assert "CUDA out of memory (synthetic)" in html and "CUDA out of memory (synthetic)" in md
    assert html.count("<tr") == len(recs) + 1 + 1 + 1  # results rows + its header + claims header + row
    assert "FLOPs/token = 6N" in html and "versions:" in html
    assert 'data-section="claims"' in html and "C5" in md and "depends" in md
    assert "3 malformed line(s)" in html
    assert "has the least total wall time up to" in html  # break-even findings, per configuration


def test_plots_without_data_are_omitted_with_a_note(tmp_path: Path) -> None:
    synthetic.write(tmp_path, synthetic.compare_set())
    html_path, md_path, _ = page.write(tmp_path)
    html = html_path.read_text()
    drawn = set(re.findall(r'data-plot="([a-z-]+)"', html))
    omitted = set(re.findall(r'data-plot-omitted="([a-z-]+)"', html))
    assert drawn == {"cumulative", "loss"}
    assert omitted == {"step-vs-batch", "step-vs-seq", "compile-vs-depth", "scaling", "dp-payoff", "input-stall"}
    assert "twinbench sweep --over batch=" in html and "sweep --over devices=" in html
    assert not (tmp_path / "plots" / "scaling.png").exists()
    assert "omitted:" in md_path.read_text()


def test_colour_of_a_framework_is_the_same_in_every_plot() -> None:
    from twinbench.report.plots import PALETTES, Styles

    styles = Styles(synthetic.typed(synthetic.full_set()))
    for lab in ("torch/eager", "torch/compile", "torch/ddp"):
        assert styles.color(lab) in PALETTES["torch"]
    for lab in ("jax/jit", "jax/scan-layers", "jax/mesh-dp"):
        assert styles.color(lab) in PALETTES["jax"]
    assert len({styles.color(x) for x in ("jax/jit", "jax/scan-layers", "jax/mesh-dp")}) == 3


def test_break_even_is_marked_where_the_fastest_run_changes() -> None:
    from twinbench.report.breakeven import total_s
    from twinbench.report.plots import _leader, leader_changes

    recs = synthetic.typed(synthetic.compare_set())
    eager, compile_, jit, _ = recs
    assert _leader(recs, 1) is eager  # no compile: fastest start
    assert _leader(recs, 1e6) is jit  # fastest steady step wins a long run
    changes = leader_changes(recs)
    assert [(a.run.strategy, b.run.strategy) for _, a, b in changes] == [("eager", "scan-layers"),
                                                                       ("scan-layers", "jit")]
    for n, a, b in changes:  # at each change both totals are equal, and the newcomer leads after it
        assert total_s(a, n) == pytest.approx(total_s(b, n), rel=1e-9)
        assert _leader(recs, n * 0.99) is a and _leader(recs, n * 1.01) is b
    assert compile_ not in [b for _, _, b in changes]  # compiles longest, never the fastest choice
    assert len(all_plots(recs, 1000)) == len(ALL_PLOTS)


def test_bad_directories_end_in_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(app, ["report", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "no such results directory" in missing.output
    empty = runner.invoke(app, ["report", str(tmp_path)])
    assert empty.exit_code == 2 and "no results.jsonl" in empty.output
    (tmp_path / "results.jsonl").write_text("garbage\n{\"a\": 1}\n")
    bad = runner.invoke(app, ["report", str(tmp_path)])
    assert bad.exit_code == 2 and "no valid record (2 malformed" in bad.output
    assert "Traceback" not in bad.output and len(bad.output.strip().splitlines()) == 1


def test_report_command_warns_of_skipped_lines(tmp_path: Path) -> None:
    synthetic.write(tmp_path, synthetic.compare_set(), extra_lines=["{torn"])
    result = CliRunner().invoke(app, ["report", str(tmp_path), "--plan-steps", "500"])
    assert result.exit_code == 0, result.output
    assert "skipped 1 malformed line" in result.output
    assert (tmp_path / "report.html").exists() and (tmp_path / "report.md").exists()


def test_warm_cache_runs_are_told_apart() -> None:
    from twinbench.report.plots import Styles, label

    cold, warm = synthetic.typed([synthetic.record("jax", "jit"), synthetic.record("jax", "jit", compile_cache="warm")])
    assert (label(cold), label(warm)) == ("jax/jit", "jax/jit warm")
    styles = Styles([cold, warm])
    assert styles.color("jax/jit") != styles.color("jax/jit warm")


def test_break_evens_are_said_once_for_repeated_runs() -> None:
    """Three repeats of torch/eager and jax/jit: one break-even sentence, from each configuration's median
    repeat (not one per repeat)."""
    from twinbench.report.table import crossings, median_repeats, varying

    recs = []
    for i, scale in enumerate((1.0, 1.3, 0.9)):
        for fw, st in (("torch", "eager"), ("jax", "jit")):
            r = synthetic.record(fw, st)
            recs.append(r | {"repeat": i, "step_ms": r["step_ms"] * scale})
    recs = synthetic.typed(recs)
    lines = crossings(recs)
    assert len(lines) == 1 and "repeat" not in lines[0] and "jax/jit" in lines[0], lines
    medians = median_repeats(recs, varying(recs))
    assert sorted(r.run.repeat for r in medians) == [0, 0]  # scale 1.0 is the median of 0.9, 1.0, 1.3
    assert crossings(medians) == lines


def test_a_port_that_failed_its_parity_check_is_said_next_to_the_numbers() -> None:
    """The parity section is typed (record_sections.Parity): a failed check names the leaves that differ most,
    a trajectory that left torch eager's says so, a passing one says nothing."""
    from twinbench.record import typed

    bad = synthetic.record("jax", "jit", parity={"ok": False, "grad_worst": [["blocks.0.mlp", 0.5]]})
    drift = synthetic.record("jax", "jit", parity={"ok": True, "trajectory": {"ok": False, "steps": 4}})
    fine = synthetic.record("jax", "jit", parity={"ok": True})
    notes = page._parity_notes(page.Results(Path("."), typed([bad, drift, fine])))
    assert len(notes) == 2
    assert "parity MISMATCH" in notes[0] and "blocks.0.mlp" in notes[0]
    assert "losses differ from torch eager's" in notes[1]
