"""The devices a run sees, the host's GPUs (NVML, CUDA_VISIBLE_DEVICES), and what a record says of them.

What differs by framework (the device it describes, its fp32 matmul setting, its allocator's peak, its
versions, its attention kernel) is its backend's (``twinbench.backends``); the functions here that take a
``framework`` ask it. The host's CPU is ``host.py``'s, whose names are importable from here too.
"""

from __future__ import annotations

import os
import platform
import resource
import sys

from twinbench import backends
from twinbench.backends.jax import ATTENTION_LABELS
from twinbench.backends.jax import impl_label as jax_attention_label
from twinbench.backends.torch import SDPA_KERNELS
from twinbench.backends.torch import device as torch_device
from twinbench.backends.torch import precision_api as torch_precision_api
from twinbench.machine import ranks
from twinbench.measure import platforms
from twinbench.measure.host import CPU_VENDORS, ISA_FLAGS, cpu_isa, cpu_name, host_cpu

__all__ = ["ALLOCATOR_PEAK", "ATTENTION_LABELS", "CPU_VENDORS", "ISA_FLAGS", "PROCESS_RSS", "SDPA_KERNELS",
           "attention_kernel", "cpu_isa", "cpu_name", "describe", "devices_env", "devices_problem", "gpu_count",
           "host_cpu", "jax_attention_label", "matmul_label", "other_device_processes", "others_on_device",
           "own_gpus", "peak_memory_bytes", "platform_name", "set_fp32_matmul", "torch_device",
           "torch_precision_api", "versions", "visible_gpu_ids"]


def platform_name(platform: str | None) -> str | None:
    """The platform as records name it: ``"cuda"`` (torch) and ``"gpu"`` (JAX) are both ``"gpu"``; records of
    an older twinbench that say ``"cuda"`` compare equal to JAX's ``"gpu"`` through this."""
    return platforms.name(platform)


def describe(framework: str) -> tuple[str, str, int]:
    """(platform, device name, devices visible to this process) of the framework's default device: ("cpu",
    "AMD EPYC", 1), ("gpu", "NVIDIA H200", 1): one platform name for both frameworks (:func:`platform_name`).

    The count is what the process *sees* (the runner gives each run only the GPUs it uses, through
    CUDA_VISIBLE_DEVICES), not what a run uses: a single-device strategy uses one; multi-device strategies
    report their own.
    """
    return backends.get(framework).describe()


def visible_gpu_ids(visible: str | None = None) -> list[str] | None:
    """The GPUs ``CUDA_VISIBLE_DEVICES`` (or ``visible``) leaves a process, as NVML ids (indices, or ``GPU-``/
    ``MIG-`` UUIDs), in CUDA's order; None when it is not set (every GPU of the machine)."""
    value = os.getenv("CUDA_VISIBLE_DEVICES") if visible is None else visible
    if value is None:
        return None
    ids = []
    for part in value.split(","):
        part = part.strip()
        if not part or part.startswith("-"):  # CUDA stops at the first invalid entry ("-1" hides every GPU)
            break
        ids.append(part)
    return ids


def gpu_count() -> int:
    """NVIDIA GPUs this process may use, read without starting CUDA or importing a framework: those
    ``CUDA_VISIBLE_DEVICES`` lists, else the driver's (NVML, else ``/proc/driver/nvidia/gpus``); 0 without any."""
    machine = _machine_gpu_count()
    ids = visible_gpu_ids()
    return machine if ids is None else min(len(ids), machine)


def _machine_gpu_count() -> int:
    try:
        import pynvml  # nvidia-ml-py (the cuda extra)

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass
    try:
        return len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return 0


def devices_env(devices: int, visible: str | None = None, machine: int | None = None) -> dict[str, str]:
    """``CUDA_VISIBLE_DEVICES`` for a run on ``devices`` GPUs of this host: the first ``devices`` of those this
    process may use (its own CUDA_VISIBLE_DEVICES, else the machine's); {} on a machine without NVIDIA GPUs.
    A single-device run then sees (and NVML counts) one GPU, and JAX opens no context on the others."""
    machine = _machine_gpu_count() if machine is None else machine
    if machine == 0:
        return {}
    ids = visible_gpu_ids(visible)
    ids = [str(i) for i in range(machine)] if ids is None else ids
    return {"CUDA_VISIBLE_DEVICES": ",".join(ids[:max(devices, 1)])}


def devices_problem(asked: list[tuple[str, int]], gpus: int, jax_platforms: str | None = None) -> str | None:
    """Why runs asking for ``asked`` = [(run label, GPUs per host)] cannot run on this host's ``gpus`` GPUs (one
    line), or None. No GPU at all: runs are on the CPU, whose devices are simulated (any count). JAX runs whose
    ``JAX_PLATFORMS`` keeps them off the GPU are not checked either."""
    if gpus <= 0:
        return None
    off_gpu = jax_platforms is not None and jax_platforms.strip() != "" and not any(
        p in jax_platforms for p in ("cuda", "gpu", "rocm"))
    over = [(label, n) for label, n in asked if n > gpus and not (off_gpu and label.startswith("jax/"))]
    if not over:
        return None
    label, n = max(over, key=lambda x: x[1])
    return (f"--devices {n}: this host has {gpus} GPU(s) visible (CUDA_VISIBLE_DEVICES / the driver) and "
            f"{label} needs {n} on it; ask for at most {gpus}")


def own_gpus(ids: list[str], env: dict[str, str] | None = None) -> list[str]:
    """Of the GPUs a run sees, those this process uses: all of them, except under torchrun (one GPU per rank:
    ``LOCAL_RANK``'s), where the other ranks of the same run are not "other processes" on this one's GPU."""
    launched = ranks(env)
    if (launched.local_world_size or 1) > 1:
        return ids[launched.local_rank:launched.local_rank + 1]
    return ids


def others_on_device(pids: set[int], me: int, holds_context: bool = True) -> int:
    """Processes other than this one among ``pids`` (what NVML lists on the GPUs of this run). In a container
    NVML lists host PIDs, so this process's own PID is not among them although its context is: then one of
    them is this process (when it holds a context, as the worker and the peak's process do when they ask)."""
    if me in pids:
        return len(pids) - 1
    return max(len(pids) - (1 if holds_context else 0), 0)


def other_device_processes(platform: str, holds_context: bool = True) -> int:
    """Processes other than this one that hold a context on the GPUs this process uses (NVML, restricted to
    CUDA_VISIBLE_DEVICES, which the runner sets per run), 0 on the CPU or when NVML cannot tell. A matmul peak
    timed while another job used the GPU is too low, so it is never cached; a run timed so is marked."""
    if platform == "cpu":
        return 0
    try:
        import pynvml  # nvidia-ml-py (the cuda extra)

        pynvml.nvmlInit()
        try:
            ids = visible_gpu_ids()
            if ids is None:
                ids = [str(i) for i in range(pynvml.nvmlDeviceGetCount())]
            ids = own_gpus(ids)
            pids = set()
            for gpu in ids:
                handle = (pynvml.nvmlDeviceGetHandleByIndex(int(gpu)) if gpu.isdigit()
                          else pynvml.nvmlDeviceGetHandleByUUID(gpu))
                for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    pids.add(proc.pid)
            return others_on_device(pids, os.getpid(), holds_context)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML, no permission, not an NVIDIA device: unknown is not "busy"
        return 0


def set_fp32_matmul(framework: str, tf32: bool = False, platform: str | None = None, precision: str = "fp32") -> str:
    """Make fp32 matmuls the same in both frameworks; return what was set, for the record (``matmul_precision``).

    On NVIDIA GPUs JAX's default fp32 matmul uses TF32 and PyTorch's does not. twinbench runs both at full
    fp32 unless ``tf32`` is asked for, in which case both use TF32 (each backend's ``set_fp32_matmul`` says
    how). The record says what the setting means on the run's platform (each backend's ``fp32_matmul_words``)
    and which setting it was: ``fp32 (no TF32); torch fp32_precision=ieee``, ``fp32 (no TF32);
    jax_default_matmul_precision=highest``, on a TPU ``fp32 as 6 bf16 passes (bf16_6x, ~fp32 accuracy);
    jax_default_matmul_precision=highest``. ``platform``: the run's (default: the framework's default device).
    """
    return backends.get(framework).set_fp32_matmul(tf32, platform, precision)


def matmul_label(matmul_precision: str | None) -> str | None:
    """The precision part of a record's ``matmul_precision``, without which API set it: what compares across
    frameworks (``fp32 (no TF32)``)."""
    return matmul_precision.split(";")[0].strip() if matmul_precision else matmul_precision


def peak_memory_bytes(framework: str) -> tuple[int, str]:
    """Peak memory and its source: the accelerator allocator's peak, or the process's peak RSS on CPU. On a
    TPU the allocator's peak leaves the compiled program's temporaries out: ``memory.device_peak`` completes
    it from the compiled step."""
    allocated = backends.get(framework).allocator_peak()
    if allocated is not None:
        return allocated, ALLOCATOR_PEAK
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, PROCESS_RSS


ALLOCATOR_PEAK = "device allocator peak"
PROCESS_RSS = "process peak RSS"


def versions(framework: str) -> dict[str, str]:
    """The record's ``versions``: Python, numpy and the OS, and the framework's own packages."""
    import numpy

    out = {"python": sys.version.split()[0], "numpy": numpy.__version__, "platform": platform.platform()}
    return out | backends.get(framework).versions()


def attention_kernel(framework: str, heads: int, seq: int, head_dim: int, dtype: str, causal: bool,
                     masked: bool, jax_impl: str = "default") -> str:
    """Which attention kernel a run's attention uses, for the record: the two frameworks' defaults differ on
    GPUs (torch's SDPA picks flash / memory-efficient / cuDNN kernels, named by a small profiled call; JAX
    runs the formulation ``--attention-impl`` asked for: einsums by default, XLA's unfused attention)."""
    return backends.get(framework).attention_label(heads, seq, head_dim, dtype, causal, masked, jax_impl)
