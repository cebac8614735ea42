"""A category follows the model's operation in both frameworks: JAX's attention products (the score and value
einsums, forward and backward) are attention, as torch's SDPA and its backward are, not matmul."""

from __future__ import annotations

from twinbench.explain import hlo

HLO = """
ENTRY %main (p0: f32[8,16,64,64]) -> f32[8,64,16,64] {
  %dot.1 = f32[8,16,64,64]{3,2,1,0} dot(%a, %b), lhs_batch_dims={0,2}, metadata={op_name="jit(train_step)/transpose(jvp(block1))/attn/bqhd,bkhd->bhqk/dot_general"}
  %dot.2 = f32[8,16,64,64]{3,2,1,0} dot(%p, %v), metadata={op_name="jit(train_step)/jvp(block1)/attn/bhqk,bkhd->bqhd/dot_general"}
  %dot.3 = f32[512,192]{1,0} dot(%x, %w), metadata={op_name="jit(train_step)/transpose(jvp(block1))/attn/dot_general"}
  %transpose.4 = f32[8,64,16,64]{3,2,1,0} transpose(%dot.2), dimensions={0,2,1,3}, metadata={op_name="jit(train_step)/transpose(jvp(block1))/attn/bhqk,bkhd->bqhd/transpose"}
  ROOT %fusion.5 = f32[8,64,16,64]{3,2,1,0} fusion(%dot.1), kind=kOutput, calls=%fused_dot, metadata={op_name="jit(train_step)/transpose(jvp(block0))/attn/bqhd,bkhd->bhqk/dot_general"}
}

%fused_dot (q: f32[8,16,64,64]) -> f32[8,64,16,64] {
  ROOT %dot.9 = f32[8,64,16,64]{3,2,1,0} dot(%q, %q), metadata={op_name="jit(train_step)/transpose(jvp(block0))/attn/bqhd,bkhd->bhqk/dot_general"}
}
"""


def test_jax_attention_products_are_attention_and_projections_matmul() -> None:
    instrs = hlo.parse(HLO)
    assert hlo.category(instrs["dot.1"]) == "attention"  # the backward of the score product
    assert hlo.category(instrs["dot.2"]) == "attention"  # the forward value product
    assert hlo.category(instrs["transpose.4"]) == "attention"  # its layout change, as inside torch's SDPA
    assert hlo.category(instrs["fusion.5"]) == "attention"  # a fusion of the backward score product
    assert hlo.category(instrs["dot.3"]) == "matmul"  # the q/k/v projection stays a matmul
    assert hlo.phase(instrs["dot.1"].op_name) == "backward"


def test_a_row_larger_than_the_gap_names_what_offsets_it() -> None:
    from twinbench.explain import gap

    a = {"run": "jax/jit", "step_ms": 100.0, "trace": {"forward": 40.0, "backward": 60.0},
         "cells": {"forward": {"matmul": 40.0}, "backward": {"attention": 0.0, "matmul": 60.0}}, "scopes": {}}
    b = {"run": "torch/eager", "step_ms": 104.0, "trace": {"forward": 31.0, "backward": 73.0},
         "cells": {"forward": {"matmul": 31.0}, "backward": {"attention": 13.0, "matmul": 60.0}}, "scopes": {}}
    text = gap.sentence(a, b, gap.rows(a, b))
    assert "325% backward / attention" in text
    assert "other way: forward / matmul -9.0 ms (jax/jit slower there)" in text
