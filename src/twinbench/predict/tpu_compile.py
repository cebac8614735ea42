"""The step compiled for a TPU this machine does not have, by the TPU compiler itself: libtpu's deviceless
ahead-of-time compilation (``jax.experimental.topologies``), run on this CPU.

The compiled program's ``memory_analysis()`` is what a run on the chip reports as its peak (``measure/memory.py``:
arguments + outputs not aliased + temporaries + code; a TPU's allocator leaves the temporaries out), so the
memory ``twinbench predict --compile`` gives is the chip's own figure, not a model of it: the GPT-2 124M,
BERT-base and Llama-300M steps (bf16, splash) compiled so need what the chip reported for the same code
(benchmarks/RESULTS.md, "The fifth sitting"). It needs the ``libtpu``
package matching the installed JAX (``pip install "jax[tpu]==$JAX_VERSION"``, or the libtpu wheel alone); a CPU
is enough, no TPU is touched. The compile is the one the chip's first step would do, as long on a CPU as the
TPU compiler takes for the model.
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import os
from dataclasses import dataclass
from typing import Any

#: --device name -> the one-chip topology libtpu compiles for (v4 and v5p chips are 3-D slices, v5e and v6e 2-D)
TOPOLOGIES = {"tpu-v4": "v4:1x1x1", "tpu-v5e": "v5e:1x1", "tpu-v5p": "v5p:1x1x1", "tpu-v6e": "v6e:1x1"}


class TpuCompileUnavailable(RuntimeError):
    """No TPU compiler here (libtpu missing, or it refused this JAX): the one-line reason."""


@dataclass(frozen=True)
class CompiledStep:
    """What the TPU compiler says of one step."""

    sizes: dict[str, int]   #: memory_analysis(): argument, output, alias, temp, generated_code bytes
    device_kind: str        #: the compiled-for device ("TPU v5 lite")
    compiler: str           #: "libtpu 0.0.42.1"
    kernels: int = 0        #: Mosaic (Pallas TPU) kernels in the compiled program

    @property
    def peak_bytes(self) -> int:
        from twinbench.measure.memory import jax_step_estimate

        return jax_step_estimate(self.sizes)


def libtpu_version() -> str | None:
    """The installed libtpu's version, or None where there is none."""
    if importlib.util.find_spec("libtpu") is None:
        return None
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("libtpu")
    except PackageNotFoundError:
        return "unknown"


@functools.cache
def target_device(device: str) -> Any:
    """The first device of ``device``'s one-chip topology, compiled for from here (described once per
    process)."""
    if device not in TOPOLOGIES:
        raise TpuCompileUnavailable(f"no TPU topology for --device {device}")
    if libtpu_version() is None:
        import jax

        raise TpuCompileUnavailable("--compile needs the TPU compiler (libtpu) on this machine: "
                                    f'pip install "jax[tpu]=={jax.__version__}"')
    from jax.experimental import topologies

    _no_tpu_here()
    try:
        topo = topologies.get_topology_desc(topology_name=TOPOLOGIES[device], platform="tpu",
                                            chips_per_host_bounds=(1, 1, 1))
    except Exception as e:  # a libtpu of another JAX release, or one that cannot start here
        raise TpuCompileUnavailable(f"libtpu {libtpu_version()} could not describe a {device} here: "
                                    f"{str(e).splitlines()[0][:200]}") from e
    return topo.devices[0]


def _no_tpu_here() -> None:
    """On a machine without a TPU (no ``/dev/accel*``, no ``/dev/vfio``), libtpu starting up looks for the
    VM's accelerator type and workers and prints an error for each it cannot find: tell it what it is asked
    to compile for, one local chip, and keep JAX's own devices on the CPU (it would try the TPU first)."""
    if glob.glob("/dev/accel*") or os.path.exists("/dev/vfio"):
        return
    os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-1")
    os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
    import jax

    if not jax.config.jax_platforms:
        jax.config.update("jax_platforms", "cpu")


def compile_for(trainer: Any, x: Any, y: Any, device: str) -> Any:
    """``trainer``'s jitted step compiled for ``device`` (a --device TPU name) by libtpu, for abstract arguments
    of the shapes of its state and one batch (nothing is placed on any device): JAX's ``Compiled``."""
    import jax
    from jax.sharding import SingleDeviceSharding

    from twinbench.models.layers_jax import lowering_for

    place = SingleDeviceSharding(target_device(device))

    def abstract(a: Any) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=place)

    args = jax.tree.map(abstract, (trainer.params, trainer.opt_state, x, y))
    with lowering_for("tpu"):  # the Pallas kernels as Mosaic kernels, as on the chip
        return trainer.train_step.lower(*args).compile()


def mosaic_kernels(hlo: str) -> int:
    """The Mosaic (Pallas TPU) kernels a compiled program's text calls."""
    return hlo.count('custom_call_target="tpu_custom_call"')


def compile_step(trainer: Any, x: Any, y: Any, device: str) -> CompiledStep:
    """What the TPU compiler says of ``trainer``'s step on ``device`` (:func:`compile_for`)."""
    from twinbench.measure.memory import compiled_sizes

    compiled = compile_for(trainer, x, y, device)
    return CompiledStep(compiled_sizes(compiled), target_device(device).device_kind, f"libtpu {libtpu_version()}",
                        mosaic_kernels(compiled.as_text()))
