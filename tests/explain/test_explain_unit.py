"""explain on traces made here: the readers, the taxonomy, the gap table, and bad input (exit 2).

The torch traces below are SYNTHETIC (hand-written Chrome-trace events in torch.profiler's format); the JAX
traces are real ``jax.profiler`` traces of two small jitted functions made in this process.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from typer.testing import CliRunner

from tests.explain.typed import plain, side
from twinbench.cli import app
from twinbench.explain import gap, hlo, runs, taxonomy, torch_trace
from twinbench.explain.breakdown import PHASES, undisturbed
from twinbench.spec import RunSpec


def test_taxonomy_names_both_frameworks() -> None:
    assert taxonomy.torch_op("aten::addmm") == "matmul"
    assert taxonomy.torch_op("aten::_scaled_dot_product_flash_attention_for_cpu") == "attention"
    assert taxonomy.torch_op("aten::native_layer_norm") == "normalization"
    assert taxonomy.torch_op("aten::copy_") == "data movement"
    assert taxonomy.torch_op("aten::gelu") == "element-wise"
    assert taxonomy.torch_any("autograd::engine::evaluate_function: AddmmBackward0") == "matmul"
    assert taxonomy.hlo_op("dot") == "matmul"
    assert taxonomy.hlo_op("all-reduce") == "collectives"
    assert taxonomy.hlo_op("exponential", "jit(f)/jvp(block0.attn)/softmax/exp") == "attention"
    assert taxonomy.dominant(["element-wise", "matmul", "data movement"]) == "matmul"


# ----------------------------------------------------------------------------------------- synthetic torch
def _ev(name: str, ts: float, dur: float, cat: str = "cpu_op") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}


def synthetic_torch_trace(path: Path, extra_backward_mm: float, descheduled_gelu: float = 0.0) -> str:
    """SYNTHETIC: three steps of forward (addmm, gelu), backward (an evaluate_function holding mm), optimizer;
    ``extra_backward_mm`` microseconds more of backward matmul per step (the planted cause);
    ``descheduled_gelu`` microseconds more of gelu in the second step only (another process took the core)."""
    events = []
    t = 0.0
    for i in range(3):
        bw = 300.0 + extra_backward_mm
        gelu = 50 + (descheduled_gelu if i == 1 else 0.0)
        step = 100 + gelu + bw + 200 + 50
        events.append(_ev(f"twinbench_step_{i}", t, step, "user_annotation"))
        events += [_ev("aten::addmm", t + 10, 100), _ev("aten::gelu", t + 110, gelu),
                   _ev("autograd::engine::evaluate_function: MmBackward0", t + 110 + gelu, bw),
                   _ev("aten::mm", t + 115 + gelu, bw - 10)]
        events += [_ev("optimizer", t + 110 + gelu + bw, 200, "user_annotation"),
                   _ev("aten::_foreach_mul_", t + 111 + gelu + bw, 190)]
        t += step + 10
    path.write_text(json.dumps({"traceEvents": events}))
    return str(path)


def _record(fw: str, strategy: str, trace: str, step_ms: float, **kw: object) -> dict:
    return {"framework": fw, "strategy": strategy, "status": "ok", "step_ms": step_ms, "trace_path": trace,
            "run_id": strategy, **kw}


def test_torch_reader_attributes_phases_and_categories(tmp_path: Path) -> None:
    b = torch_trace.read(synthetic_torch_trace(tmp_path / "t.json", 0.0))
    ph = b.phases()
    assert ph["backward"] == pytest.approx(0.3, rel=0.05)
    assert b.cells["backward"]["matmul"] == pytest.approx(0.29, rel=0.05)
    assert b.cells["optimizer"]["optimizer"] == pytest.approx(0.2, rel=0.05)
    assert b.cells["forward"]["matmul"] == pytest.approx(0.1, rel=0.05)
    assert sum(ph.values()) == pytest.approx(b.step_ms, rel=1e-6)


def test_a_disturbed_step_is_left_out_not_blamed_on_its_op(tmp_path: Path) -> None:
    """A step that another process descheduled (its gelu 10x longer) is not averaged in: the element-wise row
    stays what the undisturbed steps say, and the breakdown says how many steps it used."""
    clean = torch_trace.read(synthetic_torch_trace(tmp_path / "a.json", 0.0))
    disturbed = torch_trace.read(synthetic_torch_trace(tmp_path / "b.json", 0.0, descheduled_gelu=500.0))
    assert (disturbed.steps_traced, disturbed.steps_used) == (3, 2)
    assert disturbed.cells["forward"]["element-wise"] == pytest.approx(clean.cells["forward"]["element-wise"])
    assert disturbed.step_ms == pytest.approx(clean.step_ms)
    assert undisturbed([10.0, 12.0, 30.0, 11.0]) == [0, 1, 3]


def test_planted_backward_matmul_is_the_largest_gap_row(tmp_path: Path) -> None:
    a = _record("torch", "eager", synthetic_torch_trace(tmp_path / "a.json", 0.0), 0.61)
    b = _record("torch", "slow", synthetic_torch_trace(tmp_path / "b.json", 400.0), 1.01)
    res = plain(gap.explain_pair(a, b))
    assert res["largest"]["row"] == "backward / matmul"
    assert res["largest"]["share"] > 0.5
    assert sum(r["diff_ms"] for r in res["rows"] if r["level"] == 0) == pytest.approx(res["gap_ms"], rel=0.15)
    assert "backward / matmul" in res["summary"]


def test_the_why_rows_read_the_typed_records_sections(tmp_path: Path) -> None:
    """explain_run hands the typed record itself to the why rows and the op tables: the peak and its time from
    ``speed``, the device from ``run``, the cores from ``conditions``, the busy warnings from ``warnings``; a
    flat dict is no record there."""
    from twinbench.explain import why
    from twinbench.explain.breakdown import Breakdown
    from twinbench.record_sections import Conditions, Record, Run, Speed, Timing, Trace

    rec = Record(status="ok", run=Run(framework="torch", strategy="eager", run_id="r", device="Tesla X"),
                 timing=Timing(step_ms=0.61), speed=Speed(peak_tflops=0.25, peak_measured_at="2000-01-01T00:00:00"),
                 conditions=Conditions(cpu_count=3), trace=Trace(path=synthetic_torch_trace(tmp_path / "a.json", 0.0)),
                 warnings=["machine busy: planted", "batch x is replicated"])
    e = plain(gap.explain_run(rec))
    assert e["peak"] == {"tflops": 0.25, "measured_at": "2000-01-01T00:00:00", "age": e["peak"]["age"], "source": ""}
    assert e["peak"]["age"].endswith(" d ago")
    assert (e["device_name"], e["cores"], e["warnings"]) == ("Tesla X", 3, ["machine busy: planted"])
    assert e["busy"] and any(k["name"] == "aten::mm" for k in e["kernels"])
    with pytest.raises(AttributeError):
        why.run_extras(rec.flat(), Breakdown(), 1.0, {}, {})  # type: ignore[arg-type]


def test_an_even_spread_names_no_planted_row() -> None:
    """The planted-cause assertion above fails on a breakdown that spreads the gap evenly."""
    even = {"run": "a", "step_ms": 10.0, "trace": dict.fromkeys(PHASES, 2.0),
            "cells": {p: {"matmul": 1.0, "element-wise": 1.0} for p in PHASES}, "scopes": {}}
    more = {"run": "b", "step_ms": 20.0, "trace": dict.fromkeys(PHASES, 4.0),
            "cells": {p: {"matmul": 2.0, "element-wise": 2.0} for p in PHASES}, "scopes": {}}
    rows = plain(gap.rows(side(even), side(more)))
    assert max(r["share"] for r in rows if r["level"] == 1) <= 0.1 + 1e-9


# ------------------------------------------------------------------------------------------------ real JAX
def _jax_run(tmp_path: Path, slow: bool) -> dict:
    import jax
    import jax.numpy as jnp
    import optax

    from twinbench.measure.trace import trace_steps

    def loss(p: dict, x: jax.Array) -> jax.Array:
        with jax.named_scope("block0.attn"):
            s = x @ p["w"]
            if slow:  # the planted cause: softmaxes of the scores recomputed over and over (forward only)
                extra = jnp.tile(s, (4, 1))  # 4x the scores: a cause far above a busy machine's noise
                for _ in range(300):
                    extra = jax.nn.softmax(extra * 1.0001, axis=-1) * 8.0
                s = s + 1e-6 * jax.lax.stop_gradient(extra[: s.shape[0]])
            s = jax.nn.softmax(s, axis=-1)
        return jnp.mean(s @ p["v"])

    tx = optax.adamw(1e-3)

    def step(p: dict, st: object, x: jax.Array) -> tuple:
        val, g = jax.value_and_grad(loss)(p, x)
        with jax.named_scope("optimizer"):
            u, st = tx.update(g, st, p)
            return optax.apply_updates(p, u), st, val

    p = {"w": jnp.ones((64, 64)) * 0.01, "v": jnp.ones((64, 64)) * 0.01}
    state = {"p": p, "s": tx.init(p)}
    x = jnp.ones((512, 64))
    jitted = jax.jit(step)

    def one(_i: int) -> None:
        state["p"], state["s"], _ = jitted(state["p"], state["s"], x)

    text = jitted.lower(state["p"], state["s"], x).compile().as_text()
    path = trace_steps("jax", one, lambda: jax.block_until_ready(state["p"]), tmp_path / ("slow" if slow else "fast"))
    (tmp_path / f"{slow}.hlo").write_text(text)
    b = gap.jax_trace.read(path, text)
    return _record("jax", "slow" if slow else "fast", path, b.step_ms, explain_hlo_path=str(tmp_path / f"{slow}.hlo"))


def test_jax_planted_slow_attention_is_the_largest_gap_row(tmp_path: Path) -> None:
    fast, slow = _jax_run(tmp_path, False), _jax_run(tmp_path, True)
    res = plain(gap.explain_pair(fast, slow))
    assert res["largest"]["row"] == "forward / attention", res["rows"]
    assert res["a"]["categorized_share"] >= 0.9
    assert set(res["b"]["scopes"]) >= {"block0.attn"}


def test_hlo_phases_from_op_name() -> None:
    assert hlo.phase("jit(step)/jvp(block0.attn)/dot_general") == "forward"
    assert hlo.phase("jit(step)/transpose(jvp(block0.attn))/dot_general") == "backward"
    assert hlo.phase("jit(step)/optimizer/add") == "optimizer"
    assert hlo.scope("jit(step)/transpose(jvp(block1.mlp))/mul") == "block1.mlp"
    assert hlo.scope("jit(step)/transpose(jvp(block1/mlp))/mul") == "block1.mlp"
    assert hlo.scope("jit(step)/jvp(head)/dot_general") == "head"
    assert hlo.scope("jit(train_step)/transpose(jvp(block1))/mlp/mul") == "block1.mlp"
    assert torch_trace.scope_of(["twinbench_step_0", "block2", "attn", "aten::addmm"]) == "block2.attn"


# ------------------------------------------------------------------------------------------------ bad input
def test_needs_run_says_what_is_missing(tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    trace.write_text("{}")
    assert runs.needs_run(None)
    assert runs.needs_run({"status": "ok", "trace_path": None})
    assert runs.needs_run({"status": "ok", "framework": "torch", "trace_path": str(trace)})  # no timing
    assert not runs.needs_run({"status": "ok", "framework": "torch", "trace_path": str(trace),
                               "explain_timing": {"forward": 1.0}})


@pytest.mark.parametrize("args", [["torch:nope", "jax:jit"], ["/no/such/dir:jax/jit", "torch:eager"],
                                  ["RESULTS:jax/scan-steps", "torch:eager"], ["UNREADABLE:torch/eager", "torch:eager"]])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str]) -> None:
    d = tmp_path / "res"
    d.mkdir()
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    rec = _record("torch", "eager", str(bad), 1.0, explain_timing={"forward": 1.0}, spec=RunSpec().to_dict())
    (d / "results.jsonl").write_text(json.dumps(rec) + "\n")
    args = [a.replace("RESULTS", str(d)).replace("UNREADABLE", str(d)) for a in args]
    if "UNREADABLE" in " ".join(args) or args[0].startswith(str(d) + ":torch"):
        args[1] = f"{d}:torch/eager"
    res = CliRunner().invoke(app, ["explain", *args, "--preset", "tiny", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output


def test_a_torch_op_no_rule_names_is_other_not_element_wise():
    """The element-wise row holds pointwise arithmetic by name; a library's own fused op nobody named is other, so
    a trace of such ops does not pass explain's 90%-categorized check as element-wise."""
    from twinbench.explain.taxonomy import torch_op

    assert [torch_op(n) for n in ("aten::add_", "aten::gelu_backward", "aten::_foreach_addcdiv_",
                                  "autograd::engine::evaluate_function: MulBackward0")] == ["element-wise"] * 4
    assert [torch_op(n) for n in ("fb::offsets_range", "aten::fused_moe_kernel", "mylib::rotary")] == ["other"] * 3
    assert torch_op("aten::item") == torch_op("aten::alias") == "data movement"


CONVS = {  # lax.conv_general_dilated's arguments: strides, padding, and the rest by name
    "strided": ((2, 9, 10, 4), (3, 3, 4, 6), (2, 2), "SAME", {}),
    "transposed": ((2, 5, 6, 4), (4, 4, 4, 3), (1, 1), ((2, 2), (2, 2)), {"lhs_dilation": (2, 2)}),
    "dilated": ((2, 11, 11, 4), (3, 3, 4, 5), (1, 1), "VALID", {"rhs_dilation": (2, 2)}),
    "grouped": ((2, 8, 8, 6), (3, 3, 3, 4), (1, 1), "SAME", {"feature_group_count": 2}),
    "1-d": ((3, 17, 5), (5, 5, 7), (2,), "SAME", {}),
}


@pytest.mark.parametrize("conv", sorted(CONVS))
def test_hlo_convolution_flops_are_xlas(conv: str) -> None:
    """A convolution's FLOPs from its compiled HLO text (dim_labels, window: padding and a transposed
    convolution's input dilation compute nothing) are what XLA's own cost analysis counts, forward and both
    gradients (a program of convolutions only, so its total is theirs)."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    from twinbench.explain import flops

    xs, ws, strides, padding, kw = CONVS[conv]
    spec = ("NWC", "WIO", "NWC") if len(xs) == 3 else ("NHWC", "HWIO", "NHWC")

    def f(x: jax.Array, w: jax.Array) -> jax.Array:
        return lax.conv_general_dilated(x, w, strides, padding, dimension_numbers=spec, **kw)

    x, w = jnp.ones(xs), jnp.ones(ws)
    y, vjp = jax.vjp(f, x, w)
    for fn, args in ((f, (x, w)), (vjp, (y,))):
        compiled = jax.jit(fn).lower(*args).compile()
        shapes = flops.HloShapes(compiled.as_text())
        ours = sum(shapes.op(i.name).flops for i in shapes.table.values() if i.opcode == "convolution")
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        assert ours > 0 and ours == pytest.approx(cost["flops"], rel=1e-9)


def test_a_convolution_spelled_otherwise_is_not_costed_and_raises_nothing() -> None:
    """An HLO text is data: a convolution whose window or labels are not XLA's spelling has no FLOPs (None),
    never an exception; a well-formed one beside them is costed (3 x 3 taps over a padded 5 x 5 input: 13 valid
    (output, tap) pairs a dimension)."""
    from twinbench import hlo_text

    text = """HloModule m
ENTRY e {
  a = f32[2,5,5,3]{3,2,1,0} parameter(0)
  w = f32[3,3,3,4]{3,2,1,0} parameter(1)
  zero = f32[2,5,5,4]{3,2,1,0} convolution(a, w), window={size=3x3 pad=1_1x1_1 stride=0x0}, dim_labels=b01f_01io->b01f
  word = f32[2,5,5,4]{3,2,1,0} convolution(a, w), window={size=3xq}, dim_labels=b01f_01io->b01f
  nobatch = f32[2,5,5,4]{3,2,1,0} convolution(a, w), window={size=3x3 pad=1_1x1_1}, dim_labels=x01f_01io->x01f
  short = f32[2,5,5,4]{3,2,1,0} convolution(a, w), window={size=3x3x3}, dim_labels=b01f_01io->b01f
  good = f32[2,5,5,4]{3,2,1,0} convolution(a, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
}
"""
    by = hlo_text.parse(text).instructions()
    assert [hlo_text.conv_flops(by[n], by) for n in ("zero", "word", "nobatch", "short")] == [None] * 4
    assert hlo_text.conv_flops(by["good"], by) == 2 * 2 * 4 * 3 * 13 * 13


def test_explain_json_of_every_version_reads(tmp_path: Path) -> None:
    """explain.json is versioned: the files written before ``schema_version`` (an ``explain --json`` of a pair
    with the doctor's answer, and compare --explain's bare list with an unreadable run) still read, typed; what
    this version writes reads back the same; a later version is refused in one line."""
    import gzip

    from twinbench.explain import result

    fix = Path(__file__).parent / "fixtures"
    for name in ("explain_v0_pair.json", "explain_v0_runs.json"):
        (tmp_path / name).write_bytes(gzip.decompress((fix / f"{name}.gz").read_bytes()))
    pair = result.read(tmp_path / "explain_v0_pair.json")
    assert isinstance(pair, result.Explained) and pair.schema_version == 0 and pair.b is not None
    assert pair.answer is not None and pair.answer.causes[0].finding == "jax-recompile"
    assert pair.b.recorded is not None and pair.b.recorded.compiles is not None and pair.b.measured is not None
    assert pair.largest is not None and pair.gap_ms == pytest.approx(pair.b.step_ms - pair.a.step_ms)
    assert any(r.uncertainty_ms is None and r.named_ms is not None for r in pair.rows)
    again = tmp_path / "again.json"
    again.write_bytes(result.to_json(pair))
    back = result.read(again)
    assert isinstance(back, result.Explained) and back.schema_version == result.SCHEMA_VERSION
    assert plain(back) == plain(pair)
    runs = result.read(tmp_path / "explain_v0_runs.json")
    assert isinstance(runs, result.ExplainedRuns) and [s.run for s in runs.runs] == ["torch/eager"]
    assert runs.unreadable[0].run == "jax/jit" and runs.runs[0].timing and runs.runs[0].kernels
    later = tmp_path / "later.json"
    later.write_text('{"schema_version": 99, "a": {"run": "x", "step_ms": 1.0}}')
    with pytest.raises(ValueError, match="schema_version 99; this twinbench reads up to"):
        result.read(later)
    one = tmp_path / "one.json"
    one.write_bytes(result.to_json(result.Explained(a=pair.a)))  # one trace: its side alone, as before
    assert set(msgspec.json.decode(one.read_bytes())) == {"schema_version", "a"}
