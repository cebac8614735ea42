"""PyTorch's distributed runtime: the ``torchrun`` command the runner launches (ranks join in backends/torch.py).

The runner stays the only place that spawns processes: for a strategy registered with the ``torchrun``
launcher it starts ``python -m torch.distributed.run ... --module twinbench.worker SPEC RECORD`` instead of
the worker itself, and torchrun starts one worker per device. One host: ``--standalone`` (a private
rendezvous on a free port). Several hosts (``--num-processes`` > 1, one twinbench per host): a static
rendezvous with ``--nnodes``, ``--node-rank`` and the master address from ``--coordinator``; inside a SLURM job
(distributed/cluster.py) torchrun's c10d rendezvous on the job's first host instead.
"""

from __future__ import annotations

import contextlib
import sys

from twinbench.distributed.cluster import slurm_identity
from twinbench.machine import ranks
from twinbench.spec import RunSpec, SpecError

WORKER = "twinbench.worker"


def launch_command(spec: RunSpec, worker_args: list[str]) -> list[str]:
    """The torchrun command line that runs the worker on ``spec.launch.devices`` processes in all."""
    per_node = spec.launch.devices // spec.launch.num_processes
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(per_node)]
    slurm = slurm_identity()
    if spec.launch.num_processes > 1 and slurm is not None:  # in a SLURM job: torchrun's own c10d rendezvous
        host, port = coordinator(spec)
        cmd += ["--nnodes", str(spec.launch.num_processes), "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{host}:{port}",
                "--rdzv-id", f"twinbench-{slurm.job_id}-{spec.evolve(process_id=-1).run_id()}"]  # same on every host
    elif spec.launch.num_processes > 1:
        host, port = coordinator(spec)
        cmd += ["--nnodes", str(spec.launch.num_processes), "--node-rank", str(node_rank(spec)),
                "--master-addr", host, "--master-port", str(port)]
    else:
        cmd += ["--standalone"]
    return [*cmd, "--module", WORKER, *worker_args]


def coordinator(spec: RunSpec) -> tuple[str, int]:
    """(host, port) of the rendezvous: ``--coordinator HOST:PORT`` or ``MASTER_ADDR``/``MASTER_PORT``."""
    launched = ranks()
    address = spec.launch.coordinator or (f"{launched.master_addr}:{launched.master_port}" if launched.master_addr
                                          else "")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise SpecError(f"--coordinator {address!r}: a multi-host run needs HOST:PORT (or MASTER_ADDR/MASTER_PORT)")
    return host, int(port)


def node_rank(spec: RunSpec) -> int:
    """This host's rank: ``--process-id`` or ``NODE_RANK``."""
    if spec.launch.process_id >= 0:
        return spec.launch.process_id
    with contextlib.suppress(ValueError):  # a NODE_RANK that is no number is as good as none
        if (rank := ranks().node_rank) is not None and rank >= 0:
            return rank
    raise SpecError("--process-id: a multi-host torch run needs this host's rank (or NODE_RANK)")


def describe() -> str:
    import torch.distributed as dist

    nodes = dist.get_world_size() // (ranks().local_world_size or dist.get_world_size())
    return f"torch.distributed world {dist.get_world_size()} ({dist.get_backend()}), {nodes} node(s)"
