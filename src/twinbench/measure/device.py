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
    """(platform, device name, device count) of the default backend: ("cpu", "AMD EPYC ...", 1)."""
    if framework == "jax":
        import jax

        dev = jax.devices()[0]
        name = cpu_name() if dev.platform == "cpu" else dev.device_kind
        return dev.platform, name, jax.device_count()
    import torch

    if torch.cuda.is_available():
        return "cuda", torch.cuda.get_device_name(0), torch.cuda.device_count()
    return "cpu", cpu_name(), 1


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

        dev = jax.devices()[0]
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
