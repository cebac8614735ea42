"""The PyTorch backend: what measurement, the strategies and the worker ask of torch (see backends/__init__.py).

torch is imported inside each function: importing this module loads nothing of it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from twinbench.backends.common import RecordFields
from twinbench.machine import ranks
from twinbench.measure.compiles import CompileMonitor, TorchCompiles
from twinbench.measure.host import cpu_name
from twinbench.strategies.base import TorchModuleTrainer

NAME = "torch"
#: what the memory breakdown reads of a torch trainer: its nn.Module, optimizer and the step's loss half
MEMORY_PROTOCOL = TorchModuleTrainer
#: the torch twins need no family option: every family has its torch module
TWIN_OPTION = ""
READS_XLA_FLAGS = False
PREDICT_READ = "traced on fake tensors"
#: a user-model run of this framework runs the user's torch module as written: the doctor does not watch it
STEP_PROGRAM_TEXT = False  # eager: no whole-step program
DOCTOR_WATCHES_USER_RUN = False

#: torch's SDPA kernels by the aten op that runs them (the first found in a profiled call names the kernel).
SDPA_KERNELS = (("_scaled_dot_product_cudnn_attention", "cudnn"),
                ("_scaled_dot_product_flash_attention_for_cpu", "flash (CPU)"),
                ("_scaled_dot_product_flash_attention", "flash"),
                ("_scaled_dot_product_efficient_attention", "memory-efficient"),
                ("_efficient_attention_forward", "memory-efficient"),
                ("_flash_attention_forward", "flash"))


def device() -> Any:
    """The torch device a run uses: the first CUDA device when there is one, else the CPU."""
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def describe() -> tuple[str, str, int]:
    """(platform, device name, devices visible): the CUDA devices when torch sees one, else the host's CPU."""
    import torch

    if torch.cuda.is_available():
        return "gpu", torch.cuda.get_device_name(0), torch.cuda.device_count()
    return "cpu", cpu_name(), 1


def set_threads(threads: int) -> None:
    """torch's intra-op pool: sized to the run's cores (it would take every core of the machine)."""
    import torch

    torch.set_num_threads(threads)


def precision_api(torch: Any) -> str:
    """Which of torch's two APIs for TF32 this torch has: ``"fp32_precision"`` (torch >= 2.9:
    ``torch.backends.fp32_precision`` and ``torch.backends.{cuda.matmul,cudnn.conv,cudnn.rnn}.fp32_precision``)
    or ``"allow_tf32"`` (the legacy flags, deprecated since 2.9)."""
    return "fp32_precision" if hasattr(torch.backends, "fp32_precision") else "allow_tf32"


def set_fp32_matmul(tf32: bool, platform: str | None, precision: str) -> str:
    """One API only, never both (torch refuses to read a state that its two APIs set apart, in torch.compile
    too): the ``fp32_precision`` settings where torch has them, else the legacy ``allow_tf32`` flags.
    ``precision`` (the run's dtype) does not change torch's setting."""
    import torch

    label = fp32_matmul_words(platform or ("gpu" if torch.cuda.is_available() else "cpu"), tf32)
    if precision_api(torch) == "fp32_precision":
        value = "tf32" if tf32 else "ieee"
        torch.backends.fp32_precision = value  # the generic default: CUDA matmuls, cuDNN, oneDNN
        for backend in (torch.backends.cuda.matmul, torch.backends.cudnn.conv, torch.backends.cudnn.rnn):
            backend.fp32_precision = value
        return f"{label}; torch fp32_precision={value}"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    return f"{label}; torch allow_tf32={tf32}"


def fp32_matmul_words(platform: str, tf32: bool) -> str:
    """What torch's fp32 matmuls are: TF32 or not (torch never runs on a TPU without torchax, which is JAX)."""
    return "tf32" if tf32 else "fp32 (no TF32)"


def allocator_peak() -> int | None:
    """The CUDA caching allocator's peak; None on the CPU (the process's RSS is the measure there)."""
    import torch

    return int(torch.cuda.max_memory_allocated()) if torch.cuda.is_available() else None


def versions() -> dict[str, str]:
    """torch, and the CUDA it was built for (a CUDA build)."""
    import torch

    out = {"torch": torch.__version__}
    if torch.version.cuda:
        out["cuda"] = torch.version.cuda
    return out


def peak_versions() -> dict[str, str]:
    """What a matmul peak depends on: torch and its CUDA."""
    return versions()


def compile_monitor() -> CompileMonitor:
    return TorchCompiles()


def profile_steps(step: Callable[[int], Any], sync: Callable[[], None], out_dir: Path, n: int) -> str:
    """``n`` steps under ``torch.profiler`` (CPU, and CUDA when present), exported as a Chrome trace."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities, record_shapes=True) as prof:
        for i in range(n):
            with record_function(f"twinbench_step_{i}"):
                step(i + 1)
                sync()
    path = out_dir / "trace.json"
    prof.export_chrome_trace(str(path))
    return str(path)


def start_trace(out_dir: Path) -> Any:
    """Start the profiler around a script's own steps (the doctor's trace): a CPU ``torch.profiler.profile``
    recording shapes and FLOPs."""
    import torch.profiler

    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True,
                                  with_flops=True)
    prof.start()
    return prof


def stop_trace(started: Any, out_dir: Path) -> list[str]:
    """Stop :func:`start_trace`'s profiler and write its Chrome trace into ``out_dir``: the file's name."""
    started.stop()
    path = out_dir / "doctor.pt.trace.json"
    started.export_chrome_trace(str(path))
    return [path.name]


def step_annotation(index: int) -> Any:
    """The trace's mark of a script's step ``index`` (0-based): a ``ProfilerStep#N`` record_function, as
    ``profile.step()`` makes under a schedule."""
    import torch.profiler

    return torch.profiler.record_function(f"ProfilerStep#{index + 1}")


def wait_dispatched() -> None:
    """Nothing to wait for: the doctor's torch trace is of the CPU, where an op has run when it returns."""


def matmul(platform: str, dtype: str, batch: int, m: int, k: int, n: int,
           layout: str = "NN") -> tuple[Callable[[], Any], Callable[[], Any]]:
    """``batch x [m,k] x [k,n]`` of ``dtype`` on the platform's device (the peak's square product: batch 1, m = k =
    n), with the operands laid out as ``layout`` says (``NT``: the second stored as [n,k] and read transposed, a
    strided view as a traced op had it: explain's per-shape A/B), and the sync that waits for it."""
    import torch

    on_gpu = platform != "cpu"  # "gpu" (older records and caches: "cuda")
    dev = torch.device("cuda" if on_gpu else "cpu")
    tdt = torch.bfloat16 if dtype == "bf16" else torch.float32
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    lead = (batch,) if batch > 1 else ()

    def operand(rows: int, cols: int, transposed: bool) -> Any:
        if transposed:
            return torch.randn(*lead, cols, rows, device=dev, dtype=tdt).transpose(-1, -2)
        return torch.randn(*lead, rows, cols, device=dev, dtype=tdt)

    a, b = operand(m, k, layout[0] == "T"), operand(k, n, layout[1] == "T")
    return (lambda: torch.matmul(a, b)), sync


def attention_label(heads: int, seq: int, head_dim: int, dtype: str, causal: bool, masked: bool,
                    impl: str = "default") -> str:
    """The kernel SDPA dispatches a run's attention to: one small ``scaled_dot_product_attention`` call of the
    run's shape (batch 1), dtype and masking, profiled ("math" when none of its fused kernels ran). The torch
    twins read no ``--attention-impl``."""
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile

    dev = device()
    tdt = torch.bfloat16 if dtype == "bf16" else torch.float32
    q, k, v = (torch.randn(1, heads, seq, head_dim, device=dev, dtype=tdt) for _ in range(3))
    mask = torch.ones(1, 1, 1, seq, dtype=torch.bool, device=dev) if masked else None
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
    names = {e.name.removeprefix("aten::") for e in prof.events()}
    return next((kernel for op, kernel in SDPA_KERNELS if op in names), "math")


def lean_attention(platform: str) -> str:
    """None to suggest: the torch twins read no ``--attention-impl`` (SDPA chooses its kernel)."""
    return ""


def attention_impl(asked: str) -> str:
    """The torch twins read no ``--attention-impl``: SDPA picks its kernel (:func:`attention_label`)."""
    return "default"


def advice(fix: str, uses_nnx: Callable[[], bool]) -> str:
    """A doctor finding's fix as it applies to a torch run: all of it, on one line."""
    return " ".join(ln for ln in str(fix).splitlines() if ln.strip())


def record_fields(asked_impl: str) -> RecordFields:
    """No XLA flags, and the attention the twin ran whatever was asked (:func:`attention_impl`)."""
    return RecordFields(xla_flags=None, attention_impl=attention_impl(asked_impl))


def process_index(num_processes: int) -> int:
    """torchrun's rank of this process (0 alone)."""
    return ranks().rank


def remat_refusal(policy: str) -> str:
    """torch +remat recomputes whole blocks (``torch.utils.checkpoint``): any other policy is refused."""
    if policy == "full":
        return ""
    return (f"--remat-policy {policy}: torch +remat recomputes whole blocks (torch.utils.checkpoint); "
            "allowed for torch: full")


def process_env(devices: int, num_processes: int) -> dict[str, str]:
    """Nothing: torchrun sets each rank's environment."""
    return {}


def join(num_processes: int, coordinator: str, process_id: int) -> None:
    """Join the process group when torchrun started this process (``WORLD_SIZE`` set); else nothing."""
    if "WORLD_SIZE" in os.environ:
        join_process_group()


def join_process_group() -> None:
    """Join the process group torchrun set up: NCCL with one GPU per rank, gloo on the CPU."""
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return
    if torch.cuda.is_available():
        rank, count = ranks().local_rank, torch.cuda.device_count()
        if rank >= count:  # said now, in one line, instead of CUDA's "invalid device ordinal" later
            raise RuntimeError(f"--devices: local rank {rank} has no GPU: this host has {count} visible "
                               f"(CUDA_VISIBLE_DEVICES={os.getenv('CUDA_VISIBLE_DEVICES', 'unset')})")
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        dist.init_process_group("gloo")


def cpu_peaks(num_processes: int, device_count: int, threads: int) -> int:
    """torchrun ranks each measured their peak on ``threads`` threads; a host runs at most ``cores / threads``
    of them at once."""
    ranks_per_host = max(device_count // num_processes, 1)
    return num_processes * max(1, min(ranks_per_host, (os.cpu_count() or 1) // max(threads, 1)))
