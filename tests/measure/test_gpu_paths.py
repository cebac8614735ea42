"""The GPU paths of the first GPU sitting, on the CPU with the facts handed in: one platform name for both
frameworks, the GPUs a run sees and NVML's count of processes on them, the early --devices check, the
"device shared" marks, the fp32 matmul setting, the peak's unit, the unsynchronised step window, BERT's
--mask-impl cond syncing once per forward, JAX never preallocating."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tomllib
import types
from pathlib import Path

import pytest

from twinbench.measure import clock, device, peak
from twinbench.record import condition_warnings, typed
from twinbench.report.table import conditions as table_conditions
from twinbench.report.table import fmt_flops


def conditions(records: list) -> list[str]:
    """The table's conditions of records built here as flat dicts (read through record.typed, as a file's are)."""
    return table_conditions(typed(records))

ROOT = Path(__file__).resolve().parents[2]


def rec(fw: str, strategy: str = "eager", **over):
    base = {"status": "ok", "framework": fw, "strategy": strategy, "precision": "bf16", "peak_tflops": 672.0,
            "platform": "cuda" if fw == "torch" else "gpu", "preset": "tiny", "layers": 2, "d_model": 64,
            "heads": 2, "vocab": 256, "batch": 4, "seq": 32, "steps": 8, "warmup": 2, "n_params": 1,
            "device": "NVIDIA H200", "device_count": 1, "threads": 16, "step_ms": 50.0}
    return base | over


# -- one platform name -----------------------------------------------------------------------------------
def test_torch_cuda_and_jax_gpu_are_one_platform():
    assert device.platform_name("cuda") == device.platform_name("gpu") == "gpu"
    assert device.platform_name("cpu") == "cpu" and device.platform_name(None) is None
    lines = conditions([rec("torch"), rec("jax", "jit")])  # a record of an older twinbench says "cuda"
    assert not any("different platforms" in x for x in lines)
    dev = next(x for x in lines if x.startswith("device:"))
    assert "(gpu)" in dev and "16 host CPU threads" in dev
    assert "(cpu)" in next(x for x in conditions([rec("torch", platform="cpu")]) if x.startswith("device:"))


def test_diff_compares_platforms_by_their_one_name():
    from twinbench.diff import _conditions

    def conditions(old: dict, new: dict) -> list[str]:
        return _conditions(typed([old]), typed([new]))

    assert not any(x.startswith("platform") for x in conditions(rec("torch"), rec("torch", platform="gpu")))
    assert any(x.startswith("platform") for x in conditions(rec("torch"), rec("torch", platform="cpu")))


def test_describe_names_a_torch_gpu_gpu(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert device.describe("torch") == ("gpu", "NVIDIA H200", 1)


# -- peaks in a unit a reader takes in ----------------------------------------------------------------------
@pytest.mark.parametrize(("tflops", "text"), [(0.165, "165 GFLOP/s"), (1.234, "1.23 TFLOP/s"),
                                              (67.0, "67.0 TFLOP/s"), (671.9955, "672 TFLOP/s")])
def test_peaks_print_in_tflops_when_large(tflops, text):
    assert fmt_flops(tflops) == text


# -- the GPUs a run sees, and who else is on them -----------------------------------------------------------
def test_visible_gpus_and_a_runs_own(monkeypatch):
    assert device.visible_gpu_ids("2,3") == ["2", "3"]
    assert device.visible_gpu_ids("GPU-ab12, 1") == ["GPU-ab12", "1"]
    assert device.visible_gpu_ids("") == [] and device.visible_gpu_ids("0,-1,2") == ["0"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert device.visible_gpu_ids() is None
    assert device.devices_env(1, machine=8) == {"CUDA_VISIBLE_DEVICES": "0"}
    assert device.devices_env(2, visible="4,5,6", machine=8) == {"CUDA_VISIBLE_DEVICES": "4,5"}
    assert device.devices_env(1, visible="", machine=8) == {"CUDA_VISIBLE_DEVICES": ""}  # the user hid them
    assert device.devices_env(4, machine=0) == {}  # no NVIDIA GPU: nothing to choose
    assert device.own_gpus(["4", "5"], {"LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "1"}) == ["5"]
    assert device.own_gpus(["4", "5"], {}) == ["4", "5"]


def test_runner_gives_each_run_its_gpus(monkeypatch):
    from twinbench import runner
    from twinbench.plan import run_spec

    monkeypatch.setattr(device, "_machine_gpu_count", lambda: 8)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert runner.run_devices_env(run_spec("tiny", "torch", "eager")) == {"CUDA_VISIBLE_DEVICES": "0"}
    assert runner.run_devices_env(run_spec("tiny", "jax", "mesh-dp", {"devices": 4})) == {
        "CUDA_VISIBLE_DEVICES": "0,1,2,3"}


def test_nvml_counts_the_runs_gpus_and_knows_itself_in_a_container(monkeypatch):
    """NVML lists every GPU's processes, by host PID in a container: only the run's GPUs count, and this
    process (its context is there, under a PID it does not know) is not another."""
    procs = {0: [11, 12], 1: [13], 2: [14, 15, 16]}
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 3,
        nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetHandleByUUID=lambda u: {"GPU-x": 2}[u],
        nvmlDeviceGetComputeRunningProcesses=lambda h: [types.SimpleNamespace(pid=p) for p in procs[h]])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert device.other_device_processes("gpu") == 0  # PID 13 is this process, seen from the host
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-x")
    assert device.other_device_processes("gpu") == 2
    procs[2].append(os.getpid())  # outside a container NVML lists this process's own PID
    assert device.other_device_processes("gpu") == 3
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert device.other_device_processes("gpu") == 6  # no restriction: every GPU of the machine
    assert device.other_device_processes("cpu") == 0
    assert device.others_on_device({7}, me=1, holds_context=False) == 1


def test_nvidia_ml_py_is_in_the_cuda_extra():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(d.startswith("nvidia-ml-py") for d in extras["cuda"])


# -- --devices above the GPUs: one line, exit 2, before any run -----------------------------------------------
def test_devices_problem():
    assert device.devices_problem([("jax/mesh-dp", 4)], gpus=2).startswith("--devices 4: this host has 2 GPU(s)")
    assert device.devices_problem([("jax/mesh-dp", 2)], gpus=2) is None
    assert device.devices_problem([("jax/mesh-dp", 8)], gpus=0) is None  # CPU: simulated devices
    assert device.devices_problem([("jax/mesh-dp", 8)], gpus=2, jax_platforms="cpu") is None
    assert device.devices_problem([("torch/ddp", 8)], gpus=2, jax_platforms="cpu") is not None


def test_compare_refuses_more_devices_than_gpus_before_any_run(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from twinbench import cli, runner

    monkeypatch.setattr(device, "gpu_count", lambda: 2)
    monkeypatch.setattr(runner, "run_many", lambda *a, **k: pytest.fail("a run started"))
    res = CliRunner().invoke(cli.app, ["compare", "--preset", "tiny", "--strategies", "torch:ddp",
                                       "--devices", "4", "--out", str(tmp_path)])
    assert res.exit_code == 2
    assert "--devices 4: this host has 2 GPU(s)" in res.output


# -- "device shared" reaches records and the footer ---------------------------------------------------------
def test_device_shared_reaches_the_record_and_the_footer():
    p = peak.Peak("torch", "gpu", "NVIDIA H200", "bf16", 16, {}, 672.0, [672.0], 0.0, "2026-12-04T18:02:33+00:00",
                  0.0, peak.Method(other_device_processes=2))
    assert p.record_fields().peak_device_shared == 2
    r = rec("torch", **dataclasses.asdict(p.record_fields()), device_shared=1)
    warnings = condition_warnings(r)
    assert any(w.startswith("matmul peak:") and "2 other process(es) used the GPU" in w for w in warnings)
    assert any(w.startswith("device shared:") for w in warnings)
    lines = conditions([r])
    assert any("torch matmul peak is not to be trusted" in x and "other process(es) used the GPU" in x for x in lines)
    assert any(x.startswith("warning: device shared: in 1 of 1 run(s)") for x in lines)


# -- fp32 matmuls: one torch API, and which was set ----------------------------------------------------------
def test_fp32_matmul_setting_is_recorded_and_torch_compile_reads_it_back():
    import torch

    got = device.set_fp32_matmul("torch")
    if device.torch_precision_api(torch) == "fp32_precision":
        assert got == "fp32 (no TF32); torch fp32_precision=ieee"
        assert torch.backends.cuda.matmul.fp32_precision == "ieee"
        assert torch.backends.cudnn.conv.fp32_precision == "ieee"
    else:
        assert got == "fp32 (no TF32); torch allow_tf32=False"
    # what torch.compile's Inductor reads of the matmul state must not raise (mixed-API states do)
    assert torch.backends.cuda.matmul.allow_tf32 is False
    assert torch.get_float32_matmul_precision() == "highest"
    assert device.matmul_label(got) == "fp32 (no TF32)"
    line = next(x for x in conditions([rec("torch", matmul_precision=got),
                                       rec("jax", "jit", matmul_precision="fp32 (no TF32); "
                                           "jax_default_matmul_precision=highest")]) if x.startswith("device:"))
    assert "matmul fp32 (no TF32) (torch " in line and "jax_default_matmul_precision=highest)" in line


# -- the unsynchronised window -------------------------------------------------------------------------------
class Compiles:
    def __init__(self):
        self.n = 0

    def count(self):
        return self.n

    def seconds(self):
        return 0.0

    def cache_hits(self):
        return 0


def test_the_window_syncs_at_its_ends_only():
    events: list[str] = []
    mon = Compiles()
    per_step = clock.time_window(lambda i: events.append(f"step{i}"), lambda: events.append("sync"), 3, mon)
    assert events == ["sync", "step0", "step1", "step2", "sync"] and per_step is not None and per_step >= 0
    assert clock.time_window(lambda i: None, lambda: None, 0, mon) is None
    events.clear()
    clock.time_window(lambda i: events.append(f"step{i}"), lambda: events.append("sync"), 2, mon, warmup=2)
    assert events == ["step0", "step1", "sync", "step2", "step3", "sync"]  # untimed warm-up, then the window

    def compiling(i):
        mon.n += 1

    assert clock.time_window(compiling, lambda: None, 2, mon) is None  # not a steady-state time


def test_the_window_is_recorded_per_step_and_shown_when_it_differs():
    from twinbench.measure.metrics import step_stats

    t = clock.Timing(1.0, [0.05, 0.05], [1.0], 0, 0.0, async_step_s=0.08)
    assert step_stats(clock.per_step(t, 2)).step_ms_async == pytest.approx(40.0)
    assert step_stats(clock.Timing(1.0, [0.05], [1.0], 0, 0.0)).step_ms_async is None
    lines = conditions([rec("torch", step_ms=51.7, step_ms_async=45.0), rec("jax", "jit", step_ms=46.6,
                                                                             step_ms_async=46.5)])
    shown = [x for x in lines if x.startswith("step ms without a sync per step")]
    assert len(shown) == 1 and "torch/eager 45.0 ms (-13%" in shown[0] and "jax/jit" not in shown[0]


# -- BERT --mask-impl cond: one host sync per forward -------------------------------------------------------
def test_bert_cond_asks_about_padding_once_per_forward():
    import torch
    from torch.overrides import TorchFunctionMode

    from twinbench.models.bert import model_torch as bert_torch
    from twinbench.spec import from_preset

    s = from_preset("bert-tiny", {"layers": 3, "mask_impl": "cond"}, framework="torch", strategy="eager")
    model = bert_torch.BERT(s.model)
    ids = torch.randint(0, s.model.vocab, (2, 8))

    class Count(TorchFunctionMode):
        n = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is torch.Tensor.all:
                Count.n += 1
            return func(*args, **(kwargs or {}))

    for mask in (torch.ones_like(ids), torch.cat([torch.ones(2, 6), torch.zeros(2, 2)], 1).long()):
        Count.n = 0
        with Count():
            model(ids, None, mask)
        assert Count.n == 1


# -- JAX never preallocates, whatever entry point started the process ---------------------------------------
def test_every_entry_point_keeps_jax_from_preallocating():
    env = {k: v for k, v in os.environ.items() if k != "XLA_PYTHON_CLIENT_PREALLOCATE"}
    env["PYTHONPATH"] = str(ROOT / "src")
    code = ("import os, twinbench.environment, twinbench.claims.probes, twinbench.measure.peak; "
            "print(os.environ.get('XLA_PYTHON_CLIENT_PREALLOCATE'))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "false", out.stderr
    from twinbench.claims.probes import shared_device

    assert shared_device(True, "gpu") == "gpu" and shared_device(False, "gpu") == "cpu"
    assert shared_device(True, "cpu") == "cpu"


def test_the_window_replays_the_steady_batches():
    from twinbench.data.pipeline import HostBatches

    calls = HostBatches(lambda i: i, n_calls=6, k=1).window(start=2, n=3, calls=7)
    assert [calls[i] for i in range(len(calls))] == [2, 3, 4, 2, 3, 4, 2]
    stacked = HostBatches(lambda i: (i, i), n_calls=4, k=2).window(start=1, n=2, calls=3)
    assert [stacked[i][0].tolist() for i in range(3)] == [[2, 3], [4, 5], [2, 3]]  # K=2 steps per call
