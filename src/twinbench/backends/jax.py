"""The JAX backend: what measurement, the strategies and the worker ask of JAX (see backends/__init__.py).

jax is imported inside each function: importing this module loads nothing of it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from twinbench.backends.common import RecordFields
from twinbench.machine import ranks
from twinbench.measure import platforms
from twinbench.measure.compiles import CompileMonitor, JaxCompiles
from twinbench.measure.host import cpu_name
from twinbench.strategies.base import JaxStepTrainer

NAME = "jax"
#: what the memory breakdown and preflight read of a JAX trainer: one jitted step over a parameter pytree
MEMORY_PROTOCOL = JaxStepTrainer
#: a JAX strategy that builds the family's NNX twin needs the family to have one
TWIN_OPTION = "jax-twin"
READS_XLA_FLAGS = True
PREDICT_READ = "lowered from state traced by jax.eval_shape"
#: a user-model run of this framework (torchax, the user's port) is a translation of the user's torch module:
#: the doctor watches a few extra steps of it, for the jit and host mistakes it finds (byo/run.py)
STEP_PROGRAM_TEXT = True  # the compiled HLO
DOCTOR_WATCHES_USER_RUN = True

#: the record's name of each ``--attention-impl``; any other (the default) is the twins' einsums
ATTENTION_LABELS = {"cudnn": "cudnn (fused)", "splash": "splash (Pallas TPU, fused)",
                    "chunked": "chunked (blocks of queries, XLA)",
                    "jax-nn": "jax.nn.dot_product_attention (xla, unfused)"}


def describe() -> tuple[str, str, int]:
    """(platform, device name, devices visible) of JAX's default backend; a CPU is named by the host's model."""
    import jax

    dev = jax.local_devices()[0]
    name = cpu_name() if dev.platform == "cpu" else dev.device_kind
    return platforms.name(dev.platform) or "cpu", name, jax.local_device_count()


def set_threads(threads: int) -> None:
    """Nothing: XLA sizes its pools from the process's CPU affinity, which the worker has set."""


def set_fp32_matmul(tf32: bool, platform: str | None, precision: str) -> str:
    """``jax_default_matmul_precision``: highest (full fp32) or tensorfloat32. A bf16 run on a TPU keeps
    JAX's default: its matmuls take bf16 operands, one pass whatever the setting, and the TPU's Pallas
    kernels (Mosaic) refuse ``highest`` on bf16 operands ("Bad lhs type")."""
    import jax

    platform = platform or jax.default_backend()
    if platform == "tpu" and precision == "bf16" and not tf32:
        jax.config.update("jax_default_matmul_precision", "default")
        return "bf16 operands, one bf16 pass; jax_default_matmul_precision=default"
    value = "tensorfloat32" if tf32 else "highest"
    jax.config.update("jax_default_matmul_precision", value)
    words = fp32_matmul_words(platform, tf32)
    return f"{words}; jax_default_matmul_precision={value}"


def fp32_matmul_words(platform: str, tf32: bool) -> str:
    """What JAX's fp32 matmuls are on ``platform``: ``fp32 (no TF32)``, ``tf32``, or on a TPU its bf16 passes."""
    return platforms.get(platform).jax_fp32_words["tensorfloat32" if tf32 else "highest"]


def allocator_peak() -> int | None:
    """The first local device's allocator peak (``memory_stats``); None on the CPU or where it has none."""
    import jax

    dev = jax.local_devices()[0]  # on several hosts, jax.devices()[0] may be another process's device
    if dev.platform == "cpu":
        return None
    stats = dev.memory_stats() or {}
    return int(stats["peak_bytes_in_use"]) if "peak_bytes_in_use" in stats else None


def versions() -> dict[str, str]:
    """jax, jaxlib, flax, optax; grain when the +prefetch pipeline ran on it; torch and torchax when a torch
    module ran through torchax (jax:torchax)."""
    import flax
    import jax
    import jaxlib
    import optax

    out = {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "flax": flax.__version__,
           "optax": optax.__version__}
    if "grain" in sys.modules:  # the +prefetch input pipeline (data/pipeline.py) ran on it
        out["grain"] = sys.modules["grain"].__version__
    if "torchax" in sys.modules:  # a torch module run by torchax (jax:torchax): its torch and torchax
        from importlib.metadata import version

        out |= {"torch": sys.modules["torch"].__version__, "torchax": version("torchax")}
    return out


def peak_versions() -> dict[str, str]:
    """What a matmul peak depends on: jax and jaxlib, and XLA_FLAGS when set (they change what a matmul
    compiles to)."""
    import jax
    import jaxlib

    out = {"jax": jax.__version__, "jaxlib": jaxlib.__version__}
    if os.getenv("XLA_FLAGS", "").strip():
        out["xla_flags"] = " ".join(sorted(os.environ["XLA_FLAGS"].split()))
    return out


def compile_monitor() -> CompileMonitor:
    return JaxCompiles()


def profile_steps(step: Callable[[int], Any], sync: Callable[[], None], out_dir: Path, n: int) -> str:
    """``n`` steps under ``jax.profiler.trace``: the Perfetto trace's path (else the XPlane's, else the folder)."""
    import jax

    with jax.profiler.trace(str(out_dir), create_perfetto_trace=True):
        for i in range(n):
            with jax.profiler.StepTraceAnnotation("twinbench_step", step_num=i):
                step(i + 1)
                sync()
    found = (sorted(out_dir.rglob("perfetto_trace.json.gz")) or sorted(out_dir.rglob("*.trace.json.gz"))
             or sorted(out_dir.rglob("*.xplane.pb")))
    return str(found[-1]) if found else str(out_dir)


def start_trace(out_dir: Path) -> Any:
    """Start the profiler around a script's own steps (the doctor's trace): ``jax.profiler.start_trace``."""
    import jax

    jax.profiler.start_trace(str(out_dir))
    return out_dir


def stop_trace(started: Any, out_dir: Path) -> list[str]:
    """Stop :func:`start_trace`'s profiler; the files it wrote (XPlanes), relative to ``out_dir``."""
    import jax

    jax.profiler.stop_trace()
    return [str(p.relative_to(out_dir)) for p in out_dir.rglob("*.xplane.pb")]


def step_annotation(index: int) -> Any:
    """The trace's mark of a script's step ``index`` (0-based): a ``StepTraceAnnotation`` numbered from 1."""
    import jax

    return jax.profiler.StepTraceAnnotation("train", step_num=index + 1)


def wait_dispatched() -> None:
    """Wait for every step dispatched so far (each live array ready), so a step's mark closes on its work."""
    import jax

    for arr in jax.live_arrays():
        with contextlib.suppress(Exception):  # deleted (donated) meanwhile
            arr.block_until_ready()


def matmul(platform: str, dtype: str, batch: int, m: int, k: int, n: int,
           layout: str = "NN") -> tuple[Callable[[], Any], Callable[[], Any]]:
    """``batch x [m,k] x [k,n]`` of ``dtype``, jitted, on JAX's default device (the peak's square product: batch
    1, m = k = n), with the operands stored as ``layout`` says (``NT``: the second as [n,k], transposed inside the
    jitted function, where XLA folds it into the dot as a traced program had it: explain's per-shape A/B), and
    the wait for its last result."""
    import jax
    import jax.numpy as jnp

    jdt = jnp.bfloat16 if dtype == "bf16" else jnp.float32
    lead = (batch,) if batch > 1 else ()
    ta, tb = layout[0] == "T", layout[1] == "T"
    a = jax.random.normal(jax.random.key(0), (*lead, k, m) if ta else (*lead, m, k), jdt)
    b = jax.random.normal(jax.random.key(1), (*lead, n, k) if tb else (*lead, k, n), jdt)

    @jax.jit
    def mm(a: jax.Array, b: jax.Array) -> jax.Array:
        return jnp.matmul(jnp.swapaxes(a, -1, -2) if ta else a, jnp.swapaxes(b, -1, -2) if tb else b)

    last: list = []

    def run() -> None:
        last[:] = [mm(a, b)]

    return run, lambda: last[0].block_until_ready()


def impl_label(impl: str) -> str:
    """The record's name of a JAX attention by ``--attention-impl``: the formulation asked for is what runs."""
    return ATTENTION_LABELS.get(impl, "einsum (xla, unfused)")


def attention_label(heads: int, seq: int, head_dim: int, dtype: str, causal: bool, masked: bool,
                    impl: str = "default") -> str:
    """:func:`impl_label` of the run's ``--attention-impl`` (no probe needed: the shape does not change it)."""
    return impl_label(impl)


def lean_attention(platform: str) -> str:
    """The ``--attention-impl`` that keeps no seq x seq probabilities on ``platform``."""
    return platforms.get(platform).lean_attention


def attention_impl(asked: str) -> str:
    """The ``--attention-impl`` the JAX twins run: the one asked for."""
    return asked


def advice(fix: str, uses_nnx: Callable[[], bool]) -> str:
    """A doctor finding's fix as it applies to a JAX run: the PyTorch lines dropped, and for code that is not Flax
    NNX (``uses_nnx()``, asked only when it matters) the NNX advice too."""
    import re

    lines = [ln for ln in str(fix).splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.lstrip().startswith(("PyTorch:", "torch:"))] or lines
    text = " ".join(lines)
    if not uses_nnx():
        text = re.sub(r"\s*\(Flax NNX:[^)]*\)", "", text).replace("nnx.scan / ", "")
        text = re.sub(r"nnx\.jit\([^)]*\)", "jax.jit(train_step, donate_argnums=...)", text)
    return text


def record_fields(asked_impl: str) -> RecordFields:
    """The XLA flags the run's compiles saw, and the attention formulation it ran."""
    return RecordFields(xla_flags=os.getenv("XLA_FLAGS", ""), attention_impl=attention_impl(asked_impl))


def process_index(num_processes: int) -> int:
    """This process's index among a multi-process run's (``jax.process_index``); else torchrun's RANK, 0 alone."""
    if num_processes > 1:
        import jax

        return jax.process_index()
    return ranks().rank


def remat_refusal(policy: str) -> str:
    """Nothing: the JAX twins take every ``--remat-policy`` (``jax.checkpoint_policies``)."""
    return ""


def process_env(devices: int, num_processes: int) -> dict[str, str]:
    """On the CPU: ``devices / num_processes`` simulated devices (``jax_num_cpu_devices``, read from
    ``JAX_NUM_CPU_DEVICES`` at import) and, for several processes, gloo collectives between them. It only
    affects JAX's host platform: on a GPU machine ``jax.devices()`` stays the GPUs."""
    env: dict[str, str] = {}
    local = max(devices // max(num_processes, 1), 1)
    if local > 1:
        env["JAX_NUM_CPU_DEVICES"] = str(local)
    if num_processes > 1:
        env["JAX_CPU_COLLECTIVES_IMPLEMENTATION"] = "gloo"
    return env


def join(num_processes: int, coordinator: str, process_id: int) -> None:
    """``jax.distributed.initialize`` for a run spread over ``num_processes`` processes (hosts).

    The coordinator address comes from ``--coordinator`` or ``JAX_COORDINATOR_ADDRESS``, the process id
    from ``--process-id`` (-1: unset) or ``JAX_PROCESS_ID``; whatever is still unset JAX detects itself on a
    cluster it knows (SLURM, Open MPI, Kubernetes, Cloud TPU).
    """
    import jax

    if num_processes <= 1 or jax.distributed.is_initialized():
        return
    address = coordinator or os.getenv("JAX_COORDINATOR_ADDRESS") or None
    pid: int | None = process_id if process_id >= 0 else None
    if pid is None and os.getenv("JAX_PROCESS_ID"):
        pid = int(os.environ["JAX_PROCESS_ID"])
    if os.getenv("JAX_CPU_COLLECTIVES_IMPLEMENTATION"):  # set by process_env (CPU runs)
        jax.config.update("jax_cpu_collectives_implementation", os.environ["JAX_CPU_COLLECTIVES_IMPLEMENTATION"])
    jax.distributed.initialize(coordinator_address=address, num_processes=num_processes,
                               process_id=pid, initialization_timeout=120)


def cpu_peaks(num_processes: int, device_count: int, threads: int) -> int:
    """JAX's simulated CPU devices share the threads of their process: one peak per process."""
    return num_processes
