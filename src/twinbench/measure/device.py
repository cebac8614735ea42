"""Device facts, synchronisation, peak memory, precision settings and versions, per framework."""

from __future__ import annotations

import platform
import resource
import sys
from functools import cache
from typing import Any


@cache
def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe(framework: str) -> tuple[str, str, int]:
    """(platform, device name, devices visible to this process) of the default backend: ("cpu", "AMD EPYC", 1).

    The count is what the process *sees* (every GPU of the machine, unless CUDA_VISIBLE_DEVICES says
    otherwise), not what a run uses: a single-device strategy uses one; multi-device strategies report their own.
    """
    if framework == "jax":
        import jax

        dev = jax.local_devices()[0]
        name = cpu_name() if dev.platform == "cpu" else dev.device_kind
        return dev.platform, name, jax.local_device_count()
    import torch

    if torch.cuda.is_available():
        return "cuda", torch.cuda.get_device_name(0), torch.cuda.device_count()
    return "cpu", cpu_name(), 1


def other_device_processes(platform: str) -> int:
    """Processes other than this one that hold a context on this machine's GPUs (NVML), 0 on the CPU or when NVML
    cannot tell. A matmul peak timed while another job used the GPU is too low, so it is never cached."""
    if platform == "cpu":
        return 0
    try:
        import os

        import pynvml  # nvidia-ml-py: on CUDA images beside torch

        pynvml.nvmlInit()
        try:
            pids = set()
            for i in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    pids.add(proc.pid)
            return len(pids - {os.getpid()})
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML, no permission, not an NVIDIA device: unknown is not "busy"
        return 0


def torch_device() -> Any:
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def set_fp32_matmul(framework: str, tf32: bool = False) -> str:
    """Make fp32 matmuls the same in both frameworks; return what was set, for the record.

    On NVIDIA GPUs JAX's default fp32 matmul uses TF32 and PyTorch's does not. twinbench runs both at full
    fp32 unless ``tf32`` is asked for, in which case both use TF32.
    """
    if framework == "jax":
        import jax

        jax.config.update("jax_default_matmul_precision", "tensorfloat32" if tf32 else "highest")
    else:
        import torch

        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.set_float32_matmul_precision("high" if tf32 else "highest")
    return "tf32" if tf32 else "fp32 (no TF32)"


def peak_memory_bytes(framework: str) -> tuple[int, str]:
    """Peak memory and its source: the accelerator allocator's peak, or the process's peak RSS on CPU."""
    if framework == "jax":
        import jax

        dev = jax.local_devices()[0]  # on several hosts, jax.devices()[0] may be another process's device
        if dev.platform != "cpu":
            stats = dev.memory_stats() or {}
            if "peak_bytes_in_use" in stats:
                return int(stats["peak_bytes_in_use"]), "device allocator peak"
    else:
        import torch

        if torch.cuda.is_available():
            return int(torch.cuda.max_memory_allocated()), "device allocator peak"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "process peak RSS"


def versions(framework: str) -> dict[str, str]:
    import numpy

    out = {"python": sys.version.split()[0], "numpy": numpy.__version__, "platform": platform.platform()}
    if framework == "jax":
        import flax
        import jax
        import jaxlib
        import optax

        out |= {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "flax": flax.__version__,
                "optax": optax.__version__}
        if "grain" in sys.modules:  # the +prefetch input pipeline (data/pipeline.py) ran on it
            out["grain"] = sys.modules["grain"].__version__
    else:
        import torch

        out |= {"torch": torch.__version__}
        if torch.version.cuda:
            out["cuda"] = torch.version.cuda
    return out


#: torch's SDPA kernels by the aten op that runs them (the first found in a profiled call names the kernel).
SDPA_KERNELS = (("_scaled_dot_product_cudnn_attention", "cudnn"),
                ("_scaled_dot_product_flash_attention_for_cpu", "flash (CPU)"),
                ("_scaled_dot_product_flash_attention", "flash"),
                ("_scaled_dot_product_efficient_attention", "memory-efficient"),
                ("_efficient_attention_forward", "memory-efficient"),
                ("_flash_attention_forward", "flash"))


def attention_kernel(framework: str, heads: int, seq: int, head_dim: int, dtype: str, causal: bool,
                     masked: bool, jax_impl: str = "default") -> str:
    """Which attention kernel a run's attention uses, for the record: the two frameworks' defaults differ on
    GPUs (torch's SDPA picks flash / memory-efficient / cuDNN kernels; JAX's default is XLA's unfused one).

    torch: one small ``scaled_dot_product_attention`` call of the run's shape (batch 1), dtype and masking,
    profiled, names the kernel SDPA dispatched to ("math" when none of its fused kernels ran). JAX: the
    formulation the run asked for (``--attention-impl``): einsums (the default), ``jax.nn.dot_product_attention``
    as JAX chooses (XLA's unfused attention), blocks of queries, or cuDNN's fused kernel.
    """
    if framework == "jax":
        return {"cudnn": "cudnn (fused)", "chunked": "chunked (blocks of queries, XLA)",
                "jax-nn": "jax.nn.dot_product_attention (xla, unfused)"}.get(jax_impl, "einsum (xla, unfused)")
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile

    dev = torch_device()
    tdt = torch.bfloat16 if dtype == "bf16" else torch.float32
    q, k, v = (torch.randn(1, heads, seq, head_dim, device=dev, dtype=tdt) for _ in range(3))
    mask = torch.ones(1, 1, 1, seq, dtype=torch.bool, device=dev) if masked else None
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
    names = {e.name.removeprefix("aten::") for e in prof.events()}
    return next((kernel for op, kernel in SDPA_KERNELS if op in names), "math")
