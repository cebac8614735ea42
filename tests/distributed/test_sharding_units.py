"""Fast, in-process checks of the pieces the multi-device runs are built from (no subprocess, no devices)."""

from __future__ import annotations

from types import SimpleNamespace

import msgspec
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P
from rich.console import Console

from twinbench.distributed import process_env
from twinbench.distributed import sharding_report as sr
from twinbench.distributed.mesh import fsdp_spec
from twinbench.distributed.torchrun import launch_command
from twinbench.record import as_record, typed
from twinbench.record_sections import Record, Run
from twinbench.report import scaling
from twinbench.spec import RunSpec, SpecError, from_preset, validate
from twinbench.strategies import registry


def spec(**over) -> RunSpec:
    top = {k: over.pop(k) for k in ("framework", "strategy") if k in over}
    return validate(from_preset("tiny", {"batch": 8, **over}, **top))


@pytest.mark.parametrize(("shape", "n", "want"), [
    ((256, 64), 2, P("data", None)), ((64, 256), 4, P(None, "data")), ((64, 64), 2, P("data", None)),
    ((192,), 4, P("data")), ((3,), 2, P()), ((), 2, P()), ((256, 64), 1, P()), ((6, 9), 3, P(None, "data")),
])
def test_fsdp_shards_the_largest_divisible_dimension(shape, n, want):
    assert fsdp_spec(shape, n) == want


def test_process_env_gives_jax_its_simulated_devices():
    assert process_env(spec(framework="jax", strategy="mesh-dp", devices=4)) == {"JAX_NUM_CPU_DEVICES": "4"}
    two_hosts = process_env(spec(framework="jax", strategy="mesh-dp", devices=4, num_processes=2))
    assert two_hosts == {"JAX_NUM_CPU_DEVICES": "2", "JAX_CPU_COLLECTIVES_IMPLEMENTATION": "gloo"}
    assert process_env(spec(framework="torch", strategy="ddp", devices=4)) == {}


def test_torchrun_command_one_host_and_many():
    one = launch_command(spec(framework="torch", strategy="ddp", devices=4), ["S", "R"])
    assert one[1:] == ["-m", "torch.distributed.run", "--nproc-per-node", "4", "--standalone",
                       "--module", "twinbench.worker", "S", "R"]
    many = launch_command(spec(framework="torch", strategy="fsdp", devices=4, num_processes=2, process_id=1,
                               coordinator="10.0.0.1:29400"), ["S", "R"])
    assert many[3:15] == ["--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "1", "--master-addr",
                          "10.0.0.1", "--master-port", "29400", "--module", "twinbench.worker"]
    with pytest.raises(SpecError, match="--coordinator"):
        launch_command(spec(framework="torch", strategy="ddp", devices=2, num_processes=2, process_id=0), [])


def test_bad_device_settings_are_one_line_errors():
    with pytest.raises(SpecError, match="allowed with --devices > 1: mesh-dp, mesh-fsdp, pmap"):
        registry.check_devices(spec(framework="jax", strategy="jit", devices=2))
    with pytest.raises(SpecError, match=r"\+prefetch puts whole batches on one device"):
        registry.check_devices(spec(framework="torch", strategy="ddp+prefetch", devices=2))
    registry.check_devices(spec(framework="torch", strategy="ddp+bf16", precision="bf16", devices=2))  # composes now
    with pytest.raises(SpecError, match="--num-processes 3"):
        spec(devices=4, num_processes=3)
    with pytest.raises(SpecError, match="--process-id 2"):
        spec(devices=4, num_processes=2, process_id=2)
    with pytest.raises(SpecError, match="--batch 8 is not divisible by --devices 3"):
        spec(devices=3)
    registry.check_devices(validate(from_preset("bert-tiny", {"devices": 2, "batch": 8, "task": "classify"},
                                                framework="torch", strategy="ddp")))  # every family, now
    registry.check_devices(spec(framework="torch", strategy="fsdp", devices=4))  # fine


def _entry(name, shape, local, spec_="P('data')", n=2):
    return sr.entry(name, shape, "float32", 4, spec_, local, n)


def _report(batch_local, kind="dp", params=None, diff=0.0):
    return sr.build(kind=kind, mesh="m", device_count=2, batch=[_entry("x", (8, 32), batch_local)],
                    params=params or [_entry("w", (4, 4), (4, 4), "P()")], opt_state=[], drawn=[],
                    replicas_max_abs_diff=diff)


def test_warnings_flag_a_replicated_batch_and_unsynchronised_replicas():
    assert sr.warnings(_report((4, 32))) == []
    (w,) = sr.warnings(_report((8, 32)))
    assert "batch x [8, 32] is replicated on all 2 devices" in w
    (w,) = sr.warnings(_report((4, 32), diff=0.5))
    assert "not synchronised" in w
    fsdp = _report((4, 32), kind="fsdp", params=[_entry("w", (4, 4), (2, 4)), _entry("b", (3,), (3,), "P()")])
    (w,) = sr.warnings(fsdp)
    assert "params: 1 of 2 arrays" in w and "b [3]" in w
    assert fsdp.params.bytes_per_device == 2 * 4 * 4 + 3 * 4


def test_replica_check_sees_copies_that_differ():
    def shard(value, start):
        return SimpleNamespace(data=np.asarray(value), index=(slice(start, start + 1),))

    same = SimpleNamespace(addressable_shards=[shard([[1.0, 2.0]], 0), shard([[1.0, 2.0]], 1)])
    differ = SimpleNamespace(addressable_shards=[shard([[1.0, 2.0]], 0), shard([[1.0, 2.5]], 1)])
    assert sr.jax_replica_diff([same], stacked=True) == 0.0
    assert sr.jax_replica_diff([same, differ], stacked=True) == 0.5


def test_torch_chunks_follow_torch_chunk():
    assert [sr._chunk(10, 4, r) for r in range(4)] == [(0, 3), (3, 6), (6, 9), (9, 10)]


def test_drawing_names_the_devices_of_each_block():
    layout = [(f"CPU {d}", [(0, 8), (16 * d, 16 * (d + 1))]) for d in range(2)]
    e = sr.entry("w", (8, 32), "float32", 4, "P(None, 'data')", (8, 16), 2, layout)
    record = Record(status="ok", run=Run(framework="jax", strategy="mesh-fsdp"),
                    sharding=msgspec.structs.replace(_report((4, 32)), drawn=[e]), warnings=["batch x is replicated"])
    text = _rendered(record)
    assert "│" in text and "CPU 0" in text and "CPU 1" in text
    assert "P(None, 'data')" in text and "warning: batch x is replicated" in text
    assert text.index("CPU 0") < text.index("CPU 1")
    assert text.startswith("jax/mesh-fsdp: ")  # the label from the record's run section


def _rendered(record: Record) -> str:
    console = Console(record=True, width=100)
    for item in sr.render(record):
        console.print(item)
    return console.export_text()


def test_show_sharding_draws_each_ok_records_report(monkeypatch):
    """``run --show-sharding`` hands each ok run's typed record to the drawing; a failed run's warnings are
    listed on their own, with the run's label."""
    from twinbench.cli import run as cli_run

    console = Console(record=True, width=100)
    monkeypatch.setattr(cli_run, "out", console)
    drawn = Record(status="ok", run=Run(framework="jax", strategy="mesh-dp"), sharding=_report((4, 32)))
    failed = Record(status="failed", run=Run(framework="torch", strategy="ddp"), warnings=["params replicated"])
    cli_run.print_sharding([drawn, failed], drawings=True)
    text = console.export_text()
    assert "jax/mesh-dp: " in text and "batch x" in text
    assert "warning torch/ddp: params replicated" in text


def test_a_record_without_a_sharding_report_says_so():
    """A single-device run's record (its sharding section empty) renders one line naming the run."""
    text = _rendered(Record(status="ok", run=Run(framework="torch", strategy="eager")))
    assert text.strip() == "torch/eager: no sharding report (single-device strategy or failed run)"


def test_scaling_efficiency_strong_and_weak():
    def rec(n, batch, ms):
        return {"status": "ok", "framework": "jax", "strategy": "mesh-dp", "preset": "tiny", "layers": 2,
                "d_model": 64, "seq": 32, "precision": "fp32", "device_count": n, "batch": batch, "step_ms": ms,
                "platform": "cpu"}

    def recs(*flat):  # the records the report reads, typed as a results file's are
        return typed(flat)

    rows = scaling.efficiency(recs(rec(1, 8, 10.0), rec(2, 8, 8.0), rec(1, 4, 6.0), rec(2, 16, 20.0),
                                   rec(2, 4, 5.0) | {"status": "failed"}))
    by = {(r.devices, r.batch): r for r in rows}
    assert by[(2, 8)].strong_efficiency == pytest.approx(10.0 / (2 * 8.0))
    assert by[(2, 8)].weak_efficiency == pytest.approx(6.0 / 8.0)  # 4 per device: 1 device at batch 4
    assert by[(2, 16)].weak_efficiency == pytest.approx(10.0 / 20.0)
    assert by[(2, 16)].strong_efficiency is None  # no 1-device run at batch 16
    assert by[(1, 8)].strong_efficiency == pytest.approx(1.0)
    text = scaling.lines(recs(rec(1, 8, 10.0), rec(2, 8, 8.0)))
    assert "strong efficiency 0.62" in text[0]
    assert "not a speed-up" in text[-1]


def test_payoff_finds_the_per_device_batch_from_which_data_parallelism_pays():
    def rec(n, batch, ms, strategy="mesh-dp"):
        return as_record({"status": "ok", "framework": "jax", "strategy": strategy, "preset": "bert-tiny",
                          "layers": 2, "d_model": 128, "seq": 128, "precision": "fp32", "device_count": n,
                          "batch": batch, "step_ms": ms, "platform": "gpu"})

    # 4 devices: slower than one device at 2 and 8 per device (overhead), faster at 32 and 128
    recs = [rec(1, 8, 10.0), rec(4, 8, 20.0), rec(1, 32, 30.0), rec(4, 32, 31.0), rec(1, 128, 100.0),
            rec(4, 128, 50.0), rec(1, 512, 400.0), rec(4, 512, 120.0)]
    rows = scaling.payoff(recs)
    assert sorted((r.batch_per_device, round(r.speedup, 3)) for r in rows) == [
        (2, 0.5), (8, 0.968), (32, 2.0), (128, 3.333)]
    assert scaling.pays_from(rows) == {("jax", "mesh-dp", 4): 32}
    # a dip at the largest batch means it does not pay from any batch on; never above 1: None
    dip = scaling.pays_from(scaling.payoff([*recs[:-1], rec(4, 512, 500.0)]))
    assert dip == {("jax", "mesh-dp", 4): None}
    never = [rec(1, 8, 10.0), rec(2, 8, 12.0), rec(1, 16, 20.0), rec(2, 16, 19.5)]  # 1.03x: within the noise
    assert scaling.pays_from(scaling.payoff(never)) == {("jax", "mesh-dp", 2): None}
    text = scaling.payoff_lines(recs)
    assert text == ["jax/mesh-dp on 4 devices vs 1 device, same global batch, by batch per device: 0.50x at 2, "
                    "0.97x at 8, 2.00x at 32, 3.33x at 128: pays from 32 per device"]
    assert "does not pay up to 8 per device" in scaling.payoff_lines(never)[0]
