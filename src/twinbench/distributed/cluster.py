"""A process's place in a multi-host run, from the scheduler that started it (SLURM).

Inside a SLURM job step with several tasks (``srun twinbench compare --devices 16 ...`` in an ``salloc`` of 2
nodes, or a job twinbench submitted itself with ``--launcher slurm``) every task is one host of the run: its
process id is ``SLURM_PROCID``, the number of processes ``SLURM_NTASKS``, and the coordinator (JAX's
``jax.distributed`` coordinator, torchrun's c10d rendezvous endpoint) is the first host of the step's node
list (``SLURM_STEP_NODELIST``, else ``SLURM_JOB_NODELIST``; compressed like ``gpu[07-08]``) on a port derived
from the job id, so that every task computes the same address without talking to the others. ``MASTER_PORT``
overrides the port. Flags given on the command line (``--num-processes``, ``--process-id``,
``--coordinator``) always win.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

import msgspec

#: rendezvous ports are 20000 + job id mod 20000: the same in every task of a job, rarely shared by two jobs
PORT_BASE, PORT_SPAN = 20000, 20000


def expand_nodelist(nodelist: str) -> list[str]:
    """SLURM's compressed host list: ``gpu[07-08,10],login1`` -> ``[gpu07, gpu08, gpu10, login1]``."""
    hosts: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", nodelist):
        m = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", part)
        if not m:
            hosts.append(part)
            continue
        prefix, ranges, suffix = m.groups()
        for item in ranges.split(","):
            lo, _, hi = item.partition("-")
            if not hi:
                hosts.append(f"{prefix}{lo}{suffix}")
                continue
            if not (lo.isdigit() and hi.isdigit()) or int(hi) < int(lo):
                raise ValueError(f"cannot read the SLURM node list {nodelist!r} (range {item!r})")
            hosts += [f"{prefix}{i:0{len(lo)}d}{suffix}" for i in range(int(lo), int(hi) + 1)]
    return hosts


@dataclass(frozen=True)
class Identity:
    """Where this process stands in a multi-host run."""

    num_processes: int
    process_id: int  # global rank of this task (SLURM_PROCID)
    node_rank: int  # SLURM_NODEID: torchrun's node rank
    local_rank: int  # SLURM_LOCALID
    coordinator: str  # FIRST_HOST:PORT
    job_id: str
    hosts: tuple[str, ...]


class _Slurm(msgspec.Struct, kw_only=True, frozen=True, rename="upper"):
    """The SLURM variables a task of a job step reads (as strings: a malformed one is refused where it is used)."""

    slurm_job_id: str = ""
    slurm_ntasks: str = "1"
    slurm_procid: str = "0"
    slurm_nodeid: str = "0"
    slurm_localid: str = "0"
    slurm_step_nodelist: str = ""
    slurm_job_nodelist: str = ""
    slurm_nodelist: str = ""
    master_port: str = ""


def slurm_identity(env: Mapping[str, str] | None = None) -> Identity | None:
    """This task's identity in a SLURM job step of several tasks; None outside SLURM or with one task."""
    env = os.environ if env is None else env
    names = {n.upper() for n in _Slurm.__struct_fields__}
    s = msgspec.convert({k: str(env[k]) for k in names if k in env}, _Slurm)
    if not s.slurm_job_id or int(s.slurm_ntasks or 1) < 2:
        return None
    nodelist = s.slurm_step_nodelist or s.slurm_job_nodelist or s.slurm_nodelist
    hosts = tuple(expand_nodelist(nodelist)) if nodelist else ()
    if not hosts:
        raise ValueError("SLURM job without a node list (SLURM_STEP_NODELIST / SLURM_JOB_NODELIST)")
    job = s.slurm_job_id
    port = int(s.master_port) if s.master_port.isdigit() else PORT_BASE + int(re.sub(r"\D", "", job) or 0) % PORT_SPAN
    return Identity(num_processes=int(s.slurm_ntasks), process_id=int(s.slurm_procid),
                    node_rank=int(s.slurm_nodeid), local_rank=int(s.slurm_localid),
                    coordinator=f"{hosts[0]}:{port}", job_id=job, hosts=hosts)


def fill_from_cluster(top: dict, env: Mapping[str, str] | None = None) -> dict:
    """``top`` (the run-spec fields of the command line) with ``num_processes``, ``process_id`` and
    ``coordinator`` taken from SLURM where the command line left them at their defaults."""
    ident = slurm_identity(env)
    if ident is None:
        return top
    given = {"num_processes": ident.num_processes, "process_id": ident.process_id, "coordinator": ident.coordinator}
    on_line = {k: v for k, v in top.items() if v is not None}  # what the command line set wins
    return {**top, **given, **on_line}
