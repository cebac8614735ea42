"""The roofline's arithmetic, the datasheets, the HLO fusion model, calibration fitting and the devices curve."""

from __future__ import annotations

import itertools
import json
import math

import pytest

from twinbench.predict import calibration, datasheets, hlo, scaling
from twinbench.predict.roofline import Efficiency, Op, op_ms, roofline

SHEET = datasheets.Datasheet("toy", "Toy", "tpu", {"bf16": 100.0, "fp32": 10.0}, 1000.0, 16.0, 100.0, "ICI")


def test_each_op_costs_the_longer_of_its_math_and_its_bytes_plus_its_overhead():
    eff = Efficiency(matmul=0.5, memory=0.5, overhead_us=2.0)
    mm = Op("mm", "matmul", flops=1e12, bytes=1e6, dtype="bf16")       # 1e12 / 50e12 = 20 ms; bytes 0.002 ms
    ew = Op("ew", "fused", bytes=1e9, kernels=3, count=2)             # 1e9 / 500e9 = 2 ms, +6 µs, twice
    fp = Op("fp", "matmul", flops=1e10, bytes=0.0, dtype="f32")        # 1e10 / 5e12 = 2 ms at the fp32 peak
    assert op_ms(mm, SHEET, eff).ms == pytest.approx(20.0 + 0.002)
    assert op_ms(mm, SHEET, eff).bound == "compute"
    assert op_ms(ew, SHEET, eff).ms == pytest.approx(2 * (2.0 + 0.006))
    assert op_ms(ew, SHEET, eff).bound == "memory"
    assert op_ms(fp, SHEET, eff).ms == pytest.approx(2.0 + 0.002)
    tiny = Op("tiny", "fused", bytes=10.0)
    assert op_ms(tiny, SHEET, eff).bound == "overhead"
    r = roofline([mm, ew, fp], SHEET, eff)
    assert r.step_ms == pytest.approx(20.002 + 4.012 + 2.002)
    assert r.flops == 1e12 + 1e10
    assert r.by_kind()["fused"] == pytest.approx(4.012)
    assert r.dominant(1)[0][0] == "mm"


def test_datasheet_lookup_and_record_labels():
    v5e = datasheets.lookup("TPU-v5e")
    assert v5e.platform == "tpu" and v5e.peak("bf16") == 197e12 and v5e.hbm_gib == 16.0
    assert v5e.peak("f32") == pytest.approx(197e12 / 6, rel=0.01)
    from twinbench.measure.peak import DATASHEET_TFLOPS

    assert datasheets.lookup("h100").tflops["bf16"] == DATASHEET_TFLOPS["H100 SXM"]["bf16"]  # measure's figure
    assert datasheets.for_label("TPU v5 lite") == "tpu-v5e"
    assert datasheets.for_label("NVIDIA H200") == "h200"
    assert datasheets.for_label("Intel Xeon") is None
    with pytest.raises(datasheets.UnknownDevice, match=r"unknown device .tpu-v9."):
        datasheets.lookup("tpu-v9")
    h200 = datasheets.lookup("h200")
    assert h200.allreduce_gbps(8)[1].startswith("NVLink") and "InfiniBand" in h200.allreduce_gbps(16)[1]


HLO = """HloModule toy

add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

double {
  p = f32[4,8]{1,0} parameter(0)
  ROOT d = f32[4,8]{1,0} add(p, p)
}

ENTRY main {
  x = f32[4,16]{1,0} parameter(0)
  w = f32[16,8]{1,0} parameter(1)
  xb = bf16[4,16]{1,0} convert(x)
  wb = bf16[16,8]{1,0} convert(w)
  y = bf16[4,8]{1,0} dot(xb, wb), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  yf = f32[4,8]{1,0} convert(y)
  c = f32[] constant(2)
  cb = f32[4,8]{1,0} broadcast(c), dimensions={}
  z = f32[4,8]{1,0} multiply(yf, cb)
  e = f32[4,8]{1,0} exponential(z)
  zero = f32[] constant(0)
  r = f32[4]{0} reduce(e, zero), dimensions={1}, to_apply=add_f32
  dd = f32[4,8]{1,0} call(e), to_apply=double
  ROOT t = (f32[4]{0}, f32[4,8]{1,0}) tuple(r, dd)
}
"""


def test_hlo_ops_are_fused_the_way_a_tpu_compiler_would():
    flat = hlo.flatten(hlo.parse(HLO))
    assert "dd/d" in {i.name for i in flat.instrs}  # the call is inlined
    ops = hlo.fused_ops(flat)
    (mm,) = [o for o in ops if o.kind == "matmul"]
    assert mm.flops == 2 * 4 * 8 * 16 and mm.dtype == "bf16"
    assert mm.bytes == 4 * 16 * 2 + 16 * 8 * 2 + 4 * 8 * 2  # its bf16 operands and result
    fused = sorted((o for o in ops if o.kind == "fused"), key=lambda o: o.bytes)
    # convert(x), convert(w): each reads f32 and writes bf16; convert-multiply-exp-reduce-add is one kernel:
    # reads y (bf16), writes the reduction and the doubled tensor (the constant's broadcast is free)
    assert [o.bytes for o in fused] == [4 * 8 * 2 + 4 * 4 + 4 * 8 * 4, 4 * 16 * 6, 16 * 8 * 6]
    assert max(fused, key=lambda o: o.bytes).kernels == 1


def test_a_loop_body_runs_its_trip_count():
    text = """HloModule loop

cond {
  s = (s32[], f32[8]{0}) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(12)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  s = (s32[], f32[8]{0}) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  v = f32[8]{0} get-tuple-element(s), index=1
  e = f32[8]{0} exponential(v)
  ROOT t = (s32[], f32[8]{0}) tuple(i, e)
}

ENTRY main {
  init = (s32[], f32[8]{0}) parameter(0)
  ROOT w = (s32[], f32[8]{0}) while(init), condition=cond, body=body
}
"""
    ops = hlo.fused_ops(hlo.flatten(hlo.parse(text)))
    (exp,) = [o for o in ops if "exponential" in o.label]
    assert exp.count == 12


def _point(device: str, framework: str, measured: float, predicted: float | None) -> calibration.Point:
    return calibration.Point(device, framework, "jit", "tiny", 4, 32, measured, predicted_ms=predicted)


def test_calibration_fits_measured_over_predicted_per_platform_and_framework():
    pts = [_point("tpu-v5e", "jax", 120.0, 100.0), _point("tpu-v4", "jax", 90.0, 100.0),
           _point("h200", "jax", 50.0, 25.0), _point("h200", "torch", 10.0, None)]
    fit = calibration.fit(pts)
    assert fit[("tpu", "jax")] == pytest.approx(math.sqrt(1.2 * 0.9))
    assert fit[("gpu", "jax")] == pytest.approx(2.0)
    assert ("gpu", "torch") not in fit  # no prediction: nothing to fit
    bar = calibration.error_bar(pts, ("tpu", "jax"))
    assert bar is not None and bar.n == 2 and bar.max_abs == pytest.approx(1 - 1 / 1.2)
    assert bar.errors == [round(1 / 1.2 - 1, 3), round(1 / 0.9 - 1, 3)]
    assert calibration.error_bar(pts, ("cpu", "jax")) is None


def test_shipped_points_parse_and_a_bad_line_is_named(tmp_path):
    pts = calibration.shipped()
    assert any(p.device == "tpu-v5e" and p.step_ms == 66.28 for p in pts)
    assert all(p.date and p.source for p in pts)  # every shipped figure names where and when it was measured
    assert all(p.device in datasheets.DEVICES for p in pts)
    with pytest.raises(calibration.CalibrationError, match=r"x\.jsonl line 2"):
        calibration.parse_points(json.dumps(pts[0].__dict__) + "\n{\"device\": 1}\n", "x.jsonl")


def test_points_from_records(tmp_path):
    rec = {"framework": "jax", "strategy": "jit+bf16", "preset": "tiny", "batch": 4, "seq": 32, "status": "ok",
           "step_ms": 12.5, "device": "TPU v5 lite", "platform": "tpu", "run_id": "a", "n_params": 1}
    other = {**rec, "device": "NVIDIA A10G", "platform": "gpu", "run_id": "b"}
    busy = {**rec, "run_id": "c", "warnings": ["machine busy: other processes kept 1.7 of 2 core(s) busy"]}
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (rec, other, busy)))
    pts, skipped = calibration.points_from_records(path)
    assert [(p.device, p.step_ms) for p in pts] == [("tpu-v5e", 12.5)]
    assert pts[0].memory_bytes is None  # no compiled program's figures in the record
    assert skipped[0] == "NVIDIA A10G: no datasheet" and "busy machine" in skipped[1] and len(skipped) == 2


def test_devices_curve_adds_the_allreduce_and_its_overlap():
    grad = 4e8  # 100M fp32 gradients
    ms, ar, _ = scaling.step_ms(100.0, grad, 4, SHEET, "torch", "ddp")
    moved = 2 * 3 / 4 * grad
    assert ar == pytest.approx(moved / (100e9 * scaling.LINK_EFFICIENCY) * 1e3 + scaling.LATENCY_MS["tpu"])
    assert ms == pytest.approx(100.0 + ar * (1 - scaling.overlap("torch", "ddp")))
    curve = scaling.curve(100.0, grad, SHEET, "jax", "mesh-dp", 8)
    assert [p.devices for p in curve] == [1, 2, 4, 8]
    assert curve[0].speedup == 1.0 and all(a.speedup < b.speedup for a, b in itertools.pairwise(curve))
    assert all(p.speedup <= p.devices for p in curve)
    cpu = datasheets.cpu_here({"fp32": 1.0, "bf16": 1.0}, 10.0, 8.0, "cpu")
    flat = scaling.curve(100.0, grad, cpu, "jax", "mesh-dp", 4)  # a CPU's devices share its cores
    assert all(p.speedup <= 1.0 for p in flat)


SOFTMAX = """HloModule softmax

add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[16,64]{1,0} parameter(0)
  e = f32[16,64]{1,0} exponential(x)
  zero = f32[] constant(0)
  s = f32[16]{0} reduce(e, zero), dimensions={1}, to_apply=add_f32
  sb = f32[16,64]{1,0} broadcast(s), dimensions={0}
  ROOT p = f32[16,64]{1,0} divide(e, sb)
}
"""


def test_gpu_kernels_never_contain_a_path_through_another_kernel():
    flat = hlo.flatten(hlo.parse(SOFTMAX))
    tpu, gpu = hlo.fused_ops(flat), hlo.fused_ops(flat, acyclic=True)
    assert len(tpu) == 1  # exp, sum and divide in one kernel: reads x, writes p; the sum written and read back
    assert tpu[0].bytes == 16 * 64 * 4 * 2 + 2 * 16 * 4
    # on a GPU the divide waits for the sum: exp+sum is one kernel, the divide another, exp's result between
    assert len(gpu) == 2 and sum(op.bytes for op in gpu) > tpu[0].bytes
    low, high = hlo.materialized_peak(flat, acyclic=False), hlo.materialized_peak(flat, acyclic=True)
    assert low < high  # the exp's result is kept between the GPU's two kernels


def test_a_slice_reads_only_what_it_takes_and_a_lone_reshape_is_free():
    text = """HloModule slices

ENTRY main {
  stacked = f32[12,64,64]{2,1,0} parameter(0)
  i = s32[] parameter(1)
  zero = s32[] constant(0)
  w = f32[1,64,64]{2,1,0} dynamic-slice(stacked, i, zero, zero), dynamic_slice_sizes={1,64,64}
  two = f32[] constant(2)
  twos = f32[1,64,64]{2,1,0} broadcast(two), dimensions={}
  m = f32[1,64,64]{2,1,0} multiply(w, twos)
  r = f32[12,4096]{1,0} reshape(stacked)
  ROOT t = (f32[1,64,64]{2,1,0}, f32[12,4096]{1,0}) tuple(m, r)
}
"""
    ops = hlo.fused_ops(hlo.flatten(hlo.parse(text)))
    (fused,) = [o for o in ops if o.kind == "fused"]
    assert fused.bytes == 64 * 64 * 4 * 2 + 4  # one layer's slice read, the result written, the index


def test_a_tensor_kept_on_chip_is_never_materialized():
    """A fused kernel the target runs in place of some ops (a fused attention's scores) keeps their tensors in
    on-chip memory: the peak loses exactly the bytes of the one that was live there."""
    text = """HloModule onchip

add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[16,64]{1,0} parameter(0)
  w = f32[64,256]{1,0} parameter(1)
  s = f32[16,256]{1,0} dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  e = f32[16,256]{1,0} exponential(s)
  zero = f32[] constant(0)
  ROOT r = f32[16]{0} reduce(e, zero), dimensions={1}, to_apply=add_f32
}
"""
    flat = hlo.flatten(hlo.parse(text))
    inputs = 16 * 64 * 4 + 64 * 256 * 4
    scores = 16 * 256 * 4
    for acyclic in (False, True):
        assert hlo.materialized_peak(flat, acyclic) == inputs + scores  # the dot's result, read by the exp
        kept = hlo.materialized_peak(flat, acyclic, on_chip=lambda ins: ins.opcode == "dot")
        assert kept == inputs + 16 * 4  # only the reduction's result is written


def test_memory_points_are_the_compiled_programs_peak_and_have_their_own_error_bar(tmp_path):
    compiled = {"argument": 100, "output": 60, "alias": 50, "temp": 400, "generated_code": 7}
    rec = {"framework": "jax", "strategy": "jit+bf16", "preset": "tiny", "batch": 4, "seq": 32, "status": "ok",
           "step_ms": 12.5, "device": "TPU v5 lite", "platform": "tpu", "run_id": "a", "n_params": 1,
           "peak_mem_bytes": 3, "memory_breakdown": {"compiled": compiled}}
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    (pt,), _ = calibration.points_from_records(path)
    assert pt.memory_bytes == 100 + 60 - 50 + 400 + 7  # not the allocator's peak_mem_bytes
    pt.predicted_memory_bytes = 1.25 * pt.memory_bytes
    other = _point("tpu-v5e", "jax", 10.0, 10.0)
    assert calibration.error_bar([pt, other], ("tpu", "jax"), memory=True) == calibration.ErrorBar(
        n=1, errors=[0.25], max_abs=pytest.approx(0.25))
    assert calibration.error_bar([pt, other], ("tpu", "jax")).n == 1  # the step's: the other point only


def test_the_upper_bound_recomputes_a_cheap_op_from_its_inputs_instead_of_storing_it():
    """An fp32 copy of bf16 logits, read again after their max: XLA converts again in the later kernel, so the
    bf16 input stays live, not the fp32 copy (twice its size)."""
    text = """HloModule recompute

max_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}

add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = bf16[16,64]{1,0} parameter(0)
  w = bf16[64,256]{1,0} parameter(1)
  y = bf16[16,256]{1,0} dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  yf = f32[16,256]{1,0} convert(y)
  low = f32[] constant(-inf)
  m = f32[16]{0} reduce(yf, low), dimensions={1}, to_apply=max_f32
  mb = f32[16,256]{1,0} broadcast(m), dimensions={0}
  d = f32[16,256]{1,0} subtract(yf, mb)
  e = f32[16,256]{1,0} exponential(d)
  zero = f32[] constant(0)
  s = f32[16]{0} reduce(e, zero), dimensions={1}, to_apply=add_f32
  ROOT t = (f32[16]{0}) tuple(s)
}
"""
    flat = hlo.flatten(hlo.parse(text))
    inputs = 16 * 64 * 2 + 64 * 256 * 2
    # the bf16 y kept until the subtract re-converts it, beside the max; never the fp32 yf
    assert hlo.materialized_peak(flat, acyclic=True) == inputs + 16 * 256 * 2 + 16 * 4


def test_an_ops_fixed_time_is_added_to_its_roofline_every_run():
    eff = Efficiency(1.0, 1.0, 0.0, 1.0)
    base = Op("k", "attention", flops=1e12, bytes=0.0, dtype="bf16")
    timed = Op("k", "attention", flops=1e12, bytes=0.0, dtype="bf16", fixed_us=250.0, count=2)
    assert op_ms(timed, SHEET, eff).ms == pytest.approx(op_ms(base, SHEET, eff).ms * 2 + 0.5)


def test_the_splash_kernel_computes_the_blocks_its_grid_visits():
    """A causal kernel computes the diagonal's blocks in full: n (n + 1) / 2 of n^2 (the block follows the
    sequence: 512 up to 1024 tokens and beyond, 128 at 128)."""
    from twinbench.predict.attention import splash_blocks

    assert splash_blocks(1024, causal=True) == (3, 4)  # two blocks of 512: three quarters, not half
    assert splash_blocks(2048, causal=True) == (10, 16)
    assert splash_blocks(512, causal=False) == (1, 1) and splash_blocks(128, causal=True) == (1, 1)
    assert splash_blocks(1024, causal=False) == (4, 4)


def test_a_splash_kernel_costs_its_computed_blocks_and_a_fixed_time_per_grid_step():
    from twinbench.predict import attention

    shape = {"layers": 2, "batch": 4, "heads": 3, "seq": 1024, "head_dim": 64, "causal": True}
    plain, splash = attention.attention_op(**shape), attention.attention_op(**shape, splash=True)
    assert plain.flops == 4.0 * 4 * 3 * 1024 * 1024 * 64 * 0.5 * 3.5 and plain.fixed_us == 0.0
    assert splash.flops == plain.flops * 1.5  # 3 of 4 blocks against half the square
    assert splash.fixed_us == pytest.approx(2 * 4 * 3 * 3 * attention.SPLASH_STEP_US)  # fwd + fused bwd
    # the A/B the step's cost comes from: BERT-base at 512 tokens, blocks of 256 (4 a head) against 512 (1)
    ab = attention.attention_op(layers=1, batch=32, heads=12, seq=512, head_dim=64, causal=False, splash=True)
    assert attention.SPLASH_BLOCKS_AB[2] == 3 * ab.fixed_us / attention.SPLASH_STEP_US
    fused = attention.fused_attention([], **shape, splash=True)
    assert fused[0].fixed_us == splash.fixed_us and "grid steps" in fused[0].label


def test_the_splash_efficiency_gives_back_the_in_step_time_it_was_taken_from():
    """The kernel's fraction of the peak is GPT-2's in-step attention time less its grid steps, over the FLOPs of
    the blocks it computes: costed back on the v5e's datasheet, that op takes the measured time."""
    from twinbench.predict import attention

    g = attention.SPLASH_IN_STEP
    op = attention.attention_op(layers=g["layers"], batch=g["batch"], heads=g["heads"], seq=g["seq"],
                                head_dim=g["head_dim"], causal=g["causal"], splash=True)
    eff = Efficiency(0.95, 0.85, 0.0, attention.attention_efficiency("tpu"))
    assert op_ms(op, datasheets.lookup("tpu-v5e"), eff).ms == pytest.approx(g["ms"], rel=1e-6)
    assert 0.0 < attention.attention_efficiency("tpu") < 1.0
