"""explain's *why*: FLOPs per op from shapes (torch args, HLO dots), the linearization JAX's forward computes
for the backward, the work/peak/efficiency split, matmuls matched by shape, memory rows; and a planted cause
on real traced JAX steps: weights read transposed by every dot, named by the shapes table."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.explain.typed import plain, shape_rows, side
from tests.explain.typed import side as typed_side
from twinbench.explain import flops, gap, linearize, memory_rows, shapes, why
from twinbench.explain.side import MemoryGap, Op, Rate, Side, typed

HLO = """HloModule jit_step, entry_computation_layout={()->()}

%fused_dot (param_0.1: f32[64,32], param_1.1: f32[64,16]) -> f32[32,16] {
  %param_0.1 = f32[64,32]{1,0} parameter(0)
  %param_1.1 = f32[64,16]{1,0} parameter(1)
  ROOT %dot.3 = f32[32,16]{1,0} dot(%param_0.1, %param_1.1), lhs_contracting_dims={0}, rhs_contracting_dims={0}, metadata={op_name="jit(step)/transpose(jvp(block0))/mlp/dot_general"}
}

ENTRY %main (x: f32[64,32], w: f32[32,16]) -> (f32[], f32[32,16]) {
  %x = f32[64,32]{1,0} parameter(0)
  %w = f32[32,16]{1,0} parameter(1)
  %dot.1 = f32[64,16]{1,0} dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(step)/jvp(block0)/mlp/dot_general"}
  %tanh.1 = f32[64,16]{1,0} tanh(%dot.1), metadata={op_name="jit(step)/jvp(block0)/mlp/tanh"}
  %deriv.1 = f32[64,16]{1,0} multiply(%tanh.1, %tanh.1), metadata={op_name="jit(step)/jvp(block0)/mlp/mul"}
  %keep.1 = f32[64,16]{1,0} subtract(%deriv.1, %deriv.1), metadata={op_name="jit(step)/jvp(block0)/mlp/sub"}
  %loss.1 = f32[] reduce(%tanh.1), dimensions={0,1}, metadata={op_name="jit(step)/jvp(loss)/reduce_sum"}
  %grad.1 = f32[64,16]{1,0} multiply(%keep.1, %tanh.1), metadata={op_name="jit(step)/transpose(jvp(block0))/mlp/mul"}
  %dw.1 = f32[32,16]{1,0} fusion(%x, %grad.1), kind=kOutput, calls=%fused_dot, metadata={op_name="jit(step)/transpose(jvp(block0))/mlp/dot_general"}
  %bdot.1 = f32[4,8,16]{2,1,0} dot(%b1, %b2), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  %b1 = f32[4,8,32]{2,1,0} parameter(2)
  %b2 = f32[4,32,16]{2,1,0} parameter(3)
  ROOT %tuple.1 = (f32[], f32[32,16]) tuple(%loss.1, %dw.1)
}
"""


def test_torch_matmul_flops_and_layout_from_recorded_shapes() -> None:
    args = {"Input Dims": [[768], [1024, 256], [256, 768], [], []], "Input type": ["float"] * 3 + ["Scalar"] * 2,
            "Input Strides": [[1], [256, 1], [1, 256], [], []]}
    s = flops.torch_op("aten::addmm", args)
    assert (s.batch, s.m, s.k, s.n, s.trans) == (1, 1024, 256, 768, "NT")
    assert s.flops == 2 * 1024 * 256 * 768
    t = flops.torch_op("aten::mm", {"Input Dims": [[256, 1024], [1024, 256]], "Input Strides": [[1, 256], [256, 1]]})
    assert t.trans == "TN" and t.key() == (1, 256, 1024, 256)
    b = flops.torch_op("aten::bmm", {"Input Dims": [[32, 128, 64], [32, 64, 128]]})
    assert b.flops == 2 * 32 * 128 * 64 * 128 and b.batch == 32
    q = [8, 4, 128, 64]
    sd = flops.torch_op("aten::_scaled_dot_product_flash_attention_for_cpu", {"Input Dims": [q, q, q]})
    sdb = flops.torch_op("aten::_scaled_dot_product_flash_attention_for_cpu_backward", {"Input Dims": [q, q, q]})
    assert sd.flops == 2 * 2 * 32 * 128 * 64 * 128 and sdb.flops == 2 * sd.flops
    add = flops.torch_op("aten::add", {"Input Dims": [[10, 10], [10, 10]], "Input type": ["float", "float"]})
    assert add.flops == 0 and add.bytes == 3 * 400  # two inputs and an output


def test_hlo_dot_shapes_flops_and_layout() -> None:
    h = flops.HloShapes(HLO)
    fwd = h.op("dot.1")
    assert (fwd.m, fwd.k, fwd.n, fwd.trans, fwd.flops) == (64, 32, 16, "NN", 2 * 64 * 32 * 16)
    dw = h.op("dw.1")  # a fusion holding one dot: that dot, its lhs read transposed
    assert (dw.m, dw.k, dw.n, dw.trans) == (32, 64, 16, "TN")
    bd = h.op("bdot.1")
    assert (bd.batch, bd.m, bd.k, bd.n) == (4, 8, 32, 16)
    assert h.op("tanh.1").flops == 0 and h.op("tanh.1").bytes == 2 * 64 * 16 * 4
    assert h.op("nope").flops == 0


def test_forward_work_only_the_backward_uses_is_linearization() -> None:
    lin = linearize.linearization(HLO)
    assert lin == {"deriv.1", "keep.1"}  # tanh.1 and dot.1 feed the loss; the rest is backward
    assert linearize.classify(HLO)[1] == {"tanh.1"}  # primal, and read by the backward too


def test_split_sums_to_the_row_gap_and_charges_the_lower_peak() -> None:
    a = Rate(ms=10.0, flops=1e9)
    b = Rate(ms=16.0, flops=1e9)
    sp = plain(why.split(a, b, 0.30, 0.25))  # B's peak is lower: at A's efficiency it costs 10 * (0.30/0.25 - 1) = 2 ms
    assert sp is not None
    assert sp["peak_ms"] == pytest.approx(2.0) and sp["work_ms"] == pytest.approx(0.0)
    assert sum(sp.values()) == pytest.approx(6.0)
    back = plain(why.split(b, a, 0.25, 0.30))  # the other way round: same parts, negative
    assert back is not None and back["peak_ms"] == pytest.approx(-2.0) and sum(back.values()) == pytest.approx(-6.0)
    more = plain(why.split(a, Rate(ms=16.0, flops=1.2e9), 0.3, 0.3))
    assert more is not None and more["work_ms"] == pytest.approx(2.0) and sum(more.values()) == pytest.approx(6.0)
    assert why.split(a, b, None, 0.3) is None


def _op(phase: str, shape: flops.OpShape, ms: float) -> Op:
    return Op(phase=phase, category="matmul", name="mm", scope="", ms=ms, raw_ms=ms, calls=1, flops=shape.flops,
              bytes=0.0, shape=shape.text(), key=list(shape.key() or ()), trans=shape.trans, linearization=False)


def test_matmuls_match_by_shape_whatever_their_layout() -> None:
    xw = flops.OpShape(2 * 1024 * 256 * 768, 0, 1, 1024, 256, 768, "NN")
    wx = flops.OpShape(2 * 1024 * 256 * 768, 0, 1, 768, 256, 1024, "TT")  # (x @ w).T as w.T @ x.T
    only = flops.OpShape(2 * 8 * 8 * 8, 0, 1, 8, 8, 8, "NN")
    rows = shapes.table([_op("forward", xw, 2.0), _op("forward", only, 0.1)], [_op("forward", wx, 4.0)], 0.4, 0.4)
    top = rows[0]
    assert top.matched and top.a.layout == "NN" and top.b.layout == "TT"
    assert top.b.tflops == pytest.approx(xw.flops / 4e-3 / 1e12)
    assert top.a.peak_share is not None and top.b.peak_share is not None
    assert top.a.peak_share == pytest.approx(2 * top.b.peak_share)
    assert not rows[1].matched
    assert "forward [1024,256]x[256,768]" in shapes.line(top, "a", "b")


def test_memory_rows_sum_to_the_gap() -> None:
    a = {"peak_bytes": 1000, "parts": {"params": 100, "activations": 300}, "unaccounted_bytes": 600,
         "peak_source": "process peak RSS"}
    b = {"peak_bytes": 1600, "parts": {"params": 100, "activations": 800}, "unaccounted_bytes": 700,
         "peak_source": "process peak RSS"}
    got = memory_rows.rows(memory_rows.measured(a), memory_rows.measured(b))  # the records' breakdowns, decoded
    assert got is not None
    mem = typed(got, MemoryGap)  # as a pair holds it
    assert mem.largest == "activations"
    assert sum(r.diff_bytes for r in mem.rows) == mem.gap_bytes == 600
    assert memory_rows.measured({"error": "x"}) is None  # a breakdown with only its error has no parts
    assert memory_rows.rows(memory_rows.measured(a), memory_rows.measured({"error": "x"})) is None


# --------------------------------------------------------------------------------- planted: transposed weights
def _jax_linear_run(tmp_path: Path, transposed: bool) -> dict:
    """Two dense layers; the planted port stores each weight as [out, in] and transposes it on every call."""
    import jax
    import jax.numpy as jnp

    from twinbench.measure.trace import trace_steps

    def dense(w: jax.Array, x: jax.Array) -> jax.Array:
        return x @ (w.T if transposed else w)

    def loss(p: dict, x: jax.Array) -> jax.Array:
        with jax.named_scope("block0.mlp"):
            return jnp.mean(jnp.tanh(dense(p["w2"], jnp.tanh(dense(p["w1"], x)))))

    def step(p: dict, x: jax.Array) -> tuple:
        val, g = jax.value_and_grad(loss)(p, x)
        return jax.tree.map(lambda a, b: a - 1e-3 * b, p, g), val

    w1, w2 = jnp.ones((256, 512)) * 0.01, jnp.ones((512, 128)) * 0.01
    p = {"w1": w1.T if transposed else w1, "w2": w2.T if transposed else w2}
    x = jnp.ones((256, 256))
    jitted = jax.jit(step)
    state = {"p": p}

    def one(_i: int) -> None:
        state["p"], _ = jitted(state["p"], x)

    text = jitted.lower(p, x).compile().as_text()
    name = "transposed" if transposed else "plain"
    path = trace_steps("jax", one, lambda: jax.block_until_ready(state["p"]), tmp_path / name)
    (tmp_path / f"{name}.hlo").write_text(text)
    r = {"framework": "jax", "strategy": name, "status": "ok", "trace_path": path, "run_id": name,
         "explain_hlo_path": str(tmp_path / f"{name}.hlo"), "peak_tflops": 0.2}
    r["step_ms"] = gap.read_trace(r).step_ms
    return r


def test_planted_transposed_weights_are_named_by_the_shapes_table(tmp_path: Path) -> None:
    res = plain(gap.explain_pair(_jax_linear_run(tmp_path, False), _jax_linear_run(tmp_path, True)))
    fwd = {tuple(r["key"]): r for r in res["shapes"] if r["phase"] == "forward"}
    for key in ((1, 256, 256, 512), (1, 128, 512, 256)):  # x @ w1, h @ w2
        row = fwd[key]
        assert row["matched"], res["shapes"]
        assert row["a"]["layout"] == "NN" and row["b"]["layout"] == "NT", row  # the planted transposition, named
        assert row["a"]["tflops"] and row["b"]["tflops"] and row["b"]["peak_share"] is not None
    matmul = [r for r in res["rows"] if r["row"].endswith("/ matmul") and r["a_ms"] and r["b_ms"]]
    assert matmul and all(r["a_throughput"].get("tflops") and r["b_throughput"].get("peak_share") for r in matmul)
    for r in matmul:  # the split of every matmul row sums to its gap
        assert sum(r["split"].values()) == pytest.approx(r["diff_ms"], abs=1e-9)


# ------------------------------------------------------------------------------------------ --try, --depths
def test_try_flags_parse_into_xla_spec_and_env() -> None:
    from twinbench.explain import try_flag
    from twinbench.spec import from_preset

    assert try_flag.parse("B:--xla_cpu_foo=1") == (1, "xla", "--xla_cpu_foo", "--xla_cpu_foo=1")
    assert try_flag.parse("a:attention-impl=chunked") == (0, "spec", "attention_impl", "chunked")
    assert try_flag.parse("B:env:OMP_NUM_THREADS=1") == (1, "env", "OMP_NUM_THREADS", "1")
    spec = from_preset("tiny", {}, framework="jax", strategy="jit").to_dict()
    assert try_flag.variant(spec, "spec", "threads", "1").host.threads == 1
    assert try_flag.variant(spec, "spec", "layers", "3").model.layers == 3
    assert try_flag.env_of("xla", "--xla_x", "--xla_x=1")["XLA_FLAGS"].endswith("--xla_x=1")
    for bad in ("C:threads=1", "B:threads", "B:"):
        with pytest.raises(try_flag.TryError):
            try_flag.parse(bad)
    with pytest.raises(try_flag.TryError):
        try_flag.variant(spec, "spec", "no_such_option", "1")


def _layer_hlo(layers: int, muls_per_layer: int) -> str:
    lines = ["ENTRY %main (p: f32[8]) -> f32[8] {", "  %p = f32[8]{0} parameter(0)"]
    prev = "p"
    for i in range(layers * muls_per_layer):
        lines.append(f'  %m.{i} = f32[8]{{0}} multiply(%{prev}, %{prev}), metadata={{op_name="jit(s)/transpose(jvp(b))/ln/mul"}}')
        prev = f"m.{i}"
    lines += [f"  ROOT %r = f32[8]{{0}} add(%{prev}, %p)", "}"]
    return "\n".join(lines)


def test_depth_growth_names_work_growing_faster_than_layers() -> None:
    from twinbench.explain import depth

    linear = depth.growth({2: _layer_hlo(2, 20), 4: _layer_hlo(4, 20)})
    assert linear == []
    found = depth.growth({2: _layer_hlo(2, 20), 4: _layer_hlo(4, 40)})  # per layer 20 -> 40
    grows = plain(found)
    assert grows and grows[0]["phase"] == "backward" and grows[0]["opcode"] == "multiply"
    assert grows[0]["counts"] == [40, 160] and grows[0]["excess"] == 80
    assert "grows faster than the layer count" in depth.sentence("jax/torchax", found)


def test_a_matmul_above_its_measured_peak_says_what_that_peak_is() -> None:
    """torch's [1024,768]x[768,256] at 300 GFLOP/s against a cached peak of 268 (seen on this CPU, the peak
    measured hours earlier): the explanation says the peak is a measured square matmul, not the hardware's limit."""
    mm = flops.OpShape(2 * 1024 * 768 * 256, 0, 1, 1024, 768, 256, "NN")
    ms = mm.flops / 300e9 * 1e3
    rows = shape_rows(shapes.table([_op("backward", mm, ms)], [_op("backward", mm, 2 * ms)], 0.268, 0.159))
    peak = {"peak": {"tflops": 0.268, "age": "5 h ago"}}
    a, b = side({"run": "torch/eager", **peak}), side({"run": "jax/jit", "peak": {"tflops": 0.159}})
    (line,) = why._above_peak(a, b, rows)
    assert line.startswith("torch/eager's matmuls ran at up to 112% of its measured peak (backward [1024,768]x[768,256]")
    assert "268 GFLOP/s, measured 5 h ago" in line and "twinbench peak --remeasure" in line
    assert why._above_peak(a, b, shape_rows(shapes.table([_op("backward", mm, 2 * ms)], [], 0.268, 0.159))) == []


def test_a_jax_peak_above_torchs_mostly_unaccounted_points_at_the_compile() -> None:
    """On the CPU a cold JAX run's peak RSS is often the compiler's (tiny jax/jit: 0.41 GiB cold, 0.28 warm)."""
    a = {"peak_bytes": 1000, "parts": {"params": 100}, "unaccounted_bytes": 100, "peak_source": "process peak RSS"}
    b = {"peak_bytes": 1500, "parts": {"params": 100}, "unaccounted_bytes": 600, "peak_source": "process peak RSS"}
    ma, mb = memory_rows.measured(a), memory_rows.measured(b)
    said = memory_rows.sentence(memory_rows.rows(ma, mb), "torch/eager", "jax/jit")
    assert said.startswith("memory: jax/jit's peak is 0 MiB above torch/eager's") and "while XLA compiles" in said
    assert "XLA compiles" not in memory_rows.sentence(memory_rows.rows(ma, mb), "jax/jit", "torch/eager")  # torch's


def test_a_step_paying_for_fresh_pages_is_said_with_its_a_b() -> None:
    from twinbench.explain import gap

    def side(run: str, step: float, **extra: object) -> Side:
        cells = {"forward": {"matmul": step / 2}, "backward": {"matmul": step / 2}}
        return typed_side({"run": run, "step_ms": step, "trace": {p: sum(c.values()) for p, c in cells.items()},
                           "cells": cells, "scopes": {}, **extra})

    faults = "36,846 page faults a step (about 144 MiB of fresh 4 KiB pages), 31% of its CPU time in the kernel"
    why = gap.pair(side("torch/eager", 125.0), side("jax/jit", 103.0, page_faults=faults, host_malloc="system")).why
    said = [w for w in why if "page faults" in w]
    assert said == [f"jax/jit: {faults} over its steady steps: part of every row of its step is the kernel zeroing "
                    "fresh pages for the ops (`--try B:host-malloc=tuned` runs it again with twinbench's malloc "
                    "settings)"]
    why = gap.pair(side("jax/jit", 103.0, page_faults=faults, host_malloc="tuned", glibc_tunables="x=1"),
                   side("torch/eager", 125.0)).why
    assert next(w for w in why if "page faults" in w).endswith("(under GLIBC_TUNABLES=x=1)")
    assert not [w for w in gap.pair(side("a/b", 1.0), side("c/d", 2.0)).why if "page faults" in w]
