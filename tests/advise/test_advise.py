"""The decision logic of `twinbench advise` on synthetic records: the recommendation flips where the
arithmetic says it must, and every number it gives comes from a record."""

from __future__ import annotations

import math
import re

import pytest

from twinbench.advise import CLOSE_CALL, Failed, advise, break_even, planned_total_s
from twinbench.record import Record, as_record
from twinbench.report.breakeven import break_even_steps


def rec(fw: str, strategy: str, first_step_s: float, step_ms: float, mem_mib: int = 300, run_id: str = "",
        status: str = "ok", **extra) -> Record:
    return as_record(extra | {"framework": fw, "strategy": strategy, "status": status, "run_id": run_id or f"{fw}-{strategy}-id",
            "first_step_s": first_step_s if status == "ok" else None, "step_ms": step_ms if status == "ok" else None,
            "step_ms_p10": step_ms * 0.9 or None, "step_ms_p90": step_ms * 1.2 or None, "compile_s": first_step_s,
            "peak_mem_bytes": mem_mib * 2**20, "peak_mem_source": "process peak RSS",
            "error": None if status == "ok" else "boom"})


# torch eager: no compile, 12 ms steps; JAX jit: 4 s compile, 7 ms steps -> break-even at 4/0.005 = 800 steps
EAGER = rec("torch", "eager", 0.012, 12.0)
JIT = rec("jax", "jit", 4.007, 7.0)
NAIVE = rec("jax", "naive", 2.0, 40.0)


def test_more_plan_steps_flip_the_recommendation_to_the_faster_stepping_framework() -> None:
    short = advise([EAGER, JIT, NAIVE], plan_steps=100)
    long = advise([EAGER, JIT, NAIVE], plan_steps=20000)
    assert short.recommendation.framework == "torch"
    assert long.recommendation.framework == "jax"
    assert long.frameworks["jax"].strategy == "jit"  # naive is not jax's best
    assert long.break_even.steps == pytest.approx(800, rel=1e-6)
    assert "beyond" in long.break_even.text and "short of" in short.break_even.text


def test_model_changes_a_day_move_the_break_even_and_flip_it_back() -> None:
    k0 = advise([EAGER, JIT], plan_steps=2000, changes_per_day=0)
    k4 = advise([EAGER, JIT], plan_steps=2000, changes_per_day=4)
    assert k0.recommendation.framework == "jax"
    assert k4.recommendation.framework == "torch"  # 5 compiles x 4 s outweigh 2000 x 5 ms
    assert k4.break_even.steps == pytest.approx(5 * 800, rel=1e-6)
    assert k4.frameworks["jax"].compiles == 5
    assert k4.frameworks["jax"].total_s == pytest.approx(4.007 + 1999 * 0.007 + 4 * 4.0)


def test_break_even_agrees_with_the_report_without_changes() -> None:
    assert break_even(JIT, EAGER) == pytest.approx(break_even_steps(JIT, EAGER))
    assert math.isinf(break_even(EAGER, JIT)) and math.isinf(break_even_steps(EAGER, JIT))  # ahead early only
    slow = rec("jax", "jit", 5.0, 20.0)
    assert math.isinf(break_even(slow, EAGER))
    assert break_even(EAGER, slow) == 0.0 == break_even_steps(EAGER, slow)  # never behind


def test_close_calls_and_memory_caveats_are_said() -> None:
    a = rec("torch", "eager", 0.01, 10.0, mem_mib=1000)
    b = rec("jax", "jit", 0.01, 10.0 * (1 + CLOSE_CALL / 2), mem_mib=400)
    out = advise([a, b], plan_steps=10000)
    assert out.recommendation.framework == "torch" and out.recommendation.close_call
    text = "\n".join(out.lines)
    assert "slightly prefer torch" in text and "noise" in text
    assert "150% more peak memory" in text


def test_failed_runs_are_skipped_and_listed() -> None:
    broken = rec("jax", "jit", 0, 0, status="failed")
    out = advise([EAGER, broken], plan_steps=1000)
    assert out.recommendation.framework == "torch"
    assert out.failed == [Failed(run="jax/jit", run_id="jax-jit-id", error="boom")]
    assert "only framework with a successful run" in out.recommendation.reasons[0]
    nothing = advise([broken], plan_steps=1000)
    assert nothing.recommendation.framework is None


def test_every_number_is_traceable_to_a_record() -> None:
    recs = [EAGER, JIT, NAIVE]
    out = advise(recs, plan_steps=20000, changes_per_day=1)
    ids = {r.run.run_id for r in recs}
    for line in out.lines:
        for rid in re.findall(r"\[([^\]]+)\]", line):
            assert rid in ids
    for fw, f in out.frameworks.items():
        r = next(x for x in recs if x.run.run_id == f.run_id)
        assert (f.first_step_s, f.step_ms, f.peak_mem_bytes) == (
            r.timing.first_step_s, r.timing.step_ms, r.memory.peak_mem_bytes)
        assert f.total_s == pytest.approx(planned_total_s(r, 20000, 1))
        assert r.run.framework == fw
    assert "cold compile" in out.assumption


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="plan_steps"):
        advise([EAGER], plan_steps=0)
    with pytest.raises(ValueError, match="changes_per_day"):
        advise([EAGER], plan_steps=10, changes_per_day=-1)


def test_warm_cache_runs_do_not_stand_for_cold_compiles() -> None:
    warm = rec("jax", "jit", 0.5, 7.0, run_id="warm-id", compile_cache="warm")
    out = advise([EAGER, JIT, warm], plan_steps=500)
    assert out.frameworks["jax"].run_id == "jax-jit-id"
    assert out.recommendation.framework == "torch"  # 500 steps < the cold break-even of 800
