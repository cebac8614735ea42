"""The GPU paths, exercised on the CPU with the device facts monkeypatched: devices used vs visible, datasheet
matching, the GPU matmul peak's method, CPU-only XLA flags, the environment preflight, peaks by dtype."""

from __future__ import annotations

import fnmatch
import os
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from twinbench import environment, xla_flags
from twinbench.measure import device, peak
from twinbench.record import typed
from twinbench.report.table import conditions as table_conditions


def conditions(records: list) -> list[str]:
    """The table's conditions of records built here as flat dicts (read through record.typed, as a file's are)."""
    return table_conditions(typed(records))

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("name", "model"), [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 SXM5 80GB", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", "H100 NVL"), ("NVIDIA H200", "H200 SXM"), ("NVIDIA H200 NVL", "H200 NVL"),
    ("NVIDIA A100-SXM4-80GB", "A100"), ("NVIDIA A100 80GB PCIe", "A100"), ("NVIDIA A10", "A10"),
    ("NVIDIA A10G", None), ("NVIDIA L4", "L4"), ("NVIDIA L40S", "L40S"), ("NVIDIA L40", "L40"),
    ("Tesla V100-SXM2-16GB", "V100 SXM"), ("Tesla V100-PCIE-32GB", "V100 PCIe"), ("NVIDIA B200", None),
    ("AMD EPYC 7B13", None),
])
def test_datasheet_matches_model_and_form_factor_exactly(name, model):
    assert peak.gpu_model(name) == model
    if model:
        assert peak.datasheet_tflops(name, "fp32") == peak.DATASHEET_TFLOPS[model]["fp32"]
    else:
        assert peak.datasheet_tflops(name, "bf16") is None  # unknown: no neighbour's figure


def test_h100_form_factors_get_their_own_peaks():
    pcie, sxm = peak.datasheet_tflops("NVIDIA H100 PCIe", "bf16"), peak.datasheet_tflops("NVIDIA H100 80GB HBM3", "bf16")
    assert pcie is not None and sxm is not None and pcie < sxm


def test_gpu_matmul_repeat_runs_many_calls_and_cpu_one():
    assert peak.calls_per_repeat("cpu", 0.0002) == 1
    calls = peak.calls_per_repeat("cuda", 0.0002)  # a 0.2 ms matmul: dispatch + sync would cost 5-20%
    assert calls * 0.0002 >= peak.MIN_REPEAT_S
    assert peak.calls_per_repeat("cuda", 1.0) == 1
    counted = []
    rates = peak._rates(lambda: counted.append(1), lambda: time.sleep(0.0001), 64, 3, "cuda")
    assert len(rates) == 3 and len(counted) > 2 + 3  # warm-up + estimate + several calls per repeat
    assert 16384 in peak._sizes("cuda")


def test_peak_taken_while_another_process_used_the_gpu_is_not_cached(monkeypatch):
    monkeypatch.setattr(device, "other_device_processes", lambda platform: 2)
    monkeypatch.setattr(peak, "_per_size", lambda *a, **k: {4096: [100.0] * peak.REPEATS})
    monkeypatch.setattr(peak, "framework_versions", lambda fw: {"torch": "test"})
    got = peak.lookup("torch", "cuda", "NVIDIA H200", "bf16", 1)
    assert not got.trusted and "other process" in " ".join(got.problems())
    assert got.key not in peak.read_cache()
    monkeypatch.setattr(device, "other_device_processes", lambda platform: 0)
    assert peak.lookup("torch", "cuda", "NVIDIA H200", "bf16", 1).key in peak.read_cache()


def test_one_device_run_on_an_eight_gpu_box_records_one_device(monkeypatch):
    """A single-device run used one GPU: device_count 1 (MFU against one GPU's peak), devices_visible 8."""
    from twinbench import worker
    from twinbench.plan import run_spec

    monkeypatch.setattr(device, "describe", lambda fw: ("cuda", "NVIDIA H100 80GB HBM3", 8))
    monkeypatch.setattr(peak, "for_record", lambda *a: (1.0, peak.PeakFields(None, None, None, 0)))
    spec = run_spec("tiny", "torch", "eager", {"steps": 3, "warmup": 1})
    r = worker.execute(spec, 1).flat()
    assert (r["device_count"], r["devices_visible"]) == (1, 8)
    assert r["mfu"] == pytest.approx(r["achieved_tflops"] / 1.0, rel=1e-6)
    assert r["mfu_datasheet"] == pytest.approx(r["achieved_tflops"] / 67.0, rel=1e-6)  # H100 SXM fp32
    assert r["attention_kernel"] in {"flash (CPU)", "math"}


def test_jax_memory_reads_an_addressable_device(monkeypatch):
    import jax

    class Dev:
        platform = "gpu"

        def memory_stats(self):
            return {"peak_bytes_in_use": 1234}

    monkeypatch.setattr(jax, "local_devices", lambda: [Dev()])
    monkeypatch.setattr(jax, "devices", lambda: (_ for _ in ()).throw(AssertionError("another process's device")))
    assert device.peak_memory_bytes("jax") == (1234, "device allocator peak")


def test_cpu_xla_flags_only_when_jax_runs_on_the_cpu(monkeypatch):
    assert xla_flags.cpu_backend({"JAX_PLATFORMS": "cpu"})
    assert not xla_flags.cpu_backend({"JAX_PLATFORMS": "cuda"})
    assert xla_flags.merged("--xla_dump_to=/d", "tuned", cpu=False) == "--xla_dump_to=/d"
    from twinbench.measure import platforms

    def nodes(*present: str):  # the device nodes this machine shows, matched as platforms.here() globs them
        return lambda pattern: [p for p in present if fnmatch.fnmatch(p, pattern)]

    monkeypatch.setattr(xla_flags.importlib.util, "find_spec", lambda name: name == "jax_cuda12_plugin" or None)
    monkeypatch.setattr(platforms.glob, "glob", nodes("/dev/nvidia0", "/dev/nvidiactl"))
    assert not xla_flags.cpu_backend({})  # a CUDA plugin and an NVIDIA device: JAX will take the GPU
    monkeypatch.setattr(platforms.glob, "glob", nodes())
    assert xla_flags.cpu_backend({})  # the plugin without a device falls back to the CPU
    monkeypatch.setattr(xla_flags.importlib.util, "find_spec", lambda name: name == "libtpu" or None)
    monkeypatch.setattr(platforms.glob, "glob", nodes("/dev/vfio/vfio", "/dev/vfio/3"))
    assert not xla_flags.cpu_backend({})  # libtpu and a TPU's VFIO group other than 0: the TPU, no CPU flags
    monkeypatch.setattr(platforms.glob, "glob", nodes("/dev/nvidia0"))
    monkeypatch.setenv("JAX_PLATFORMS", "cuda")
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    assert xla_flags.apply("tuned") == ""


def test_environment_floors_are_pyprojects():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    floors = dict(re.match(r"([\w-]+)>=([\w.]+)", d).groups() for d in deps)
    assert {k: floors[k] for k in environment.FLOORS} == environment.FLOORS


def test_environment_preflight_names_what_is_missing(monkeypatch):
    import importlib

    real = importlib.import_module
    monkeypatch.setattr(environment.importlib, "import_module",
                        lambda n: (_ for _ in ()).throw(ImportError("no CUDA plugin")) if n == "jax" else real(n))
    assert environment.problems() == ["jax: cannot be imported (ImportError: no CUDA plugin)"]
    monkeypatch.setattr(environment.importlib.metadata, "version", lambda n: "1.0")
    assert any("torch 1.0 is older than twinbench needs (>= 2.11)" in p for p in environment.problems())


def test_gpu_check_refuses_in_seconds_without_a_gpu(tmp_path):
    t0 = time.time()
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), str(tmp_path / "o")],
                          capture_output=True, text=True, env={**os.environ, "PYTHON": sys.executable}, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "preflight: torch" in proc.stderr and "sees no CUDA device" in proc.stderr
    assert "runs on 'cpu', not the GPU" in proc.stderr
    assert time.time() - t0 < 60 and not (tmp_path / "o" / "results.jsonl").exists()


def test_makefile_installs_jax_cuda_plugin_only_where_a_gpu_is(tmp_path):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    gpu = subprocess.run(["make", "-n", "-B", "install"], cwd=ROOT, env=env, capture_output=True, text=True).stdout
    # no nvidia-smi: the Makefile's GPU variable empty (set on the command line, which overrides the detection;
    # taking nvidia-smi's directory off PATH would take /usr/bin, and make with it, on a GPU host)
    cpu = subprocess.run(["make", "-n", "-B", "install", "GPU="], cwd=ROOT, capture_output=True, text=True).stdout
    assert "'.[test,cuda]'" in gpu and "constraints-cpu.txt" not in gpu
    assert "'.[test]'" in cpu and "-c constraints-cpu.txt" in cpu


def _rec(fw, strategy, precision, tflops, platform="gpu"):
    return {"status": "ok", "framework": fw, "strategy": strategy, "precision": precision, "peak_tflops": tflops,
            "platform": platform, "preset": "tiny", "layers": 2, "d_model": 64, "heads": 2, "vocab": 256, "batch": 4,
            "seq": 32, "steps": 8, "warmup": 2, "n_params": 1, "device": "NVIDIA H200", "device_count": 1}


def test_footer_keys_peaks_by_framework_and_dtype():
    lines = conditions([_rec("torch", "eager", "fp32", 0.05), _rec("torch", "eager+bf16", "bf16", 0.7)])
    peaks = next(x for x in lines if x.startswith("MFU against"))
    assert "torch fp32 50 GFLOP/s" in peaks and "torch bf16 700 GFLOP/s" in peaks


def test_report_warns_when_runs_of_one_comparison_ran_on_different_platforms():
    lines = conditions([_rec("torch", "eager", "fp32", 0.05), _rec("jax", "jit", "fp32", 0.05, platform="cpu")])
    assert any(x.startswith("warning: these runs ran on different platforms (cpu, gpu)") for x in lines)
    assert not any("different platforms" in x for x in conditions([_rec("torch", "eager", "fp32", 0.05)]))


def test_attention_impl_option():
    from flax import nnx

    from twinbench.config import SpecError
    from twinbench.models import options
    from twinbench.models.gpt import model_jax as gpt_jax
    from twinbench.plan import run_spec
    from twinbench.spec import ATTENTION_IMPLS

    assert options.ATTENTION_IMPLS == ATTENTION_IMPLS
    with pytest.raises(SpecError, match="bf16"):
        run_spec("tiny", "jax", "jit", attention_impl="cudnn")
    spec = run_spec("tiny", "jax", "jit+bf16", attention_impl="cudnn")
    assert spec.strategy.attention_impl == "cudnn" and spec.train.precision == "bf16"
    assert spec.run_id() != run_spec("tiny", "jax", "jit+bf16").run_id()
    model = nnx.eval_shape(lambda: gpt_jax.GPT(spec.model, nnx.Rngs(0), options.ModelOptions(attention_impl="cudnn")))
    assert model.blocks[0].attn.impl == "cudnn"
    assert device.attention_kernel("jax", 2, 32, 32, "bf16", True, False, "cudnn") == "cudnn (fused)"


@pytest.mark.parametrize(("cpuinfo", "isa"), [
    ("flags\t\t: fpu sse avx2 fma avx512f avx512_bf16 amx_tile amx_bf16\n", "AVX-512, AMX, AMX-BF16, AVX512-BF16"),
    ("flags\t\t: fpu sse avx fma avx2\n", "AVX2, FMA"),
    ("Features\t: fp asimd sve bf16\n", "SVE, BF16"),
    ("Features\t: fp asimd\n", "NEON"),
    ("processor\t: 0\n", ""),
])
def test_the_cpu_instruction_set_is_named(cpuinfo, isa):
    assert device.cpu_isa.__wrapped__(cpuinfo) == isa


def test_records_and_the_footer_name_the_machine():
    """The same comparison differs by machine: a CPU run's footer names the CPU and its instruction set, a GPU
    run's names the GPU and its host."""
    base = dict(status="ok", framework="torch", strategy="eager", preset="tiny", layers=2, d_model=64, heads=2,
                vocab=256, n_params=1, batch=2, seq=16, steps=3, warmup=1, threads=2, precision="fp32",
                compile_cache="cold", device_count=1)
    cpu = conditions([{**base, "device": "AMD EPYC 7B13", "platform": "cpu", "host_cpu": "AMD EPYC 7B13 (AVX2, FMA)"}])
    assert any(line.startswith("device: AMD EPYC 7B13 (AVX2, FMA) (cpu)") for line in cpu)
    gpu = conditions([{**base, "device": "NVIDIA H200", "platform": "gpu", "host_cpu": "Intel Xeon (AVX-512)"}])
    assert any(line.startswith("device: NVIDIA H200 (gpu), host Intel Xeon (AVX-512)") for line in gpu)
    assert device.host_cpu().startswith(device.cpu_name())
