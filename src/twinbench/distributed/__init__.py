"""Parallelism applied to a model from outside: meshes and shardings (JAX), the torchrun launch and process
group (PyTorch), and the sharding report every multi-device run writes into its record.

Nothing here is imported by the models; the strategies ``jax_mesh``, ``jax_pmap``, ``torch_ddp`` and
``torch_fsdp`` use it to parallelise the unchanged twin model of any family (GPT, BERT).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys

from twinbench import backends
from twinbench.machine import ranks
from twinbench.spec import RunSpec


def process_env(spec: RunSpec) -> dict[str, str]:
    """Environment a run's own process needs before any framework is imported (its backend's
    ``process_env``: JAX's simulated CPU devices and collectives between processes; nothing for torch)."""
    return backends.get(spec.framework).process_env(spec.launch.devices, spec.launch.num_processes)


def initialize(spec: RunSpec) -> None:
    """Join the run's distributed runtime (a no-op for a one-process run); call before any device query."""
    backends.get(spec.framework).join(spec.launch.num_processes, spec.launch.coordinator, spec.launch.process_id)


def local_rank() -> int:
    """This process's rank on its host under torchrun (0 otherwise): local rank 0 writes the record."""
    return ranks().local_rank


def finish() -> None:
    """Leave the torch process group cleanly (no-op when none was joined)."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def end(code: int) -> int:
    """The worker's last act: leave the process group; a torchrun rank then ends at once with ``code``.

    A rank whose record is written must not die in the interpreter's teardown: torch's C++ state is destroyed
    there, and now and then a thread still joinable at that point aborts the process ("terminate called
    without an active exception", exit -6) after a clean run. torchrun counts that rank as failed, so its host's
    agent skips the exit barrier that every agent of a multi-host run waits in, and the other hosts' agents wait
    there for its whole timeout (300 s) before they end. So a rank runs Python's exit handlers, flushes its
    output and leaves with ``os._exit`` (no C++ teardown); a process not started by torchrun returns ``code``.
    """
    finish()
    if "TORCHELASTIC_RUN_ID" not in os.environ:  # not a torchrun rank
        return code
    atexit._run_exitfuncs()  # the Python-level cleanup a normal exit would run (temporary caches)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def parallel_peaks(spec: RunSpec, platform: str, device_count: int, threads: int) -> int:
    """How many copies of the measured per-process peak work at once in a run (MFU = achieved / (peak x this)).

    Accelerators: one per device. CPU: JAX's simulated devices share the threads of their process (one peak
    per process); torchrun ranks each measured their peak on ``threads`` threads, and a host runs at most
    ``cores / threads`` of them at once.
    """
    if platform != "cpu":
        return device_count
    return backends.get(spec.framework).cpu_peaks(spec.launch.num_processes, device_count, threads)
