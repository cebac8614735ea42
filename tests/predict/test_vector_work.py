"""Vector work: the element-wise ops a kernel computes, and the kernels of a program compiled for a TPU.

The unoptimized program's products carry the element-wise work XLA:TPU recomputes inside them (an exact GELU in
the product that reads it), back to the nearest written tensor; a fused kernel is bound by its bytes or its
vector work. The compiled program is read kernel by kernel: a product written as a padded-window convolution
counts what it multiplies, a tiled array the bytes it takes, an array an asynchronous copy placed on the chip
none."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import pytest

from twinbench.hlo_text import parse
from twinbench.predict import hlo, tpu_compile
from twinbench.predict.datasheets import lookup
from twinbench.predict.roofline import Efficiency, Op, op_ms


def _ops(fn, *args) -> list[Op]:
    text = jax.jit(fn).lower(*args).as_text(dialect="hlo")
    return hlo.fused_ops(hlo.flatten(parse(text)))


def _gelu_ops() -> int:
    """The exact GELU's element-wise ops an element, as JAX lowers it (its erf is a polynomial)."""
    text = jax.jit(lambda v: jax.nn.gelu(v, approximate=False)).lower(jnp.ones((4, 8), jnp.bfloat16)).as_text(
        dialect="hlo")
    flat = hlo.flatten(parse(text))
    by = {i.name: i for i in flat.instrs}
    return int(sum(hlo._vector_ops(i, by) for i in flat.instrs) / 32)


def test_a_product_carries_the_element_wise_work_it_reads_and_a_reduction_stops_it():
    x = jnp.ones((hlo.PACKED_ROWS, 32), jnp.bfloat16)
    w = jnp.ones((32, 16), jnp.bfloat16)
    per = _gelu_ops()
    assert per > 40  # the erf polynomial, not one op
    [mm] = [o for o in _ops(lambda x, w: jax.nn.gelu(x, approximate=False) @ w, x, w) if o.kind == "matmul"]
    assert mm.vector_ops == per * x.size
    # the same product reading a layer norm's output: the normalisation is recomputed, the statistics (a reduction,
    # written) are not, nor what they read
    def norm(x):
        x = x.astype(jnp.float32)
        return ((x - x.mean(-1, keepdims=True)) * jax.lax.rsqrt(x.var(-1, keepdims=True) + 1e-5)).astype(jnp.bfloat16)
    [mm] = [o for o in _ops(lambda x, w: norm(x) @ w, x, w) if o.kind == "matmul"]
    assert 0 < mm.vector_ops <= 6 * x.size
    # with the GPU's acyclic kernels the product reads a written tensor and carries nothing
    text = jax.jit(lambda x, w: jax.nn.gelu(x, approximate=False) @ w).lower(x, w).as_text(dialect="hlo")
    gpu = hlo.fused_ops(hlo.flatten(parse(text)), acyclic=True)
    assert [o.vector_ops for o in gpu if o.kind == "matmul"] == [0.0]
    assert sum(o.vector_ops for o in gpu if o.kind == "fused") >= per * x.size


def test_a_branchy_producer_with_more_rows_than_bits_is_computed_once_and_written():
    """The erf polynomial branches (a compare): with more rows than XLA:TPU keeps branch outcomes for as bits, the
    GELU is computed once by its fused kernel and both products read it; a branch-free producer (tanh's GELU) is
    still recomputed in each, whatever its rows."""
    per = _gelu_ops()
    w = jnp.ones((32, 16), jnp.bfloat16)

    def two_products(x, w):  # the forward product and the weight gradient's both read the activation
        a = jax.nn.gelu(x, approximate=False)
        return a @ w, a.T @ x

    for rows, stored in ((hlo.PACKED_ROWS, False), (hlo.PACKED_ROWS + 1, True)):
        x = jnp.ones((rows, 32), jnp.bfloat16)
        ops = _ops(two_products, x, w)
        in_products = sum(o.vector_ops for o in ops if o.kind == "matmul")
        in_kernels = sum(o.vector_ops for o in ops if o.kind == "fused")
        assert in_products == (0 if stored else 2 * per * x.size), rows
        assert (in_kernels >= per * x.size) == stored, rows
    x = jnp.ones((hlo.PACKED_ROWS + 1, 32), jnp.bfloat16)
    [mm] = [o for o in _ops(lambda x, w: jax.nn.gelu(x, approximate=True) @ w, x, w) if o.kind == "matmul"]
    assert mm.vector_ops > 5 * x.size  # tanh's polynomial, recomputed in the product


def test_vector_work_bounds_a_kernel_and_adds_to_a_product_past_its_overlap():
    sheet = lookup("tpu-v5e")
    eff = Efficiency(matmul=1.0, memory=1.0, overhead_us=0.0)
    rate = sheet.vector_ops_per_s
    # a fused kernel: the longer of its bytes and its vector work
    light = op_ms(Op("a", "fused", bytes=1e6, vector_ops=rate * 1e-6), sheet, eff)
    heavy = op_ms(Op("b", "fused", bytes=1e6, vector_ops=rate * 1e-2), sheet, eff)
    assert light.bound == "memory" and heavy.bound == "vector" and heavy.ms == pytest.approx(10.0)
    # a product: its math, plus the vector work beyond the share that hides under it
    flops = sheet.peak("bf16") * 1e-3  # 1 ms of math
    hidden = op_ms(Op("c", "matmul", flops, vector_ops=rate * 0.1e-3), sheet, eff)
    added = op_ms(Op("d", "matmul", flops, vector_ops=rate * 1e-3), sheet, eff)
    assert hidden.ms == pytest.approx(1.0)
    assert added.ms == pytest.approx(1.0 + 1.0 - eff.vector_overlap)


def test_another_tpus_vector_rate_follows_its_matrix_peak_and_a_gpus_is_its_fp32_peak():
    v5e, v6e, h100 = lookup("tpu-v5e"), lookup("tpu-v6e"), lookup("h100")
    assert v6e.vector_ops_per_s / v5e.vector_ops_per_s == pytest.approx(v6e.tflops["bf16"] / v5e.tflops["bf16"])
    assert h100.vector_ops_per_s == h100.tflops["fp32"] * 1e12


def _conv_module(conv: str, lhs: str, rhs: str) -> str:
    return (f"HloModule m\n\nENTRY %main (p0: {lhs}, p1: {rhs}) -> f32[1] {{\n"
            f"  %p0 = {lhs} parameter(0)\n  %p1 = {rhs} parameter(1)\n  {conv}\n"
            "  ROOT %c = f32[1] constant({0})\n}\n")


def test_a_product_written_as_a_padded_window_counts_what_it_multiplies():
    """XLA:TPU's projection of a [64, 128, 768] activation to 12 heads of 64, written as a convolution whose
    window of 64 slides over a dimension of size 1 padded by 63 on each side: 2 x 8192 x 768 x 768 FLOPs, not the
    window's 64 times that."""
    conv = ("%conv = bf16[12,64,64,128]{3,1,0,2} convolution(%p0, %p1), window={size=64x1 pad=63_63x0_0 "
            "rhs_reversal=1x0}, dim_labels=1bf0_0oi1->1b0f")
    mod = parse(_conv_module(conv, "bf16[12,64,768,1]", "bf16[64,128,768,1]"))
    by = {i.name: i for i in mod.computations[mod.entry]}
    assert hlo._dot_flops(by["conv"], by) == 2 * 64 * 128 * 768 * 768


@pytest.mark.parametrize("pad", [0, 1])
def test_a_padded_convolution_counts_only_the_taps_that_land_on_the_input(pad):
    n, k, cin, cout, batch = 8, 3, 4, 5, 2
    out = n + 2 * pad - k + 1
    conv = (f"%conv = f32[{batch},{out},{out},{cout}] convolution(%p0, %p1), window={{size={k}x{k} "
            f"pad={pad}_{pad}x{pad}_{pad}}}, dim_labels=b01f_01io->b01f")
    mod = parse(_conv_module(conv, f"f32[{batch},{n},{n},{cin}]", f"f32[{k},{k},{cin},{cout}]"))
    by = {i.name: i for i in mod.computations[mod.entry]}
    taps = sum(1 for p in range(out) for t in range(k) if 0 <= p + t - pad < n)  # one dim, by brute force
    assert hlo._dot_flops(by["conv"], by) == 2 * batch * cout * cin * taps * taps


COMPILED = """HloModule jit_step

%nested (q: f32[128,256]) -> f32[128,256] {
  %q = f32[128,256]{1,0:T(8,128)} parameter(0)
  %e = f32[128,256]{1,0:T(8,128)} exponential(%q)
  ROOT %m = f32[128,256]{1,0:T(8,128)} multiply(%e, %q)
}

%fused_product (a: f32[128,256], b: f32[256,512]) -> f32[128,512] {
  %a = f32[128,256]{1,0:T(8,128)} parameter(0)
  %inner = f32[128,256]{1,0:T(8,128)} fusion(%a), kind=kLoop, calls=%nested
  %b = f32[256,512]{1,0:T(8,128)} parameter(1)
  ROOT %d = f32[128,512]{1,0:T(8,128)} dot(%inner, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main (x: f32[128,256], w: f32[256,512], s: f32[4,128,1]) -> (f32[128,512], f32[4,128,1]) {
  %x = f32[128,256]{1,0:T(8,128)} parameter(0)
  %w = f32[256,512]{1,0:T(8,128)S(1)} parameter(1)
  %s = f32[4,128,1]{2,1,0:T(8,128)} parameter(2)
  %f = f32[128,512]{1,0:T(8,128)} fusion(%x, %w), kind=kOutput, calls=%fused_product
  %t = f32[4,128,1]{2,1,0:T(8,128)} copy(%s)
  %k = f32[4,128,1]{2,1,0:T(8,128)} custom-call(%t), custom_call_target="tpu_custom_call"
  ROOT %r = (f32[128,512]{1,0:T(8,128)}, f32[4,128,1]{2,1,0:T(8,128)}) tuple(%f, %k)
}
"""


def test_the_compiled_programs_kernels_carry_their_products_nested_vector_work_and_hbm_bytes():
    ops = {o.name: o for o in tpu_compile.compiled_ops(COMPILED)}
    assert set(ops) == {"f", "t"}  # the Mosaic kernel is the caller's; names and tuples are no kernels
    f = ops["f"]
    assert f.kind == "matmul" and f.flops == 2 * 128 * 256 * 512
    assert f.vector_ops == 2 * 128 * 256  # the nested fusion's exponential and multiply
    # the weights were placed on the chip ahead (S(1)): the product moves its input and its result only
    assert f.bytes == 4 * (128 * 256 + 128 * 512)
    # a [4, 128, 1] array tiled (8, 128) takes 128 lanes for its one: read and written, 128 times its size each
    assert ops["t"].kind == "fused" and ops["t"].bytes == 2 * 4 * 4 * 128 * 128


def test_hbm_bytes_leave_out_what_lives_on_the_chip_and_pad_to_the_tiles():
    mod = parse(COMPILED)
    hbm = {i.name: tpu_compile.hbm_bytes(i) for i in mod.computations[mod.entry]}
    assert hbm["w"] == 0.0
    assert hbm["x"] == 4 * 128 * 256
    assert hbm["s"] == 4 * 4 * 128 * 128
    assert hbm["r"] == 4 * 128 * 512 + 4 * 4 * 128 * 128
    assert math.isclose(tpu_compile._tiled((3, 5), (1, 0), ":T(8,128)"), 8 * 128)
    assert tpu_compile._tiled((3, 5), (1, 0), "") == 15


LOOPED = """HloModule jit_scan

%slice_layer (w: f32[12,256,512], i: s32[]) -> f32[1,256,512] {
  %w = f32[12,256,512]{2,1,0} parameter(0)
  %i = s32[] parameter(1)
  %z = s32[] constant(0)
  ROOT %ds = f32[1,256,512]{2,1,0} dynamic-slice(%w, %i, %z, %z), dynamic_slice_sizes={1,256,512}
}

%layer (x: f32[128,256], w: f32[12,256,512], i: s32[], g: f32[12,128,512]) -> f32[12,128,512] {
  %x = f32[128,256]{1,0} parameter(0)
  %w = f32[12,256,512]{2,1,0} parameter(1)
  %i = s32[] parameter(2)
  %sl = f32[1,256,512]{2,1,0} fusion(%w, %i), kind=kLoop, calls=%slice_layer
  %b = f32[256,512]{1,0} bitcast(%sl)
  %d = f32[128,512]{1,0} dot(%x, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %db = f32[1,128,512]{2,1,0} bitcast(%d)
  %g = f32[12,128,512]{2,1,0} parameter(3)
  %z = s32[] constant(0)
  ROOT %u = f32[12,128,512]{2,1,0} dynamic-update-slice(%g, %db, %i, %z, %z)
}

%body (t: (s32[], f32[128,256], f32[12,256,512], f32[12,128,512])) -> (s32[], f32[128,256], f32[12,256,512], f32[12,128,512]) {
  %t = (s32[], f32[128,256], f32[12,256,512], f32[12,128,512]) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %x = f32[128,256]{1,0} get-tuple-element(%t), index=1
  %w = f32[12,256,512]{2,1,0} get-tuple-element(%t), index=2
  %g = f32[12,128,512]{2,1,0} get-tuple-element(%t), index=3
  %f = f32[12,128,512]{2,1,0} fusion(%x, %w, %i, %g), kind=kOutput, calls=%layer
  %one = s32[] constant(1)
  %n = s32[] add(%i, %one)
  ROOT %r = (s32[], f32[128,256], f32[12,256,512], f32[12,128,512]) tuple(%n, %x, %w, %f)
}

%cond (t: (s32[], f32[128,256], f32[12,256,512], f32[12,128,512])) -> pred[] {
  %t = (s32[], f32[128,256], f32[12,256,512], f32[12,128,512]) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %k = s32[] constant(12)
  ROOT %lt = pred[] compare(%i, %k), direction=LT
}

ENTRY %main (x: f32[128,256], w: f32[12,256,512], g: f32[12,128,512]) -> f32[12,128,512] {
  %x = f32[128,256]{1,0} parameter(0)
  %w = f32[12,256,512]{2,1,0} parameter(1)
  %g = f32[12,128,512]{2,1,0} parameter(2)
  %z = s32[] constant(0)
  %t = (s32[], f32[128,256], f32[12,256,512], f32[12,128,512]) tuple(%z, %x, %w, %g)
  %loop = (s32[], f32[128,256], f32[12,256,512], f32[12,128,512]) while(%t), condition=%cond, body=%body
  ROOT %out = f32[12,128,512]{2,1,0} get-tuple-element(%loop), index=3
}
"""


def test_a_loop_body_reads_one_layer_of_a_stacked_array_and_writes_one_in_place():
    """A scanned layer's product takes its weights by a dynamic slice (inside a fusion nested in its own) of the
    [12, ...] stack and writes its result into the stacked output in place: each trip moves one layer's bytes, not
    the stack's, and runs its trip count of times."""
    [f] = [o for o in tpu_compile.compiled_ops(LOOPED) if o.kind == "matmul"]
    assert f.count == 12 and f.flops == 2 * 128 * 256 * 512
    # x, one layer's w, one layer's result, and the trip's index
    assert f.bytes == 4 * (128 * 256 + 256 * 512 + 128 * 512) + 4


def test_a_tpu_step_synchronised_each_time_waits_for_the_hosts_dispatch_of_its_arrays():
    from twinbench.predict.datasheets import DISPATCH_US_PER_ARRAY
    from twinbench.predict.program import Program
    from twinbench.predict.roofline import roofline

    prog = Program([Op("m", "matmul", 1e9)], (0.0, 0.0), 0.0, 1, 1, "test", arguments=447)
    tpu = prog.ops_for("tpu")
    assert [o.kind for o in tpu] == ["matmul", "dispatch"]
    assert prog.ops_for("gpu") == prog.ops
    roof = roofline(tpu, lookup("tpu-v5e"), Efficiency(overhead_us=0.0))
    assert roof.by_kind()["dispatch"] == pytest.approx(447 * DISPATCH_US_PER_ARRAY["tpu"] / 1e3)
