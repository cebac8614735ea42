"""What differs between the platforms a run can measure on (cpu, gpu, tpu), in one place.

Every other module asks :func:`get` for the run's platform and reads what it needs from the answer, instead
of branching on the platform's name: what JAX's fp32 matmul means there (TF32 or not, bf16 passes on a TPU),
whether the allocator's peak sees the compiled program's temporaries, what the accelerator is called in a
warning, and how a framework that has no build for it gets onto it (``routes``). The datasheets (peak
FLOP/s, memory, bandwidth) live in :mod:`twinbench.measure.peak`, keyed on the device's name.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Platform:
    """One kind of device, as the records name it (``"cpu"``, ``"gpu"``, ``"tpu"``)."""

    name: str
    #: what the device is called in a sentence ("the GPU", "the TPU", "the CPU")
    device_word: str
    #: whether the allocator's peak (``memory_stats()['peak_bytes_in_use']``) includes the compiled program's
    #: temporaries. XLA's GPU client allocates them through its allocator; the TPU runtime reserves them
    #: outside what ``peak_bytes_in_use`` reports, so there the compiled program's own sizes complete it.
    allocator_sees_temporaries: bool
    #: JAX's fp32 matmul precision setting -> what it means on this device
    jax_fp32_words: dict[str, str]
    #: how a framework with no build for this device gets onto it, by framework (none where both have one)
    routes: dict[str, str] = field(default_factory=dict)
    #: the JAX ``--attention-impl`` that keeps no seq x seq probabilities here (what a preflight suggests)
    lean_attention: str = "chunked"

    @property
    def accelerator(self) -> bool:
        return self.name != "cpu"


CPU = Platform("cpu", "the CPU", allocator_sees_temporaries=True,
               jax_fp32_words={"highest": "fp32 (no TF32)", "tensorfloat32": "tf32"})
GPU = Platform("gpu", "the GPU", allocator_sees_temporaries=True,
               jax_fp32_words={"highest": "fp32 (no TF32)", "tensorfloat32": "tf32"}, lean_attention="cudnn")
#: On a TPU the MXU multiplies bf16 only: an fp32 matmul is made of bf16 passes (XLA's precision config:
#: DEFAULT one pass, HIGH 3 passes ~ tf32, HIGHEST 6 passes ~ fp32; ``jax.lax.Precision``).
TPU = Platform("tpu", "the TPU", allocator_sees_temporaries=False,
               jax_fp32_words={"highest": "fp32 as 6 bf16 passes (bf16_6x, ~fp32 accuracy)",
                               "tensorfloat32": "fp32 as 3 bf16 passes (bf16_3x, ~tf32 accuracy)",
                               "default": "fp32 operands in one bf16 pass"},
               routes={"torch": "torchax (a torch model as one JAX program: --model FILE.py:build "
                                "--strategies torchax)"},
               lean_attention="splash")

PLATFORMS = {p.name: p for p in (CPU, GPU, TPU)}
#: the frameworks' names of one kind of device -> the one name records use (torch says "cuda", also on ROCm)
ALIASES = {"cuda": "gpu", "rocm": "gpu"}


def name(platform: str | None) -> str | None:
    """The platform as records name it: ``"cuda"`` (torch) and ``"gpu"`` (JAX) are both ``"gpu"``."""
    return ALIASES.get(platform, platform) if platform else platform


def get(platform: str | None) -> Platform:
    """The platform of a record or a device (``"cpu"``, ``"gpu"``/``"cuda"``/``"rocm"``, ``"tpu"``); an
    unknown or missing name is treated as a GPU-like accelerator when given, the CPU when None."""
    key = name(platform)
    if key is None:
        return CPU
    return PLATFORMS.get(key, GPU)


def accelerator_words(platforms: list[str]) -> str:
    """"the GPU", "the TPU", or "the accelerator" for a mix: what a framework may have missed."""
    devices = {get(p).device_word for p in platforms if get(p).accelerator}
    return devices.pop() if len(devices) == 1 else "the accelerator"


#: The device nodes that show an accelerator without importing a framework, by platform.
DEVICE_NODES = {"tpu": ("/dev/accel*", "/dev/vfio/[0-9]*"), "gpu": ("/dev/nvidia[0-9]*", "/dev/kfd")}


def here() -> str:
    """``tpu``, ``gpu`` or ``cpu`` from this machine's device nodes, without importing a framework (a parent
    process stays light and never touches a device)."""
    return next((p for p, nodes in DEVICE_NODES.items() if any(glob.glob(n) for n in nodes)), "cpu")
