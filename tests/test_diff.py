"""twinbench diff: the statistics on synthetic samples, matching, the CI gate, bad input."""

from __future__ import annotations

import json
import math
import random

import pytest
from typer.testing import CliRunner

from twinbench import diff
from twinbench.cli import app
from twinbench.record import as_record

#: The spread of real CPU step times: torch/eager on `small`, an idle 2-core EPYC (the README's demo record):
#: p10-p90 154.2-172.7 ms within one run, and medians 154-173 ms across three processes of one sitting.
STEP_MS, P10, P90 = 158.8, 154.2, 172.7
WITHIN_SIGMA = math.log(P90 / P10) / (2 * 1.2816)  # lognormal sigma whose p10-p90 is that range
BETWEEN_SIGMA = math.log(173 / 154) / 1.6926  # the expected range of three normal draws is 1.69 sigma
#: eight repeats a side: with that drift (~7% between processes) they find a 15% change in > 90% of trials
REPEATS, STEPS = 8, 25


def _repeat(rng: random.Random, center: float) -> list[float]:
    """The steady step times of one process: its own level (host drift), then correlated per-step noise."""
    level = center * math.exp(rng.gauss(0, BETWEEN_SIGMA))
    return [level * math.exp(rng.gauss(0, WITHIN_SIGMA)) for _ in range(STEPS)]


def _medians(rng: random.Random, center: float, n: int = REPEATS) -> list[float]:
    return [sorted(s)[STEPS // 2] for s in (_repeat(rng, center) for _ in range(n))]


def test_identical_distributions_give_no_change_in_at_least_90_of_100():
    rng = random.Random(0)
    verdicts = [diff.ratio_interval(_medians(rng, STEP_MS), _medians(rng, STEP_MS)).verdict() for _ in range(100)]
    assert verdicts.count(diff.SAME) >= 90


def test_a_15_percent_slowdown_is_found_slower_in_at_least_90_of_100():
    rng = random.Random(1)
    verdicts = [diff.ratio_interval(_medians(rng, STEP_MS), _medians(rng, STEP_MS * 1.15)).verdict()
                for _ in range(100)]
    assert verdicts.count(diff.SLOWER) >= 90
    faster = [diff.ratio_interval(_medians(rng, STEP_MS), _medians(rng, STEP_MS / 1.15)).verdict() for _ in range(100)]
    assert faster.count(diff.FASTER) >= 90


def test_pooled_steps_would_call_drift_a_regression():
    """Why the repeat is the unit: a t interval over pooled steps of identical code flags most drift."""
    from scipy import stats

    rng = random.Random(2)
    flagged = 0
    for _ in range(100):
        a = [x for _ in range(REPEATS) for x in _repeat(rng, STEP_MS)]
        b = [x for _ in range(REPEATS) for x in _repeat(rng, STEP_MS)]
        ci = stats.ttest_ind([math.log(x) for x in b], [math.log(x) for x in a], equal_var=False).confidence_interval()
        flagged += ci.low > 0 or ci.high < 0
    repeats_flagged = sum(diff.ratio_interval(_medians(rng, STEP_MS), _medians(rng, STEP_MS)).verdict() != diff.SAME
                          for _ in range(100))
    assert flagged > 3 * max(repeats_flagged, 1)


def test_interval_on_a_known_case():
    """log medians OLD = [0, 0.2], NEW = [0.1, 0.3] (x100 ms): difference 0.1, variances 0.02, so the Welch
    standard error is sqrt(0.02/2 + 0.02/2) and the degrees of freedom 2."""
    old = [100.0, 100 * math.exp(0.2)]
    new = [100 * math.exp(0.1), 100 * math.exp(0.3)]
    iv = diff.ratio_interval(old, new)
    t = 4.302652729911275  # scipy.stats.t.ppf(0.975, 2)
    assert iv.ratio == pytest.approx(math.exp(0.1))
    se = math.sqrt(0.02)
    assert (iv.low, iv.high) == pytest.approx((math.exp(0.1 - t * se), math.exp(0.1 + t * se)))
    assert iv.verdict() == diff.SAME
    one = diff.ratio_interval([100.0], [130.0])
    assert one.low is None and one.verdict() == diff.SINGLE and one.ratio == pytest.approx(1.3)


def _record(strategy: str, medians_ms: list[float], repeat: int, **extra) -> dict:
    rng = random.Random(hash((strategy, repeat)) & 0xFFFF)
    times = [medians_ms[repeat] * math.exp(rng.gauss(0, 0.01)) for _ in range(9)]
    times[4] = medians_ms[repeat]
    times.sort()
    rec = {"framework": strategy.split("/")[0], "strategy": strategy.split("/")[1], "status": "ok", "preset": "small",
           "layers": 4, "d_model": 256, "heads": 4, "vocab": 256, "context": 128, "batch": 8, "seq": 128,
           "precision": "fp32", "device_count": 1, "task": "lm", "step_ms": medians_ms[repeat],
           "step_times_ms": times, "repeat": repeat, "step_ms_p10": times[1], "step_ms_p90": times[-2],
           "tokens_per_s": 1024 / medians_ms[repeat] * 1e3, "achieved_tflops": 0.1, "compiles_during_steps": 0,
           "loss_first": 5.5, "loss_last": 2.8, "steps": 30, "warmup": 5, "n_params": 3_260_000, "device": "cpu", "losses": [5.5, 4.0, 2.8], "compile_s": 2.0,
           "first_step_s": 2.5, "peak_mem_bytes": 600 << 20, "mfu": 0.45, "threads": 2,
           "versions": {"jax": "0.10.2"}, "run_id": f"{strategy}{repeat}"}
    return rec | extra


def _write(path, records):
    path.mkdir()
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture
def sittings(tmp_path):
    same = [150.0, 160.0, 155.0]
    old = _write(tmp_path / "old", [_record(s, same, k) for k in range(3) for s in ("torch/eager", "jax/jit")])
    new_same = _write(tmp_path / "same", [_record(s, [152.0, 158.0, 156.0], k)
                                          for k in range(3) for s in ("torch/eager", "jax/jit")])
    slow = [_record("torch/eager", [x * 1.5 for x in same], k, threads=1) for k in range(3)]
    new_slow = _write(tmp_path / "slow", slow + [_record("jax/jit", same, k) for k in range(3)]
                      + [_record("jax/naive", same, 0)])
    return old, new_same, new_slow


def test_cli_gate_and_table(sittings, tmp_path):
    old, same, slow = sittings
    runner = CliRunner()
    ok = runner.invoke(app, ["diff", str(old), str(same), "--fail-above", "5"])
    assert ok.exit_code == 0, ok.output
    assert ok.output.count(diff.SAME) == 2 and "Welch" in ok.output
    bad = runner.invoke(app, ["diff", str(old), str(slow), "--fail-above", "5", "--json", str(tmp_path / "d.json")])
    assert bad.exit_code == 1, bad.output
    assert "FAIL: torch/eager" in bad.output and "only in NEW (not compared): jax/naive" in bad.output
    assert "threads: 2 -> 1, 2" in bad.output  # the conditions that differ, under the table
    d = json.loads((tmp_path / "d.json").read_text())
    verdicts = {p["run"].split(" ")[0]: p["verdict"] for p in d["pairs"]}
    assert verdicts == {"torch/eager": diff.SLOWER, "jax/jit": diff.SAME}
    assert runner.invoke(app, ["diff", str(old), str(slow), "--fail-above", "60"]).exit_code == 0


def test_changed_loss_trajectory_is_flagged():
    old = [_record("torch/eager", [150.0, 151.0], k) for k in range(2)]
    new = [_record("torch/eager", [150.0, 151.0], k, losses=[5.5, 4.1, 2.9]) for k in range(2)]
    d = diff.diff([as_record(r) for r in old], [as_record(r) for r in new])
    assert d.pairs[0].losses_agree is False
    assert any("did not compute the same thing" in x for x in diff.lines(d))


@pytest.mark.parametrize(("setup", "message"), [
    ("missing", "no such results directory or file"),
    ("empty_dir", "no results.jsonl there"),
    ("not_twinbench", "no twinbench records in it"),
    ("other_shapes", "no run of OLD matches a run of NEW"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, sittings, setup, message):
    old = sittings[0]
    if setup == "missing":
        other = tmp_path / "nope"
    elif setup == "empty_dir":
        other = tmp_path / "empty"
        other.mkdir()
    elif setup == "not_twinbench":
        other = tmp_path / "x.jsonl"
        other.write_text('{"hello": 1}\n[1, 2]\n')
    else:
        other = _write(tmp_path / "shapes", [_record("torch/eager", [150.0], 0, layers=12)])
    res = CliRunner().invoke(app, ["diff", str(old), str(other)])
    assert res.exit_code == 2 and message in res.output
    assert "Traceback" not in res.output


def test_report_against_adds_the_diff(sittings):
    from twinbench.report.page import write

    old, _, slow = sittings
    html_path, md_path, _res = write(slow, against=old)
    html = html_path.read_text()
    assert "data-section='diff'" in html and "data-plot='diff'" in html.replace('"', "'")
    assert "| torch/eager" in md_path.read_text() and diff.SLOWER in md_path.read_text()


def test_report_and_diff_read_records_of_before_the_sections_beside_new_ones(tmp_path):
    """Flat records (schema version 1, as twinbench wrote them before the sections) and records in sections:
    diff compares one against the other, and report reads a results file holding both."""
    from pathlib import Path

    fixtures = Path(__file__).resolve().parent / "fixtures" / "record_schema"
    old_lines = (fixtures / "results_v1.jsonl").read_text().splitlines()
    new_lines = (fixtures / "results.jsonl").read_text().splitlines()
    assert all("run" not in json.loads(x) for x in old_lines) and all("run" in json.loads(x) for x in new_lines)
    old, new, mixed = tmp_path / "old", tmp_path / "new", tmp_path / "mixed"
    for d, lines in ((old, old_lines), (new, new_lines), (mixed, [old_lines[0], new_lines[1]])):
        d.mkdir()
        (d / "results.jsonl").write_text("\n".join(lines) + "\n")
    runner = CliRunner()
    res = runner.invoke(app, ["diff", str(old), str(new), "--json", str(tmp_path / "d.json")])
    assert res.exit_code == 0, res.output
    pairs = {p["run"].split(" ")[0] for p in json.loads((tmp_path / "d.json").read_text())["pairs"]}
    assert pairs == {"torch/eager", "jax/jit"}  # every run of OLD matched its run in NEW
    rep = runner.invoke(app, ["report", str(mixed)])
    assert rep.exit_code == 0 and "skipped" not in rep.output, rep.output
    md = (mixed / "report.md").read_text()
    assert "torch/eager" in md and "jax/jit" in md and "2 run(s): 2 ok" in md


def test_runs_differing_in_a_strategy_option_are_not_pooled_as_repeats():
    """Two runs that differ only in what +remat keeps are two configurations: diff pairs each with its own (it
    once matched on a list of fields that left the strategy's options out, and pooled them as repeats)."""
    from twinbench.record import for_spec
    from twinbench.spec import from_preset

    def run(policy: str, ms: float):
        spec = from_preset("tiny", {"remat_policy": policy}, framework="jax", strategy="jit+remat")
        return for_spec(spec, "ok", step_ms=ms, step_times_ms=[ms] * 5, first_step_s=1.0)

    d = diff.diff([run("full", 10.0), run("nothing-saveable", 20.0)], [run("full", 10.5)])
    assert [(len(p.old_ms), p.old_ms) for p in d.pairs] == [(1, [10.0])]
    assert d.only_old == ["jax/jit+remat (gpt L2 d64 b4x32 fp32) remat_policy=nothing-saveable"]
