"""Device facts, synchronisation, peak memory, precision settings and versions, per framework."""

from __future__ import annotations

import os
import platform
import resource
import sys
from functools import cache
from typing import Any

from twinbench.measure import platforms

#: /proc/cpuinfo's vendor_id -> the vendor's name, for a host whose "model name" says nothing (a VM: "unknown")
CPU_VENDORS = {"AuthenticAMD": "AMD", "GenuineIntel": "Intel", "HygonGenuine": "Hygon", "CentaurHauls": "Centaur"}


def _cpuinfo_text() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return f.read()
    except OSError:
        return ""


@cache
def cpu_name(cpuinfo: str | None = None) -> str:
    """The host CPU's model ("AMD EPYC 7B13"), from /proc/cpuinfo (``cpuinfo``: its text, for tests). A VM
    that hides the model ("model name : unknown", as on a TPU VM) is named by its vendor and family
    ("AMD family 25"); an Arm host by its implementer ("Arm CPU"); never "unknown"."""
    fields: dict[str, str] = {}
    for line in (_cpuinfo_text() if cpuinfo is None else cpuinfo).splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    model = fields.get("model name", "")
    if model and model.lower() not in ("unknown", "-", "n/a"):
        return model
    vendor = fields.get("vendor_id", "")
    if vendor:
        family = fields.get("cpu family", "")
        return CPU_VENDORS.get(vendor, vendor) + (f" family {family}" if family else "")
    if "CPU implementer" in fields:
        return "Arm CPU"
    return platform.processor() or platform.machine() or "CPU"


#: Instruction-set extensions that change what a CPU's matmul and element-wise kernels can do, in the order a
#: person reads them: the widest vector unit, then matrix units and bf16 support (x86: /proc/cpuinfo "flags";
#: Arm: "Features"). The same comparison differs by machine, so every record names these.
ISA_FLAGS = (("amx_tile", "AMX"), ("amx_bf16", "AMX-BF16"), ("avx512_bf16", "AVX512-BF16"), ("avx512f", "AVX-512"),
             ("avx2", "AVX2"), ("fma", "FMA"), ("sve2", "SVE2"), ("sve", "SVE"), ("bf16", "BF16"), ("asimd", "NEON"))


@cache
def cpu_isa(cpuinfo: str | None = None) -> str:
    """The CPU's vector and matrix extensions, widest first ("AVX-512, AVX512-BF16, AMX, AMX-BF16"; "AVX2, FMA";
    "SVE, NEON"), or "" where /proc/cpuinfo cannot be read. ``cpuinfo``: the file's text (tests)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
        except OSError:
            return ""
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags = set(value.split())
            break
    found = [name for flag, name in ISA_FLAGS if flag in flags]
    vector = [n for n in found if n in ("AVX-512", "AVX2", "SVE2", "SVE", "NEON")][:1]  # the widest only
    extra = [n for n in found if n in ("AVX512-BF16", "AMX", "AMX-BF16", "BF16") and not (n == "BF16" and "AMX" in found)]
    if "FMA" in found and vector == ["AVX2"]:
        extra.insert(0, "FMA")
    return ", ".join(vector + extra)


def host_cpu() -> str:
    """The host's CPU and its instruction set, e.g. "Intel(R) Xeon(R) Processor (AVX-512, AVX512-BF16, AMX)"."""
    isa = cpu_isa()
    return f"{cpu_name()} ({isa})" if isa else cpu_name()


def platform_name(platform: str | None) -> str | None:
    """The platform as records name it: ``"cuda"`` (torch) and ``"gpu"`` (JAX) are both ``"gpu"``; records of
    an older twinbench that say ``"cuda"`` compare equal to JAX's ``"gpu"`` through this."""
    return platforms.name(platform)


def describe(framework: str) -> tuple[str, str, int]:
    """(platform, device name, devices visible to this process) of the default backend: ("cpu", "AMD EPYC", 1),
    ("gpu", "NVIDIA H200", 1): one platform name for both frameworks (:func:`platform_name`).

    The count is what the process *sees* (the runner gives each run only the GPUs it uses, through
    CUDA_VISIBLE_DEVICES), not what a run uses: a single-device strategy uses one; multi-device strategies
    report their own.
    """
    if framework == "jax":
        import jax

        dev = jax.local_devices()[0]
        name = cpu_name() if dev.platform == "cpu" else dev.device_kind
        return platform_name(dev.platform) or "cpu", name, jax.local_device_count()
    import torch

    if torch.cuda.is_available():
        return "gpu", torch.cuda.get_device_name(0), torch.cuda.device_count()
    return "cpu", cpu_name(), 1


def visible_gpu_ids(visible: str | None = None) -> list[str] | None:
    """The GPUs ``CUDA_VISIBLE_DEVICES`` (or ``visible``) leaves a process, as NVML ids (indices, or ``GPU-``/
    ``MIG-`` UUIDs), in CUDA's order; None when it is not set (every GPU of the machine)."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
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
    env = os.environ if env is None else env
    if int(env.get("LOCAL_WORLD_SIZE", "1")) > 1:
        rank = int(env.get("LOCAL_RANK", "0"))
        return ids[rank:rank + 1]
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


def torch_device() -> Any:
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def torch_precision_api(torch: Any) -> str:
    """Which of torch's two APIs for TF32 this torch has: ``"fp32_precision"`` (torch >= 2.9:
    ``torch.backends.fp32_precision`` and ``torch.backends.{cuda.matmul,cudnn.conv,cudnn.rnn}.fp32_precision``)
    or ``"allow_tf32"`` (the legacy flags, deprecated since 2.9)."""
    return "fp32_precision" if hasattr(torch.backends, "fp32_precision") else "allow_tf32"


def set_fp32_matmul(framework: str, tf32: bool = False, platform: str | None = None, precision: str = "fp32") -> str:
    """Make fp32 matmuls the same in both frameworks; return what was set, for the record (``matmul_precision``).

    On NVIDIA GPUs JAX's default fp32 matmul uses TF32 and PyTorch's does not. twinbench runs both at full
    fp32 unless ``tf32`` is asked for, in which case both use TF32. torch: one API only, never both (torch
    refuses to read a state that its two APIs set apart, in torch.compile too): the ``fp32_precision``
    settings where torch has them, else the legacy ``allow_tf32`` flags. The record says what the setting
    means on the run's platform (``platforms.Platform.fp32_matmul_words``) and which setting it was:
    ``fp32 (no TF32); torch fp32_precision=ieee``, ``fp32 (no TF32); jax_default_matmul_precision=highest``,
    on a TPU ``fp32 as 6 bf16 passes (bf16_6x, ~fp32 accuracy); jax_default_matmul_precision=highest``.
    ``platform``: the run's (default: JAX's default backend; torch's CUDA or the CPU). A bf16 run on a TPU
    keeps JAX's default: its matmuls take bf16 operands, one pass whatever the setting, and the TPU's Pallas
    kernels (Mosaic) refuse ``highest`` on bf16 operands ("Bad lhs type").
    """
    if framework == "jax":
        import jax

        platform = platform or jax.default_backend()
        if platform == "tpu" and precision == "bf16" and not tf32:
            jax.config.update("jax_default_matmul_precision", "default")
            return "bf16 operands, one bf16 pass; jax_default_matmul_precision=default"
        value = "tensorfloat32" if tf32 else "highest"
        jax.config.update("jax_default_matmul_precision", value)
        words = platforms.get(platform).fp32_matmul_words(framework, tf32)
        return f"{words}; jax_default_matmul_precision={value}"
    import torch

    label = platforms.get(platform or ("gpu" if torch.cuda.is_available() else "cpu")).fp32_matmul_words(
        framework, tf32)
    if torch_precision_api(torch) == "fp32_precision":
        value = "tf32" if tf32 else "ieee"
        torch.backends.fp32_precision = value  # the generic default: CUDA matmuls, cuDNN, oneDNN
        for backend in (torch.backends.cuda.matmul, torch.backends.cudnn.conv, torch.backends.cudnn.rnn):
            backend.fp32_precision = value
        return f"{label}; torch fp32_precision={value}"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    return f"{label}; torch allow_tf32={tf32}"


def matmul_label(matmul_precision: str | None) -> str | None:
    """The precision part of a record's ``matmul_precision``, without which API set it: what compares across
    frameworks (``fp32 (no TF32)``)."""
    return matmul_precision.split(";")[0].strip() if matmul_precision else matmul_precision


def peak_memory_bytes(framework: str) -> tuple[int, str]:
    """Peak memory and its source: the accelerator allocator's peak, or the process's peak RSS on CPU. On a
    TPU the allocator's peak leaves the compiled program's temporaries out: ``memory.device_peak`` completes
    it from the compiled step."""
    if framework == "jax":
        import jax

        dev = jax.local_devices()[0]  # on several hosts, jax.devices()[0] may be another process's device
        if dev.platform != "cpu":
            stats = dev.memory_stats() or {}
            if "peak_bytes_in_use" in stats:
                return int(stats["peak_bytes_in_use"]), ALLOCATOR_PEAK
    else:
        import torch

        if torch.cuda.is_available():
            return int(torch.cuda.max_memory_allocated()), ALLOCATOR_PEAK
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, PROCESS_RSS


ALLOCATOR_PEAK = "device allocator peak"
PROCESS_RSS = "process peak RSS"


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
        if "torchax" in sys.modules:  # a torch module run by torchax (jax:torchax): its torch and torchax
            from importlib.metadata import version

            out |= {"torch": sys.modules["torch"].__version__, "torchax": version("torchax")}
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


def jax_attention_label(impl: str) -> str:
    """The record's name of a JAX attention by ``--attention-impl``: the formulation asked for is what runs."""
    return {"cudnn": "cudnn (fused)", "splash": "splash (Pallas TPU, fused)", "chunked": "chunked (blocks of queries, XLA)",
            "jax-nn": "jax.nn.dot_product_attention (xla, unfused)"}.get(impl, "einsum (xla, unfused)")


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
        return jax_attention_label(jax_impl)
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
