"""One backend per framework: the only modules that know which framework they run (torch.py, jax.py).

Measurement, the strategies and the worker ask :func:`get` for the run's framework and call what every
backend provides (:class:`Backend`): the device it runs on, its fp32 matmul precision, its allocator's peak,
its versions, a compile monitor, its profiler, a timed matmul for the peak, the attention label of a run,
the record fields only one framework has, and how its processes join a multi-process run. Each backend imports its framework inside its functions, so
importing this package loads neither.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from twinbench.backends import jax as jax_backend
from twinbench.backends import torch as torch_backend
from twinbench.backends.common import RecordFields
from twinbench.config import Framework
from twinbench.measure.compiles import CompileMonitor


class Backend(Protocol):
    """What a framework's backend module provides (each a module-level name of backends/torch.py, jax.py)."""

    NAME: str
    #: the trainer protocol (strategies/base.py) the memory breakdown and preflight read of this framework
    MEMORY_PROTOCOL: type
    #: the family option (``Family.supports``) a strategy building this framework's own twin needs ("" none)
    TWIN_OPTION: str
    #: whether XLA_FLAGS change this framework's runs (an XLA flag given to another framework is refused)
    READS_XLA_FLAGS: bool
    #: how predict reads this framework's step without running it (its progress line says so)
    PREDICT_READ: str
    #: whether the doctor watches a few extra steps of a user-model run of this framework (byo/run.py)
    DOCTOR_WATCHES_USER_RUN: bool
    #: whether a run's step compiles to program text explain can read and count by depth (explain --depths)
    STEP_PROGRAM_TEXT: bool

    def describe(self) -> tuple[str, str, int]: ...  # (platform, device name, devices visible)
    def set_threads(self, threads: int) -> None: ...  # the framework's own CPU thread pool
    def set_fp32_matmul(self, tf32: bool, platform: str | None, precision: str) -> str: ...
    def allocator_peak(self) -> int | None: ...  # the accelerator allocator's peak; None on the CPU
    def versions(self) -> dict[str, str]: ...  # the framework's packages, for the record
    def peak_versions(self) -> dict[str, str]: ...  # what a matmul peak depends on (its cache key)
    def compile_monitor(self) -> CompileMonitor: ...
    def profile_steps(self, step: Callable[[int], Any], sync: Callable[[], None], out_dir: Path, n: int) -> str: ...
    def start_trace(self, out_dir: Path) -> Any: ...  # the doctor's profiler around a script's own steps
    def stop_trace(self, started: Any, out_dir: Path) -> list[str]: ...  # the files it wrote, relative
    def step_annotation(self, index: int) -> Any: ...  # a context manager marking a script's step in the trace
    def wait_dispatched(self) -> None: ...  # every step dispatched so far has run
    def matmul(self, platform: str, dtype: str, batch: int, m: int, k: int, n: int,
               layout: str = "NN") -> tuple[Callable[[], Any], Callable[[], Any]]: ...  # the peak's; explain's A/B
    def attention_label(self, heads: int, seq: int, head_dim: int, dtype: str, causal: bool, masked: bool,
                        impl: str) -> str: ...
    def lean_attention(self, platform: str) -> str: ...  # an --attention-impl keeping no seq x seq scores
    def attention_impl(self, asked: str) -> str: ...  # the --attention-impl this framework's twins run
    def advice(self, fix: str, uses_nnx: Callable[[], bool]) -> str: ...  # a doctor's fix in this framework's words
    def record_fields(self, asked_impl: str) -> RecordFields: ...  # xla_flags, attention_impl
    def process_index(self, num_processes: int) -> int: ...  # this process's rank among a run's processes
    def fp32_matmul_words(self, platform: str, tf32: bool) -> str: ...  # what an fp32 matmul is there
    def remat_refusal(self, policy: str) -> str: ...  # why +remat cannot take --remat-policy ("" if it can)
    def process_env(self, devices: int, num_processes: int) -> dict[str, str]: ...  # set before the import
    def join(self, num_processes: int, coordinator: str, process_id: int) -> None: ...  # the distributed runtime
    def cpu_peaks(self, num_processes: int, device_count: int, threads: int) -> int: ...  # matmul peaks at once


BACKENDS: dict[str, Backend] = {Framework.TORCH: torch_backend, Framework.JAX: jax_backend}  # type: ignore[dict-item]
if {b.NAME for b in BACKENDS.values()} != set(BACKENDS):  # each backend is the one its framework names
    raise ValueError(f"backends name {sorted(b.NAME for b in BACKENDS.values())}, keyed {sorted(BACKENDS)}")


def get(framework: str) -> Backend:
    """The backend of ``framework`` ("torch" or "jax"); ValueError for any other name."""
    try:
        return BACKENDS[framework]
    except KeyError:
        raise ValueError(f"no backend for framework {framework!r} (known: {', '.join(BACKENDS)})") from None
