"""How a RunSpec reaches a process beyond this machine's own subprocesses: as a job of submitit's executors.

The default (no ``--launcher``) is the runner's own path: each run a fresh local subprocess
(``runner.run_many``). ``--launcher local`` and ``--launcher slurm`` submit each run as a job through
`submitit <https://github.com/facebookincubator/submitit>`_: ``local`` is its ``LocalExecutor`` (a job is a
process on this machine, one at a time: the same code path as SLURM's, job objects, state polling, result
collection, cancellation), ``slurm`` its ``SlurmExecutor`` (``sbatch``; a run's job is sized from its spec, see
:func:`shape`). Inside the job the run goes through ``runner.run_one`` as always: the runner stays the one place
that starts a worker, so records and guarantees are the same whatever the launcher.
"""

from __future__ import annotations

import math
import re
import shutil
from dataclasses import dataclass, field

from twinbench.spec import RunSpec, SpecError

LAUNCHERS = ("process", "local", "slurm")
#: a --slurm-option key: what sbatch takes as a long option (``constraint``, ``mem-per-gpu``, ``exclusive``)
SLURM_KEY = re.compile(r"^[a-z][a-z0-9_-]*$")


@dataclass(frozen=True)
class JobOptions:
    """The ``--launcher`` flags of compare, sweep and claims."""

    launcher: str = "process"
    partition: str = ""
    account: str = ""
    qos: str = ""
    time_min: int = 60  # --time: minutes a job may run
    gpus_per_node: int = 0  # 0: CPU nodes (devices are simulated in one process, as locally)
    cpus_per_task: int = 0  # 0: the scheduler's default
    slurm_options: tuple[tuple[str, str], ...] = ()  # --slurm-option KEY=VALUE, passed to sbatch as --KEY=VALUE
    max_parallel: int = 4  # jobs in the queue at once (measurements of two runs never share a node: one run a job)
    dry_run: bool = False
    folder: str = ""  # where submitit keeps each job's pickles and logs ("" : <out>/jobs)

    @property
    def jobs(self) -> bool:
        return self.launcher != "process"


def parse_slurm_options(items: list[str] | None) -> tuple[tuple[str, str], ...]:
    """``["constraint=h100", "exclusive"]`` -> ``(("constraint", "h100"), ("exclusive", ""))``; SpecError on a
    key that is not an sbatch long option's shape."""
    out = []
    for item in items or []:
        key, _, value = item.partition("=")
        if not SLURM_KEY.match(key):
            raise SpecError(f"--slurm-option {item!r}: KEY=VALUE with KEY an sbatch long option such as "
                            "constraint, mem-per-gpu or exclusive (lower case, letters, digits, - and _)")
        out.append((key, value))
    return tuple(out)


def check(opts: JobOptions) -> None:
    """One-line errors for options that cannot work here (exit 2 in the CLI)."""
    if opts.launcher not in LAUNCHERS:
        raise SpecError(f"--launcher {opts.launcher}: allowed: {', '.join(LAUNCHERS)}")
    for name, value in (("--time", opts.time_min), ("--max-parallel", opts.max_parallel)):
        if value < 1:
            raise SpecError(f"{name} must be a positive integer, got {value}")
    for name, value in (("--gpus-per-node", opts.gpus_per_node), ("--cpus-per-task", opts.cpus_per_task)):
        if value < 0:
            raise SpecError(f"{name} must be >= 0, got {value}")
    if opts.launcher == "slurm" and not opts.dry_run and shutil.which("sbatch") is None:
        raise SpecError("--launcher slurm: submitit finds no `sbatch` on this machine: run on a SLURM login node "
                        "(or use --dry-run to see the jobs it would submit)")
    if not opts.jobs and (opts.partition or opts.account or opts.qos or opts.slurm_options):
        raise SpecError("--partition/--account/--qos/--slurm-option need --launcher slurm")


@dataclass(frozen=True)
class JobShape:
    """What one run asks of the scheduler."""

    nodes: int
    tasks_per_node: int
    gpus_per_node: int
    extra: dict[str, str] = field(default_factory=dict)


def shape(spec: RunSpec, opts: JobOptions) -> JobShape:
    """A run's job: within one node, one task with ``devices`` GPUs; more devices than ``--gpus-per-node``,
    that many nodes, one task per node (each task one host of the multi-host run)."""
    gpus = opts.gpus_per_node
    if gpus <= 0 or spec.launch.devices <= gpus:
        return JobShape(1, 1, min(spec.launch.devices, gpus) if gpus > 0 else 0)
    if spec.launch.devices % gpus:
        raise SpecError(f"--devices {spec.launch.devices} is not a multiple of --gpus-per-node {gpus}: a job uses whole "
                        "nodes")
    return JobShape(math.ceil(spec.launch.devices / gpus), 1, gpus)


def job_spec(spec: RunSpec, js: JobShape) -> RunSpec:
    """The spec a job runs: a job of several nodes is a multi-host run of as many processes."""
    return spec.evolve(num_processes=js.nodes) if js.nodes > 1 else spec
