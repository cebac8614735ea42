"""Every claim's verdict rule on synthetic records: each rule can come out supported, contradicted or depends
(or the two outcomes it has), and the numbers it reports are the ones it was given."""

from __future__ import annotations

from typing import Any

import pytest

from twinbench.claims.core import CONTRADICTED, DEPENDS, NOT_MEASURABLE, SUPPORTED, Evidence, Setup, load_all
from twinbench.claims.suite import plan, verdicts

CLAIMS = load_all()
SETUP = Setup(quick=True, gpt="tiny")


def rec(step_ms: float = 10.0, **kw: Any) -> dict[str, Any]:
    base = {"status": "ok", "framework": "jax", "strategy": "jit", "step_ms": step_ms, "first_step_s": 1.0,
            "compile_s": 0.9, "wall_s": None, "steps": 10, "batch": 4, "seq": 32, "layers": 2, "d_model": 64,
            "loss_first": 5.0, "loss_last": 4.0, "platform": "cpu", "n_params": 100_000, "flops_per_token": 1000,
            "device_count": 1, "warnings": [], "sharding": {}, "peak_mem_bytes": 100 * 2**20,
            "peak_mem_source": "process peak RSS", "compiles_in_loop": 1, "distinct_lengths": 1,
            "input_stall_pct": 0.0, "input_wait_ms": 0.0, "pad_pct": 0.3}
    return base | kw


def judge(cid: str, records: dict[str, dict[str, Any]] | None = None, probes: dict | None = None,
          setup: Setup = SETUP) -> str:
    return CLAIMS[cid].judge(Evidence(setup, records or {}, probes or {})).verdict


def test_all_21_claims_registered_with_a_rule_and_a_statement():
    assert list(CLAIMS) == [f"C{i}" for i in range(1, 22)]
    for c in CLAIMS.values():
        assert c.rule and c.statement and c.group


def test_c1_slower_loop_with_slower_steps_supports_faster_steps_depends_faster_loop_contradicts():
    t = rec(step_ms=10, wall_s=1.0, framework="torch", strategy="eager+dynamic")
    jit = rec(wall_s=5.0)
    assert judge("C1", {"torch": t, "jax_naive": rec(step_ms=12, wall_s=2.0), "jax_jit": jit}) == SUPPORTED
    v = CLAIMS["C1"].judge(Evidence(SETUP, {"torch": t, "jax_naive": rec(step_ms=5, wall_s=2.0), "jax_jit": jit}))
    assert v.verdict == DEPENDS and v.numbers["break_even_steps"] == pytest.approx(1.05 / 0.005, rel=0.01)
    assert judge("C1", {"torch": t, "jax_naive": rec(step_ms=5, wall_s=0.8), "jax_jit": jit}) == CONTRADICTED


def test_c2_overtake_within_plan_supports_beyond_plan_depends_slower_steps_contradict():
    t = rec(step_ms=10, first_step_s=0.1, framework="torch", strategy="eager")
    fast = {"torch": t, "jit": rec(step_ms=5, first_step_s=2.0), "scan": rec(step_ms=6, strategy="scan-steps")}
    assert judge("C2", fast) == SUPPORTED
    slow_compile = fast | {"jit": rec(step_ms=9.99, first_step_s=500.0), "scan": rec(step_ms=9.995, first_step_s=500)}
    assert judge("C2", slow_compile) == DEPENDS
    assert judge("C2", fast | {"jit": rec(step_ms=11), "scan": rec(step_ms=12)}) == CONTRADICTED


TRACING = {"status": "ok", "python_if_on_traced_value": "TracerBoolConversionError", "static_hyperparameter_traces": 3,
           "hyperparameter_values": 3, "traced_hyperparameter_traces": 1, "unpadded_traces": 4, "padded_traces": 1}


def test_c3_probe_and_compile_counts():
    runs = {"pad_max": rec(compiles_in_loop=1), "bucket": rec(compiles_in_loop=3),
            "dynamic": rec(compiles_in_loop=9, distinct_lengths=9)}
    assert judge("C3", runs, {"tracing": TRACING}) == SUPPORTED
    assert judge("C3", runs, {"tracing": TRACING | {"python_if_on_traced_value": "ran"}}) == CONTRADICTED
    assert judge("C3", runs | {"pad_max": rec(compiles_in_loop=2)}, {"tracing": TRACING}) == DEPENDS
    doctor = {"status": "ok", "available": True, "finding_ids": ["script-error"], "flagged": False}
    assert judge("C3", runs, {"tracing": TRACING, "doctor_control_flow": doctor}) == DEPENDS  # doctor blind
    doctor |= {"finding_ids": ["jax-python-control-flow"], "flagged": True}
    assert judge("C3", runs, {"tracing": TRACING, "doctor_control_flow": doctor}) == SUPPORTED


def test_c4_compile_share_at_short_and_planned_run():
    def runs(compile_s: float) -> dict:
        return {"jit_lo": rec(compile_s=1.0), "jit_hi": rec(compile_s=compile_s, layers=6, step_ms=10),
                "scan_lo": rec(compile_s=1.0), "scan_hi": rec(compile_s=1.1, layers=6)}
    assert judge("C4", runs(100.0)) == SUPPORTED  # 100 s vs 200 s of steps at 20000 steps: 33 %
    assert judge("C4", runs(1.0 + 1e-9)) == CONTRADICTED  # 1 s vs 10 s at 1000 steps: 9 %
    v = CLAIMS["C4"].judge(Evidence(SETUP, runs(5.0)))  # 33 % at 1000 steps, 2.4 % at 20000
    assert v.verdict == DEPENDS and v.numbers["steps_where_share_drops_below_10pct"] == 4500
    assert v.numbers["jit_compile_s_per_layer"] == 1.0


def test_c5_crossing_or_domination():
    e = rec(step_ms=10, first_step_s=0.1, framework="torch", strategy="eager")
    assert judge("C5", {"eager": e, "jit": rec(step_ms=5, first_step_s=2), "scan": rec(step_ms=5, first_step_s=2,
                                                                                       strategy="scan-steps")}) == SUPPORTED
    assert judge("C5", {"eager": e, "jit": rec(step_ms=11), "scan": rec(step_ms=12, strategy="scan-steps")}) == CONTRADICTED
    far = rec(step_ms=9.9999, first_step_s=1e4)
    assert judge("C5", {"eager": e, "jit": far, "scan": far | {"strategy": "scan-steps"}}) == DEPENDS


def test_c6_gap_closed():
    e, j = rec(step_ms=20, framework="torch", strategy="eager"), rec(step_ms=10)
    assert judge("C6", {"eager": e, "jit": j, "compile": rec(step_ms=12, strategy="compile")}) == SUPPORTED
    assert judge("C6", {"eager": e, "jit": j, "compile": rec(step_ms=17, strategy="compile")}) == DEPENDS
    assert judge("C6", {"eager": e, "jit": j, "compile": rec(step_ms=21, strategy="compile")}) == CONTRADICTED
    assert judge("C6", {"eager": e, "jit": rec(step_ms=25), "compile": rec(step_ms=12)}) == DEPENDS  # no gap


def test_c7_advantage_thresholds():
    t = {"eager": rec(step_ms=12, strategy="eager"), "compile": rec(step_ms=13, strategy="compile")}
    assert judge("C7", t | {"jit": rec(step_ms=10)}) == SUPPORTED  # 20 %
    assert judge("C7", t | {"jit": rec(step_ms=11)}) == DEPENDS  # 9 %
    assert judge("C7", t | {"jit": rec(step_ms=12.5)}) == CONTRADICTED


def c8_records(speedups: list[float]) -> dict:
    from twinbench.claims.speed import points

    out = {}
    for (name, _, _), sp, b in zip(points(SETUP), speedups, (4, 32, 64), strict=True):
        out[f"eager@{name}"] = rec(step_ms=10 * sp, batch=b, framework="torch", strategy="eager")
        out[f"jit@{name}"] = rec(step_ms=10, batch=b)
    return out


def test_c8_advantage_only_at_larger_sizes():
    assert len(c8_records([1, 1, 1])) == 6  # tiny b4, tiny b32, small b8
    assert judge("C8", c8_records([0.8, 1.0, 1.3])) == SUPPORTED
    assert judge("C8", c8_records([1.2, 1.3, 1.4])) == CONTRADICTED
    assert judge("C8", c8_records([0.5, 0.7, 0.9])) == DEPENDS


def test_c9_bf16_saving_per_framework():
    def runs(t16: float, j16: float) -> dict:
        return {"torch": rec(step_ms=10), "torch_bf16": rec(step_ms=t16), "jax": rec(step_ms=10),
                "jax_bf16": rec(step_ms=j16)}
    assert judge("C9", runs(7, 8)) == SUPPORTED
    assert judge("C9", runs(15, 12)) == CONTRADICTED
    assert judge("C9", runs(7, 12)) == DEPENDS
    assert "no bf16 tensor cores" in CLAIMS["C9"].judge(Evidence(SETUP, runs(15, 12))).caveat


def test_c10_replicated_batch():
    warn = ["batch x (4, 32) is replicated on all 2 devices: every device computes the whole batch"]
    assert judge("C10", {"split": rec(10), "replicated": rec(19, warnings=warn)}) == SUPPORTED
    assert judge("C10", {"split": rec(10), "replicated": rec(5, warnings=warn)}) == CONTRADICTED
    assert judge("C10", {"split": rec(10), "replicated": rec(19)}) == DEPENDS
    v = CLAIMS["C10"].judge(Evidence(SETUP, {"split": rec(10, device_count=2), "replicated": rec(19, warnings=warn)}))
    assert "share this machine's" in v.caveat


def test_c11_mesh_vs_pmap():
    assert judge("C11", {"mesh": rec(10), "pmap": rec(10)}) == SUPPORTED
    assert judge("C11", {"mesh": rec(12), "pmap": rec(10)}) == DEPENDS
    assert judge("C11", {"mesh": rec(10, loss_last=3.0), "pmap": rec(10)}) == CONTRADICTED


def test_c12_efficiency_against_per_device_batch():
    def runs(eff_lo: float, eff_hi: float) -> dict:
        return {"one@2": rec(10), "two@2": rec(10 / eff_lo), "one@16": rec(40), "two@16": rec(40 / eff_hi)}
    assert judge("C12", runs(0.4, 0.8)) == SUPPORTED
    assert judge("C12", runs(0.8, 0.7)) == CONTRADICTED
    assert judge("C12", runs(0.8, 0.85)) == DEPENDS


def test_c13_replica_divergence():
    def pm(diff: float) -> dict:
        return rec(sharding={"replicas_max_abs_diff": diff})
    assert judge("C13", {"sync": pm(0.0), "nosync": pm(0.01)}) == SUPPORTED
    assert judge("C13", {"sync": pm(0.0), "nosync": pm(0.0)}) == CONTRADICTED
    assert judge("C13", {"sync": pm(0.01), "nosync": pm(0.01)}) == DEPENDS


def test_c14_counts_the_real_strategy_sources(monkeypatch):
    from twinbench.claims import multidevice

    runs = {"ddp": rec(10, framework="torch", strategy="ddp"), "mesh": rec(10, strategy="mesh-dp")}
    v = CLAIMS["C14"].judge(Evidence(SETUP, runs))
    assert v.numbers["jax_mesh_statements"] > 10 and v.numbers["torch_ddp_statements"] > 10
    assert v.verdict in (DEPENDS, CONTRADICTED) and "maturity" in v.caveat
    monkeypatch.setattr(multidevice, "statements", lambda path: 300 if path.name == "jax_mesh.py" else 100)
    assert CLAIMS["C14"].judge(Evidence(SETUP, runs)).verdict == CONTRADICTED  # JAX code longer: not cleaner
    monkeypatch.setattr(multidevice, "statements", lambda path: 50 if path.name == "jax_mesh.py" else 100)
    assert CLAIMS["C14"].judge(Evidence(SETUP, runs)).verdict == DEPENDS  # cleaner; maturity not measurable


def test_c15_c16_input_stall():
    def runs(base: float, slow: float, pre: float) -> dict:
        return {"jax": rec(input_stall_pct=base * 100), "jax_slow": rec(input_stall_pct=slow * 100),
                "jax_slow_prefetch": rec(input_stall_pct=pre * 100)}  # the record holds percent
    assert judge("C15", runs(0.3, 0.8, 0.1)) == SUPPORTED
    assert judge("C15", runs(0.01, 0.8, 0.1)) == DEPENDS
    assert judge("C15", runs(0.01, 0.8, 0.7)) == CONTRADICTED
    assert judge("C16", runs(0.3, 0.8, 0.1)) == SUPPORTED
    assert judge("C16", runs(0.01, 0.8, 0.1)) == DEPENDS
    assert judge("C16", runs(0.01, 0.1, 0.1)) == CONTRADICTED


def test_c17_mask_variants():
    def runs(steps: tuple[float, float, float], last: float = 4.0) -> dict:
        return {"jax_where": rec(steps[0]), "jax_mul": rec(steps[1]), "jax_cond": rec(steps[2], loss_last=last)}
    assert judge("C17", runs((10, 12, 10))) == SUPPORTED
    assert judge("C17", runs((10, 10.5, 10))) == DEPENDS
    assert judge("C17", runs((10, 10, 10), last=3.0)) == CONTRADICTED


def test_c18_recompiles_per_length():
    runs = {"pad_max": rec(compiles_in_loop=1, wall_s=3), "bucket": rec(compiles_in_loop=3, distinct_lengths=3, wall_s=2),
            "dynamic": rec(compiles_in_loop=9, distinct_lengths=9, wall_s=9), "torch_dynamic": rec(wall_s=1)}
    v = CLAIMS["C18"].judge(Evidence(SETUP, runs))
    assert v.verdict == SUPPORTED and "bucket" in v.finding
    assert judge("C18", runs | {"dynamic": rec(compiles_in_loop=1, distinct_lengths=9)}) == CONTRADICTED
    assert judge("C18", runs | {"dynamic": rec(compiles_in_loop=4, distinct_lengths=9)}) == DEPENDS


CUSTOM = {"status": "ok", "calls": 3, "max_abs_diff_jax_vs_torch": 1e-7, "max_abs_diff_custom_vs_autodiff": 1e-7,
          "jax_bwd_prints": 1, "torch_bwd_prints": 3, "jax_bwd_print_example": "JitTracer(float32[])",
          "torch_bwd_print_example": "tensor(0.1)", "jax_bwd_print_shows_values": False,
          "torch_bwd_print_shows_values": True, "jax_grad_ms": 0.3, "torch_grad_ms": 1.5}


def test_c19_custom_ops():
    assert judge("C19", probes={"custom_ops": CUSTOM}) == SUPPORTED
    assert judge("C19", probes={"custom_ops": CUSTOM | {"max_abs_diff_jax_vs_torch": 0.1}}) == CONTRADICTED
    shows = CUSTOM | {"jax_bwd_prints": 3, "jax_bwd_print_shows_values": True}
    assert judge("C19", probes={"custom_ops": shows}) == CONTRADICTED
    assert judge("C19", probes={"custom_ops": CUSTOM | {"torch_bwd_print_shows_values": False}}) == DEPENDS


def test_c20_remat_trade():
    def runs(tm: float, tt: float, jm: float, jt: float) -> dict:
        mib = 2**20
        return {"torch": rec(10), "torch_remat": rec(tt, peak_mem_bytes=int(tm * mib)),
                "jax": rec(10), "jax_remat": rec(jt, peak_mem_bytes=int(jm * mib))}
    assert judge("C20", runs(80, 12, 90, 13)) == SUPPORTED
    assert judge("C20", runs(80, 12, 98, 13)) == DEPENDS  # 2 %: below resolution in jax
    assert judge("C20", runs(97, 12, 110, 13)) == DEPENDS  # CPU peak RSS: a small saving is not measurable
    gpu = {k: v | {"peak_mem_source": "device allocator peak"} for k, v in runs(97, 12, 110, 13).items()}
    assert CLAIMS["C20"].judge(Evidence(SETUP, gpu)).verdict == CONTRADICTED


DEBUG = {"status": "ok", "calls": 5, "jit_python_prints": 1, "jit_python_print_example": "python print: JitTracer",
         "jit_python_print_shows_values": False, "jit_debug_prints": 5, "jit_debug_print_example": "debug print: 8.0",
         "jit_debug_print_shows_values": True, "torch_eager_prints": 5, "torch_eager_print_example": "tensor(8.)"}


def test_c21_debug_print():
    assert judge("C21", probes={"debug_print": DEBUG}) == SUPPORTED
    assert judge("C21", probes={"debug_print": DEBUG | {"jit_python_prints": 5,
                                                        "jit_python_print_shows_values": True}}) == CONTRADICTED
    assert judge("C21", probes={"debug_print": DEBUG | {"jit_python_print_shows_values": True}}) == DEPENDS


def test_failed_run_or_probe_is_not_measurable_and_says_why():
    chosen = [CLAIMS["C9"], CLAIMS["C21"]]
    per_claim, specs = plan(chosen, SETUP)
    records = [rec(run_id=s.run_id()) for s in specs]
    records[0] |= {"status": "failed", "error": "out of memory: boom"}
    out = verdicts(chosen, SETUP, per_claim, records, {"debug_print": {"status": "failed", "error": "no jax"}})
    assert [r["verdict"] for r in out] == [NOT_MEASURABLE, NOT_MEASURABLE]
    assert "out of memory: boom" in out[0]["finding"] and "no jax" in out[1]["finding"]
