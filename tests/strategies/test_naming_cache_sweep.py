"""Strategy naming, the bf16 rule, scan-steps timing arithmetic, the compile-cache plan and sweep grids.

All in-process and without a framework compile; one end-to-end sweep (4 tiny JAX runs) checks the CLI
wiring: one results file, cold and warm rows, warm runs loading from the persistent cache.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from twinbench import compile_cache
from twinbench.cli import app
from twinbench.measure.clock import Timing, per_step, stack_calls
from twinbench.record import as_record, read_jsonl
from twinbench.spec import SpecError, from_preset, validate, with_precision
from twinbench.strategies import registry
from twinbench.sweep import grid_specs, parse_over, points


def _spec(framework="jax", strategy="jit", **over):
    return from_preset("tiny", over).evolve(framework=framework, strategy=strategy)


# ------------------------------------------------------------------------------------------- naming
def test_every_strategy_and_modifier_is_listed():
    result = CliRunner().invoke(app, ["strategies"])
    assert result.exit_code == 0
    for name in ("compile", "compile-regional", "scan-steps", "scan-layers", "+bf16", "+remat", "+nodonate",
                 "+optc"):
        assert name in result.output, name


def test_all_runs_every_base_and_a_use_of_every_modifier():
    chosen = registry.select(["torch", "jax"], ["all"])
    names = {n for _, n in chosen}
    assert {"eager", "compile", "compile-regional", "naive", "jit", "scan-steps", "scan-layers"} <= names
    used = {m for n in names for m in n.split("+")[1:]}
    assert {"bf16", "remat", "nodonate", "optc"} <= used
    for fw, n in chosen:
        registry.get(fw, n)  # every combination is valid


@pytest.mark.parametrize(("framework", "name", "msg"), [
    ("torch", "eager+nodonate", "modifier 'nodonate' does not apply"),
    ("jax", "jit+optc", "modifier 'optc' does not apply"),
    ("torch", "eager+optc", "modifier 'optc' does not apply"),
    ("jax", "jit+bf16+bf16", "repeated"),
])
def test_modifiers_that_do_not_apply_are_refused(framework, name, msg):
    with pytest.raises(SpecError, match=msg):
        registry.get(framework, name)


def test_precision_flag_and_bf16_modifier_are_one_setting():
    assert with_precision(_spec(strategy="jit+bf16")).train.precision == "bf16"
    assert with_precision(_spec(strategy="jit", precision="bf16")).strategy.name == "jit+bf16"
    assert with_precision(_spec(strategy="jit")).train.precision == "fp32"
    with pytest.raises(SpecError, match="contradicts"):
        validate(_spec(strategy="jit+bf16"))  # built by hand without the rule


def test_torch_remat_policy_is_full_only():
    validate(_spec("jax", "jit+remat", remat_policy="dots-saveable"))
    with pytest.raises(SpecError, match="allowed for torch: full"):
        validate(_spec("torch", "eager+remat", remat_policy="dots-saveable"))
    with pytest.raises(SpecError, match="--remat-policy: unknown value"):
        validate(_spec("jax", "jit+remat", remat_policy="some"))


def test_scan_unroll_must_be_positive():
    assert validate(_spec("jax", "scan-layers", scan_unroll=2)).strategy.scan_unroll == 2
    with pytest.raises(SpecError, match="--scan-unroll must be a positive integer"):
        validate(_spec("jax", "scan-layers", scan_unroll=0))


# -------------------------------------------------------------------------------------- scan-steps timing
def test_stack_calls_and_per_step():
    batches = [(np.full((2, 3), i), np.full((2, 3), -i)) for i in range(6)]
    calls = stack_calls(batches, 3)
    assert len(calls) == 2 and calls[1][0].shape == (3, 2, 3) and calls[1][0][2, 0, 0] == 5
    assert stack_calls(batches, 1) is batches
    t = Timing(first_step_s=10.0, step_s=[0.3, 0.3, 0.6], losses=[1.0] * 12, compiles_during_steps=0,
               compile_s=9.0)
    s = per_step(t, 3)
    assert s.step_s == pytest.approx([0.1, 0.1, 0.2])
    assert s.first_step_s == pytest.approx(10.0 - 2 * 0.1)  # the call minus K-1 median steps


# ------------------------------------------------------------------------------------------ caches
def test_worker_env_points_every_cache_into_the_directory(tmp_path):
    env = compile_cache.worker_env(tmp_path)
    for var in ("JAX_COMPILATION_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "CUDA_CACHE_PATH"):
        assert env[var].startswith(str(tmp_path)), var
    assert env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"
    assert env["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] == "-1"


def test_apply_without_a_directory_uses_a_fresh_private_one(monkeypatch):
    for var in compile_cache.worker_env("/x"):
        monkeypatch.delenv(var, raising=False)
    used = compile_cache.apply(_spec())
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"].startswith(used) and not os.listdir(used)


class FakeRuns:
    """Stands in for the runner's subprocess: records which cache directory each run saw, and fills it."""

    def __init__(self):
        self.seen = []

    def __call__(self, spec):
        d = Path(spec.host.cache_dir)
        self.seen.append((spec.host.compile_cache, d, sorted(p.name for p in d.iterdir() if p.name != ".primed")))
        (d / f"program-{spec.strategy.name}").write_text("compiled")
        return as_record({"status": "ok", "compile_cache": spec.host.compile_cache, "run_id": spec.run_id()})


def test_both_runs_cold_on_an_empty_cache_then_warm_on_the_same(tmp_path):
    specs = compile_cache.expand([_spec(strategy="jit"), _spec(strategy="scan-steps")], "both", tmp_path)
    assert [s.host.compile_cache for s in specs] == ["cold", "warm", "cold", "warm"]
    plan, runs = compile_cache.CachePlan(specs), FakeRuns()
    for s in specs:
        plan.run(s, runs)
    plan.close()
    (c1, d1, f1), (w1, d2, f2), (c2, d3, f3), (w2, d4, _) = runs.seen
    assert (c1, w1, c2, w2) == ("cold", "warm", "cold", "warm")
    assert f1 == [] and f3 == [], "a cold run must start on an empty cache"
    assert d1 == d2 and f2 == ["program-jit"], "the warm run reuses its cold twin's cache"
    assert d3 != d1 and d3 == d4
    assert list(tmp_path.iterdir()) == [], "cold directories are removed afterwards"


def test_warm_alone_primes_the_persistent_cache_once(tmp_path):
    spec = compile_cache.expand([_spec()], "warm", tmp_path)[0]
    runs = compile_cache.CachePlan([spec]), FakeRuns()
    plan, fake = runs
    record = plan.run(spec, fake)
    assert [c for c, _, _ in fake.seen] == ["cold", "warm"]  # an unrecorded priming run, then the measured one
    assert record.run.compile_cache == "warm" and fake.seen[1][1] == tmp_path / "warm"
    compile_cache.CachePlan([spec]).run(spec, fake)  # a later compare: already primed
    assert [c for c, _, _ in fake.seen] == ["cold", "warm", "warm"]


def test_unknown_cache_mode_is_a_one_line_error():
    result = CliRunner().invoke(app, ["compare", "--preset", "tiny", "--cache", "lukewarm"])
    assert result.exit_code == 2 and "--cache: unknown value 'lukewarm'; allowed: cold, warm, both" in result.output


# ------------------------------------------------------------------------------------------- sweeps
def test_parse_over_and_grid():
    axes = parse_over(["layers=2,4", "d-model=32,64", "lr=1e-3"])
    assert axes == [("layers", [2, 4]), ("d_model", [32, 64]), ("lr", [1e-3])]
    assert points(axes)[:2] == [{"layers": 2, "d_model": 32, "lr": 1e-3}, {"layers": 2, "d_model": 64, "lr": 1e-3}]
    assert len(points(axes)) == 4


@pytest.mark.parametrize(("over", "msg"), [
    (["depth=2,4"], "--over: unknown field 'depth'; allowed: layers"),
    (["layers=2,x"], "--over layers: 'x' is not a valid int"),
    (["layers"], "expected FIELD=V1,V2"),
    (["layers=2", "layers=4"], "given twice"),
])
def test_parse_over_errors(over, msg):
    with pytest.raises(SpecError, match=msg):
        parse_over(over)


def test_grid_point_errors_name_the_point():
    def build(o):
        return [validate(from_preset("tiny", o))]

    with pytest.raises(SpecError, match="at sweep point heads=3: --heads 3 does not divide"):
        grid_specs(parse_over(["heads=2,3"]), {}, build)
    with pytest.raises(SpecError, match="both given"):
        grid_specs(parse_over(["layers=2"]), {"layers": 3}, build)


def test_sweep_bad_over_exits_2_with_one_line():
    result = CliRunner().invoke(app, ["sweep", "--preset", "tiny", "--over", "depth=1,2"])
    assert result.exit_code == 2
    assert "unknown field 'depth'" in result.output and "Traceback" not in result.output


@pytest.mark.slow  # four runs, each in its own process
def test_sweep_with_cold_and_warm_caches_end_to_end(tmp_path):
    out, cache = tmp_path / "out", tmp_path / "cache"
    result = CliRunner().invoke(app, [
        "sweep", "--preset", "tiny", "--framework", "jax", "--strategies", "jit", "--over", "layers=1,2",
        "--steps", "4", "--warmup", "1", "--cache", "both", "--cache-dir", str(cache), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "run 2/4 jax/jit layers=1 warm (tiny): ok" in result.output, result.output  # named as its row is
    records = read_jsonl(out / "results.jsonl")  # the flat view of each record
    assert [(r["layers"], r["compile_cache"], r["status"]) for r in records] == [
        (1, "cold", "ok"), (1, "warm", "ok"), (2, "cold", "ok"), (2, "warm", "ok")]
    cold, warm = records[0], records[1]
    assert cold["compile_cache_hits"] == 0
    assert warm["compile_cache_hits"] >= 1, "the warm run must load programs from the persistent cache"
    # the loads are of the run's own programs, counted as compiles_total counts them (not the probes' after them)
    assert all(r["compile_cache_hits"] <= r["compiles_total"] for r in records), [
        (r["compile_cache_hits"], r["compiles_total"]) for r in records]
    assert warm["losses"] == cold["losses"]
    summary = (out / "summary.md").read_text()
    assert "jax/jit layers=1 cold" in summary and "jax/jit layers=2 warm" in summary  # rows tell points apart
    assert not any(cache.glob("cold-*")), "cold cache directories are removed after the runs"
