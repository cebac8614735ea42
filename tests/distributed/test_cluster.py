"""A process's place in a multi-host run from SLURM's environment (distributed/cluster.py), both frameworks."""

from __future__ import annotations

import pytest

from twinbench.distributed import cluster
from twinbench.distributed.torchrun import launch_command
from twinbench.plan import build_specs

TASK1 = {"SLURM_JOB_ID": "81234", "SLURM_NTASKS": "2", "SLURM_PROCID": "1", "SLURM_NODEID": "1", "SLURM_LOCALID": "0",
         "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_STEP_NODELIST": "gpu[07-08]"}


@pytest.mark.parametrize(("nodelist", "hosts"), [
    ("gpu[07-08]", ["gpu07", "gpu08"]), ("gpu[07-08,10],login1", ["gpu07", "gpu08", "gpu10", "login1"]),
    ("node1", ["node1"]), ("a[1-3]-ib", ["a1-ib", "a2-ib", "a3-ib"]), ("n[009-011]", ["n009", "n010", "n011"]),
])
def test_nodelist_expansion(nodelist, hosts):
    assert cluster.expand_nodelist(nodelist) == hosts


def test_task_1_of_a_two_node_job():
    ident = cluster.slurm_identity(TASK1)
    port = cluster.PORT_BASE + 81234 % cluster.PORT_SPAN
    assert (ident.num_processes, ident.process_id, ident.node_rank, ident.local_rank) == (2, 1, 1, 0)
    assert ident.coordinator == f"gpu07:{port}" and ident.hosts == ("gpu07", "gpu08")
    assert cluster.slurm_identity({**TASK1, "SLURM_NTASKS": "1"}) is None  # one task: not a multi-host run
    assert cluster.slurm_identity({}) is None


def test_both_frameworks_derive_their_place_from_slurm(monkeypatch):
    for k, v in TASK1.items():
        monkeypatch.setenv(k, v)
    port = cluster.PORT_BASE + 81234 % cluster.PORT_SPAN
    jax_spec, torch_spec = build_specs("tiny", "jax,torch", "mesh-fsdp,ddp", {"devices": 16, "batch": 16})
    for spec in (jax_spec, torch_spec):
        assert (spec.launch.num_processes, spec.launch.process_id, spec.launch.coordinator) == (2, 1, f"gpu07:{port}")
    cmd = launch_command(torch_spec, ["SPEC", "OUT"])
    assert cmd[cmd.index("--nnodes") + 1] == "2" and cmd[cmd.index("--nproc-per-node") + 1] == "8"
    assert cmd[cmd.index("--rdzv-backend") + 1] == "c10d" and cmd[cmd.index("--rdzv-endpoint") + 1] == f"gpu07:{port}"
    explicit = build_specs("tiny", "jax", "mesh-fsdp", {"devices": 16, "batch": 16, "process_id": 0, "coordinator": "h:1"})[0]
    assert (explicit.launch.process_id, explicit.launch.coordinator) == (0, "h:1")  # the command line wins
