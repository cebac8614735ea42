"""`twinbench claims`: selection, the shared run plan, one-line errors, and one small end-to-end run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from twinbench.claims.core import Setup, select
from twinbench.claims.suite import plan
from twinbench.record import read_jsonl
from twinbench.spec import SpecError


def twinbench(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "twinbench.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_only_selects_in_the_given_order_and_ignores_case_and_repeats():
    assert [c.id for c in select("c7, C1,C7")] == ["C7", "C1"]
    assert len(select(None)) == 22


def test_unknown_claim_is_a_spec_error_naming_the_allowed_ids():
    with pytest.raises(SpecError, match=r"--only: unknown claim C99; allowed: C1, C2"):
        select("C1,C99")


@pytest.mark.parametrize("args, needle", [(["--only", "C99"], "--only: unknown claim C99"),
                                          (["--preset", "huge"], "--preset: unknown GPT preset 'huge'"),
                                          (["--repeats", "0"], "--repeats must be a positive integer, got 0")])
def test_bad_flags_exit_2_with_one_line(args, needle, tmp_path):
    p = twinbench("claims", "--quick", *args, "--out", str(tmp_path / "o"))
    assert p.returncode == 2
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in p.stderr
    assert not (tmp_path / "o").exists()  # nothing ran


def test_runs_shared_between_claims_are_planned_once():
    claims = select(None)
    per_claim, specs = plan(claims, Setup(quick=True, gpt="tiny"))
    named = [s.run_id() for runs in per_claim.values() for s in runs.values()]
    assert len(specs) == len(set(named)) < len(named)  # C3/C18, C2/C5, C6/C7, ... share runs
    c3, c18 = per_claim["C3"], per_claim["C18"]
    assert c3["dynamic"].run_id() == c18["dynamic"].run_id()
    assert sum(s.strategy.base == "compile" for s in specs) <= 2  # --quick: few cold torch.compile runs
    assert all(per_claim[c.id] or c.probes for c in claims if c.id not in ("C14", "C20"))  # not measurable here


def test_quick_uses_the_tiny_presets_and_full_mode_larger_ones():
    _, quick = plan(select(None), Setup(quick=True, gpt="tiny"))
    _, full = plan(select(None), Setup(quick=False, gpt="small"))
    assert {s.preset for s in quick} == {"tiny", "small", "bert-tiny"}
    assert "gpt2-124m" in {s.preset for s in full} and len(full) > len(quick)


def test_quick_on_a_cpu_plans_every_claim_within_the_budget():
    from twinbench.claims.suite import estimate_s, schedule

    claims = select(None)
    setup = Setup(quick=True, gpt="tiny", platform="cpu")
    per_claim, specs = plan(claims, setup)
    rounds = schedule(claims, per_claim, specs, 3)
    assert len(rounds) == 3 and all(len(r) == len(rounds[1]) for r in rounds[1:])
    assert per_claim["C20"] == {} and per_claim["C14"] == {}  # not measurable here: nothing runs for them
    probes = len({p for c in claims for p in c.probes})
    assert estimate_s(rounds, probes) <= 15 * 60  # the --quick budget: 15 min on an idle 2-core CPU
    assert sum(s.strategy.base == "compile" for s in specs) == 1  # one cold torch.compile configuration


@pytest.mark.slow
def test_claims_end_to_end_writes_verdicts_json_and_report(tmp_path):
    out, js = tmp_path / "claims", tmp_path / "v.json"
    p = twinbench("claims", "--quick", "--only", "C11,C13,C21", "--repeats", "2", "--out", str(out),
                  "--json", str(js))
    assert p.returncode == 0, p.stderr[-2000:]
    results = json.loads(js.read_text())
    assert json.loads((out / "claims.json").read_text()) == results
    assert [r["claim"] for r in results] == ["C11", "C13", "C21"]
    for r in results:
        assert set(r) >= {"claim", "verdict", "rule", "numbers", "runs", "finding", "caveat", "repeats"}
        assert r["verdict"] in ("supported", "contradicted", "depends", "inconclusive"), r["finding"]
        assert r["numbers"] and r["rule"]
    c11, c13, c21 = results
    records = {rec["run_id"]: rec for rec in read_jsonl(out / "results.jsonl")}
    again = {rec["config_id"]: rec for rec in read_jsonl(out / "repeats" / "2" / "results.jsonl")}
    assert set(records) == set(c11["runs"]) | set(c13["runs"]) and all(r["status"] == "ok" for r in records.values())
    assert set(again) == set(c11["runs"])  # only the timed claim's runs are repeated (compare --repeats' mechanism)
    assert {r["repeat"] for r in again.values()} == {1} and not set(again) & {r["run_id"] for r in again.values()}
    assert c11["repeats"] == 2 and c11["numbers"]["mesh_vs_pmap_range"] and "share this machine's" in c11["caveat"]
    assert c13["repeats"] == 1 and c13["numbers"]["nosync_replicas_max_abs_diff"] > 0
    assert c21["runs"] == [] and c21["numbers"]["jit_debug_prints"] == c21["numbers"]["calls"] == 5
    for r in results:
        assert f"{r['claim']} " in p.stdout and r["verdict"] in p.stdout
    assert "3 verdicts" in p.stdout and "repeat 2 of 2" in p.stdout
    assert "C21" in (out / "report.html").read_text() and "C11" in (out / "report.md").read_text()


def test_a_probe_that_cannot_finish_gives_not_measurable_and_exit_1(tmp_path):
    out = tmp_path / "c"
    p = twinbench("claims", "--quick", "--only", "C21", "--timeout", "0.01", "--out", str(out))
    assert p.returncode == 1, p.stderr[-2000:]
    (result,) = json.loads((out / "claims.json").read_text())
    assert result["verdict"] == "not measurable" and "timed out" in result["finding"]


@pytest.mark.slow
def test_c22_on_a_cpu_measures_torchax_against_jit_and_gives_a_verdict(tmp_path):
    """No accelerator: the PyTorch path is jax:torchax (the TPU path) on the tiny GPT, against jax:jit."""
    js = tmp_path / "v.json"
    p = twinbench("claims", "--quick", "--only", "C22", "--repeats", "1", "--out", str(tmp_path / "c"),
                  "--json", str(js))
    assert p.returncode == 0, p.stderr[-2000:]
    (r,) = json.loads(js.read_text())
    assert r["verdict"] in ("supported", "contradicted", "depends"), r["finding"]
    nums = r["numbers"]
    assert nums["platform"] == "cpu" and nums["jax_jit_step_ms"] > 0 and nums["jax_torchax_step_ms"] > 0
    assert nums["pytorch_path_vs_jax_jit"] == pytest.approx(nums["jax_torchax_step_ms"] / nums["jax_jit_step_ms"],
                                                            rel=0.02)
    assert "No accelerator here" in r["caveat"]
    records = read_jsonl(tmp_path / "c" / "results.jsonl")
    assert {(x["framework"], x["strategy"]) for x in records} == {("jax", "jit"), ("jax", "torchax")}
    assert all(x["versions"].get("torchax") for x in records if x["strategy"] == "torchax")


def test_a_model_whose_check_fails_leaves_nothing_of_the_claims_run_in_out(tmp_path):
    """claims --model with a model that cannot be built: one line, exit 2, and --out holds no settings (a --resume
    would read them) and none of the preparation's folders."""
    model = tmp_path / "broken.py"
    model.write_text("def build(cfg):\n    raise RuntimeError('no such layer')\n")
    out = tmp_path / "out"
    proc = twinbench("claims", "--only", "C7", "--quick", "--model", f"{model}:build", "--out", str(out))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "raised RuntimeError" in proc.stderr
    left = sorted(p.name for p in out.iterdir()) if out.exists() else []
    assert "claims-settings.json" not in left and "byo" not in left, left
