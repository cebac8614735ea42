"""explain on TPU profiles (a TPU v5e, jax 0.10.2), trimmed to a few steps by fixtures/trim_xplane.py: twinbench's
own GPT-2 124M ``compare --trace`` profile and a user's plain Flax NNX loop under ``jax.profiler.trace`` (no
twinbench markers). Read without a TPU: the reader decodes the xplane protobuf itself."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.explain.typed import plain
from twinbench.cli import app
from twinbench.explain import gap, jax_trace, taxonomy, tpu_trace, xplane
from twinbench.explain.steps import TraceError
from twinbench.measure import peak

FIX = Path(__file__).parent / "fixtures"
OWN = FIX / "tpu_v5e_jax_jit_bf16.xplane.pb.gz"
USER = FIX / "tpu_v5e_user_flax.xplane.pb.gz"


def _ops_ms(b) -> tuple[float, float]:
    cats = b.categories()
    total = sum(v for k, v in cats.items() if k != "idle")
    return total, cats.get("other", 0.0)


@pytest.mark.parametrize("fixture", [OWN, USER])
def test_tpu_profile_read_and_categorized(fixture: Path) -> None:
    b = jax_trace.read(str(fixture))
    assert b.device.startswith("TPU 0")
    assert b.steps_used == 2 and "executions of the XLA module" in b.step_method
    total, other = _ops_ms(b)
    assert total > 0 and other / total < 0.05  # >= 95% of device op time categorized
    phases = b.phases()
    assert phases["forward"] > 0 and phases["backward"] > 0 and phases["optimizer"] > 0
    assert abs(sum(phases.values()) - b.step_ms) < 1e-6 * b.step_ms + 1e-9  # phases tile the step
    assert b.peak_tflops == 197.0 and "v5e" in b.peak_source


def test_tpu_own_profile_rows_follow_the_model() -> None:
    b = jax_trace.read(str(OWN))
    cells = b.cells
    # the GPT-2 step: matmuls (convolution fusions) and the attention products, forward and backward
    for phase in ("forward", "backward"):
        assert cells[phase]["matmul"] > 5 and cells[phase]["attention"] > 5, phase
    assert cells["backward"]["attention"] > cells["forward"]["attention"]
    assert cells["optimizer"]["optimizer"] > 1
    assert 100 < b.step_ms < 115  # the record's 108.1 ms step, seen on the device
    e = plain(gap.explain_trace(str(OWN)))
    mm = e["throughput"]["backward"]["matmul"]
    assert 0.5 < mm["peak_share"] < 1.0  # bf16 matmuls at a plausible share of the 197 TFLOP/s datasheet peak
    assert e["peak"]["source"] == "TPU v5e datasheet bf16 peak"


def test_tpu_user_profile_attention_and_optimizer() -> None:
    b = jax_trace.read(str(USER))
    assert b.cells["forward"]["attention"] > 0 and b.cells["backward"]["attention"] > 0  # vmap(BTNH,BSNH->BNTS)
    assert b.cells["optimizer"]["optimizer"] > 0  # optax's update: outside jvp/transpose, after the backward
    assert b.cells["rest"]["idle"] > 0.5 * b.step_ms  # a tiny model: the TPU waits on the host


def test_tpu_compare_two_profiles() -> None:
    from twinbench.explain.command import explain_traces

    r = plain(explain_traces(str(OWN), str(USER)))
    assert r["gap_ms"] == pytest.approx(r["b"]["step_ms"] - r["a"]["step_ms"])
    top = sum(x["diff_ms"] for x in r["rows"] if x["level"] == 0)
    assert top == pytest.approx(r["gap_ms"], rel=1e-6)  # the phase rows add up to the gap
    assert any(x["row"] == "backward / attention" and x["diff_ms"] < -10 for x in r["rows"])
    assert r["why"] and "datasheet" in r["why"][0]


def test_tpu_cli_one_and_two_profiles() -> None:
    res = CliRunner().invoke(app, ["explain", str(OWN)])
    assert res.exit_code == 0, res.output
    assert "TPU 0" in res.output and "categorized 100%" in res.output
    res = CliRunner().invoke(app, ["explain", str(OWN), str(USER)])
    assert res.exit_code == 0, res.output
    assert "gap:" in res.output


def test_tpu_bad_device_is_one_line() -> None:
    with pytest.raises(TraceError, match="no device 3"):
        jax_trace.read(str(OWN), device=3)


def test_tpu_category_rules() -> None:
    cat = tpu_trace.category
    assert cat("convolution fusion", "jit(train_step)/jvp(block0)/attn/dot_general") == "matmul"
    assert cat("convolution fusion", "jit(f)/transpose(jvp(block1))/attn/bqhd,bkhd->bhqk/dot_general") == "attention"
    assert cat("custom-call", "jit(f)/jvp(block0)/attn/pallas_call", target="tpu_custom_call splash_mha_fwd") \
        == "attention"
    assert cat("all-reduce", "jit(f)/transpose(jvp(block0))/psum") == "collectives"
    assert cat("data formatting", "jit(f)/jvp(block0)/attn/split") == "data movement"
    assert cat("loop fusion", "jit(f)/jvp(loss)/reduce_max") == "reductions"
    # the loss's softmax over the vocabulary is the loss's (torch's log_softmax rows are reductions too), not attention
    assert cat("loop fusion", "jit(train_step)/jvp(aten::_log_softmax)/jit(log_softmax)/sub") == "reductions"
    assert cat("loop fusion", "jit(f)/jvp(jit(log_softmax))/reduce_max") == "reductions"
    assert cat("loop fusion", "jit(f)/jvp(block0)/attn/jit(softmax)/exp") == "attention"
    assert cat("loop fusion", "") == "element-wise"
    assert cat("outfeed", "") == "data movement"
    assert taxonomy.attention_product("jit(f)/jvp(vmap(BTNH,BSNH->BNTS))/dot_general")
    assert not taxonomy.attention_product("jit(f)/jvp(block0)/btd,dhk->bthk/dot_general")  # a projection
    assert peak.datasheet_tflops("TPU v6 lite", "bf16") == 918.0
    assert peak.datasheet_tflops("TPU v4", "bf16") == 275.0
    assert peak.datasheet_tflops("TPU v5p", "bf16") == 459.0
    assert peak.datasheet("AMD EPYC 7B13") is None  # a CPU has no datasheet peak here


def test_xplane_round_trip() -> None:
    raw = gzip.decompress(USER.read_bytes())
    assert xplane.encode(xplane.fields_of(raw)) == raw
    assert any(n.startswith("/device:TPU:") for n in xplane.plane_names(raw))


#: the compiled HLO of two of the fixture's fusions, cut to what explain reads: a softmax fused on its own
#: (its op_name says reduce_sum) and the LM head's backward dot fused with the loss's softmax
SOFTMAX_HLO = """
%fused_softmax (p0: f32[8,12,1024,1024]) -> f32[8,12,1024] {
  %p0 = f32[8,12,1024,1024]{3,2,1,0} parameter(0)
  %exponential.1 = f32[8,12,1024,1024]{3,2,1,0} exponential(%p0)
  ROOT %reduce.1 = f32[8,12,1024]{2,1,0} reduce(%exponential.1, %c), dimensions={3}, to_apply=%add
}

%fused_head (p0: f32[8192,50257], w: f32[50257,768]) -> f32[8192,768] {
  %p0 = f32[8192,50257]{1,0} parameter(0)
  %exponential.2 = f32[8192,50257]{1,0} exponential(%p0)
  %reduce.2 = f32[8192]{0} reduce(%exponential.2, %c), dimensions={1}, to_apply=%add
  ROOT %convolution.2 = f32[8192,768]{1,0} convolution(%exponential.2, %w), dim_labels=bf_io->bf
}

ENTRY %main (a: f32[8,12,1024,1024]) -> f32[8,12,1024] {
  %fusion.55 = f32[8,12,1024]{2,1,0} fusion(%a), kind=kLoop, calls=%fused_softmax, metadata={op_name="jit(train_step)/jvp(block0)/attn/reduce_sum"}
  ROOT %multiply_reduce_fusion.50 = f32[8192,768]{1,0} fusion(%a, %w), kind=kOutput, calls=%fused_head, metadata={op_name="jit(train_step)/transpose(jvp(head))/dot_general"}
}
"""


def test_tpu_softmax_fusion_is_attention_with_the_hlo() -> None:
    """With the compiled HLO (``--hlo DUMP_DIR``), a softmax fused on its own counts as attention, as torch's
    SDPA holds its softmax; a softmax fused into the LM head's matmul stays a matmul."""
    plain = jax_trace.read(str(OWN))
    joined = jax_trace.read(str(OWN), hlo_text=SOFTMAX_HLO)

    def cat_of(b, name: str) -> set[str]:
        return {r[1] for r in b.raw if r[4] == name}

    assert cat_of(plain, "fusion.55") == {"reductions"} and cat_of(joined, "fusion.55") == {"attention"}
    assert cat_of(joined, "multiply_reduce_fusion.50") == {"matmul"}
    moved = joined.cells["forward"]["attention"] - plain.cells["forward"]["attention"]
    assert moved > 0.3 and joined.cells["forward"]["reductions"] == pytest.approx(
        plain.cells["forward"]["reductions"] - moved)
    assert "HLO" in joined.source


def test_tpu_one_profile_prints_its_flops_against_the_peak() -> None:
    res = CliRunner().invoke(app, ["explain", str(OWN)])
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())
    assert "FLOP/s against the peak (197 TFLOP/s, TPU v5e datasheet bf16 peak)" in flat
    assert "backward matmul" in flat and "backward attention" in flat


def test_a_pallas_kernel_leaves_its_row_without_a_rate() -> None:
    """XLA's cost model counts no FLOPs in a Pallas kernel (a custom call): a row made mostly of one (splash
    attention) gets no FLOP/s, so explain neither says it runs at 0% of the peak nor that the other side does
    thousands of times its work."""
    from twinbench.explain import ops

    kernel = ops.OpGroup("backward", "attention", "custom-call.7", "", raw_ms=8.0, flops=3e6, opaque_ms=7.9)
    dots = ops.OpGroup("backward", "matmul", "fusion.1", "", raw_ms=10.0, flops=1.7e12)
    rows = ops.throughput([kernel, dots], peak_tflops=197.0)["backward"]
    assert rows["attention"].tflops is None and rows["attention"].flops == 0.0
    assert rows["matmul"].tflops == pytest.approx(170.0) and rows["matmul"].peak_share == pytest.approx(170 / 197)


def test_torchax_against_the_jax_twin_on_the_chip_is_the_loss_op_by_op() -> None:
    """The PyTorch GPT-2 twin through torchax against the JAX twin, both with the splash kernel (the fourth v5e
    sitting): the same attention and matmuls within a couple of ms, the gap in the loss over the logits, and the
    sentences name the torchax program's own ops (its reshape, fp32 convert and log-softmax)."""
    from twinbench.explain.command import explain_traces

    r = plain(explain_traces(str(FIX / "tpu_v5e_gpt2_jit_splash.xplane.pb.gz"),
                       str(FIX / "tpu_v5e_gpt2_torchax_splash.xplane.pb.gz")))
    rows = {x["row"]: x["diff_ms"] for x in r["rows"]}
    assert 25 < r["gap_ms"] < 40
    assert abs(rows["forward / matmul"]) < 1 and abs(rows["backward / matmul"]) < 2
    assert rows["forward / reductions"] > 3  # the log-softmax over the vocabulary: the loss's, not attention
    assert rows["forward / attention"] < rows["forward / reductions"]
    said = " ".join(r["why"])
    assert "aten::view" in said and "convert_element_type" in said
    assert "framework:" not in said  # two XLA programs: the implementation's
