"""explain on real GPU traces recorded by others (public repositories) and by us (an H200): each is read,
its steps found, >= 90% of its device kernel time categorized, and no category it is known to hold goes
missing. Fixtures and their sources: tests/explain/fixtures/README.md."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.explain.typed import plain, side
from twinbench.cli import app
from twinbench.explain import gap, taxonomy, trace_file
from twinbench.explain.breakdown import PHASES

FIX = Path(__file__).parent / "fixtures"

#: fixture -> (steps found at least, device, categories it must hold, phases that must hold time)
CASES = {
    "hta_trace_diff_control.json.gz": (2, "GPU", {"matmul", "collectives", "element-wise", "data movement",
                                                  "normalization", "optimizer"}, {"forward", "backward"}),
    "hta_trace_diff_test.json.gz": (2, "GPU", {"matmul", "collectives", "element-wise", "data movement",
                                               "optimizer"}, {"forward", "backward"}),
    "hta_nccl_data.json.gz": (3, "GPU", {"matmul", "collectives", "normalization", "element-wise", "optimizer"},
                              {"forward", "backward", "optimizer"}),
    "hta_triton_example.json.gz": (1, "GPU", {"element-wise"}, {"forward"}),
    "hta_amd_mi250_minitoy_train.json.gz": (2, "GPU", {"matmul", "element-wise", "reductions", "optimizer"},
                                            {"forward", "backward"}),
    "tracelens_jax_te_fused_attn.xplane.pb.gz": (5, "GPU", {"attention", "matmul", "reductions"},
                                                 {"forward", "backward"}),
    "tracelens_mi300_jax_conv.xplane.pb.gz": (4, "GPU", {"matmul", "data movement"}, set()),
    "h200_torch_eager_bf16.json.gz": (2, "GPU", {"matmul", "attention", "normalization", "optimizer",
                                                 "element-wise", "reductions", "data movement"},
                                      {"forward", "backward", "optimizer"}),
    "h200_torch_compile_bf16.json.gz": (3, "GPU", {"matmul", "attention", "normalization", "optimizer",
                                                   "element-wise", "reductions", "data movement"},
                                        {"forward", "backward", "optimizer"}),
    "h200_jax_jit_bf16.xplane.pb.gz": (3, "GPU", {"matmul", "attention", "optimizer", "element-wise",
                                                  "reductions", "data movement"},
                                       {"forward", "backward", "optimizer"}),
    "h200_jax_jit_bf16_cudnn.xplane.pb.gz": (3, "GPU", {"matmul", "attention", "element-wise", "reductions"},
                                             set()),
}
HLO = {"h200_jax_jit_bf16.xplane.pb.gz": str(FIX / "h200_jax_jit_bf16.hlo.txt.gz")}


@functools.cache
def explained(name: str) -> dict:
    return plain(gap.explain_trace(str(FIX / name), hlo=HLO.get(name)))


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_real_gpu_trace_is_explained(name: str) -> None:
    steps, device, cats, phases = CASES[name]
    e = explained(name)
    assert e["steps_traced"] >= steps and e["steps_used"] >= 1, e["step_method"]
    assert e["device"].startswith(device)
    assert e["categorized_share"] >= 0.9, e["other"]
    held = {c for row in e["cells"].values() for c, v in row.items() if v > 0}
    assert cats <= held, f"missing: {cats - held}"
    assert {p for p in PHASES if e["trace"][p] > 0} >= phases
    assert sum(e["trace"].values()) == pytest.approx(e["step_ms"], rel=1e-6)
    assert "idle" in e["cells"].get("rest", {}) or e["trace"]["rest"] >= 0
    assert "between kernels" in e["idle"]


def test_a_triton_kernel_launched_by_the_driver_is_charged_to_its_op() -> None:
    """HTA's triton_example: the kernel's launch is a cuda_driver cuLaunchKernel, not a cuda_runtime one."""
    _, _, b = trace_file.read(str(FIX / "hta_triton_example.json.gz"))
    (op,) = b.top_ops(1)
    assert op.name.startswith("triton_poi_fused") and op.op == "triton_poi_fused_add_cos_sin_0"
    assert op.phase == "forward" and op.shapes


def test_one_device_of_eight_not_their_sum() -> None:
    """TraceLens' MI300 conv profile has kernels on 8 GPU planes: one is attributed, and the output says so."""
    one = plain(gap.explain_trace(str(FIX / "tracelens_mi300_jax_conv.xplane.pb.gz")))
    other = plain(gap.explain_trace(str(FIX / "tracelens_mi300_jax_conv.xplane.pb.gz"), device=3))
    assert any("8 devices" in n and "device 0 shown" in n for n in one["notes"])
    assert one["device"] == "GPU 0" and other["device"] == "GPU 3"
    busy = sum(v for row in one["cells"].values() for c, v in row.items() if c != "idle")
    assert busy < 1.0  # ms per step: one device's kernels (all eight would be ~8x)


def test_two_traces_give_a_gap_table_whose_rows_sum_to_the_gap() -> None:
    """HTA's trace_diff pair (A100 training, control against test)."""
    a, b = explained("hta_trace_diff_control.json.gz"), explained("hta_trace_diff_test.json.gz")
    out = plain(gap.pair(side(a), side(b)))
    assert sum(r["diff_ms"] for r in out["rows"] if r["level"] == 0) == pytest.approx(out["gap_ms"], rel=1e-6)
    assert out["gap_ms"] == pytest.approx(b["step_ms"] - a["step_ms"])


def test_two_traces_on_the_command_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["explain", str(FIX / "hta_amd_mi250_minitoy_train.json.gz"),
                                   str(FIX / "hta_triton_example.json.gz"), "--json", str(tmp_path / "e.json")])
    assert res.exit_code == 0, res.output
    out = json.loads((tmp_path / "e.json").read_text())
    assert sum(r["diff_ms"] for r in out["rows"] if r["level"] == 0) == pytest.approx(out["gap_ms"], rel=1e-6)
    assert "from ProfilerStep events" in res.output and "gap:" in res.output
    assert "idle = the device idle between kernels within the step" in res.output


def test_one_trace_gives_its_table_and_top_ops() -> None:
    res = CliRunner().invoke(app, ["explain", str(FIX / "h200_jax_jit_bf16_cudnn.xplane.pb.gz")])
    assert res.exit_code == 0, res.output
    assert "top ops" in res.output and "cudnn" in res.output and "StepTraceAnnotation" in res.output


def _cpu_trace(path: Path, steps: bool = True) -> str:
    ev = []
    for i in range(3):
        t = i * 100.0
        if steps:
            ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1,
                       "ts": t, "dur": 90.0})
        ev.append({"ph": "X", "cat": "cpu_op", "name": f"aten::op{i}", "pid": 1, "tid": 1, "ts": t + 1, "dur": 50})
    path.write_text(json.dumps({"traceEvents": ev}))
    return str(path)


@pytest.mark.parametrize("case", ["not a trace", "no steps", "device on a CPU trace", "no such rank",
                                  "unknown marker"])
def test_bad_trace_input_is_one_line_and_exit_2(tmp_path: Path, case: str) -> None:
    trace = _cpu_trace(tmp_path / "rank0.json", steps=case != "no steps")
    args = {"not a trace": [str(FIX / "trim.py")], "no steps": [trace],
            "device on a CPU trace": [trace, "--device", "0"], "no such rank": [str(tmp_path), "--rank", "5"],
            "unknown marker": [trace, "--step-marker", "train_step"]}[case]
    res = CliRunner().invoke(app, ["explain", *args])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1, res.output


def test_a_cpu_trace_and_its_step_marker(tmp_path: Path) -> None:
    e = plain(gap.explain_trace(_cpu_trace(tmp_path / "t.json"), step_marker="ProfilerStep"))
    assert e["device"] == "CPU" and e["steps_traced"] == 3 and "--step-marker" in e["step_method"]


def test_kernel_names_tell_their_category() -> None:
    k = taxonomy.kernel
    assert k("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64") == "matmul"
    assert k("nvjet_sm90_tss_256x128_64x4_1x2_h_bz_coopA_NNT") == "matmul"
    assert k("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>") == "matmul"
    assert k("Cijk_Alik_Bljk_BBS_BH_MT256x256x64") == "matmul"
    assert k("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)") == "collectives"
    assert k("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits>") == "attention"
    assert k("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16") == "attention"
    assert k("triton_tem_fused_mm_3") == "matmul"
    assert k("triton_per_fused__log_softmax_nll_loss_7") == "reductions"
    assert k("triton_red_fused_native_layer_norm_0") == "normalization"
    assert k("triton_poi_fused_clone_2") == "data movement"
    assert k("triton_poi_fused_add_gelu_4") == "element-wise"
    assert k("loop_add_fusion_3") == "element-wise" and k("input_reduce_fusion") == "reductions"
    assert k("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>") == ""
    assert taxonomy.custom_call("__cublas$lt$matmul") == "matmul"
    assert taxonomy.custom_call("__cudnn$fmhaSoftmaxBackward") == "attention"
    assert taxonomy.jax_op_name("jit(f)/transpose(jvp(block0))/attn/dot_general") == "matmul"


def test_an_xla_dump_directory_gives_the_module_the_trace_ran(tmp_path: Path) -> None:
    """An --xla_dump_to directory holds every module a process compiled: the one the trace spent its time in
    (jit_train_step here) is read, not the largest (another program's dump beside it)."""
    import gzip

    step = gzip.decompress((FIX / "h200_jax_jit_bf16.hlo.txt.gz").read_bytes())
    (tmp_path / "module_0007.jit_train_step.sm_90_gpu_after_optimizations.txt").write_bytes(step)
    decoy = b"HloModule jit_step\n" + b"// padding\n" * (len(step) // 5)
    (tmp_path / "module_0192.jit_step.cpu_after_optimizations.txt").write_bytes(decoy)
    _, _, b = trace_file.read(str(FIX / "h200_jax_jit_bf16.xplane.pb.gz"), hlo=str(tmp_path))
    assert any("module_0007.jit_train_step" in n for n in b.notes), b.notes
    text, where = trace_file.hlo_text(str(tmp_path), FIX, module="")  # no module known: the largest
    assert "jit_step" in where and text.startswith("HloModule jit_step")
