"""A user's model on several devices: torch fsdp and torchax on a JAX mesh, and which names a user model takes.

One compare of Hugging Face BERT (examples/byo/hf_bert.py, a tiny BertConfig, dropout left at 0.1) under fsdp
and torchax-mesh-dp on 2 devices: every loss trajectory is the one-device eager one (the records' ``parity``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from twinbench.byo.plan import build_specs, multi_device_bases, needs_port
from twinbench.plan import build_specs as plan_build_specs
from twinbench.spec import SpecError
from twinbench.strategies import registry

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "byo"
BERT, LLAMA = f"{EXAMPLES / 'hf_bert.py'}:build", f"{EXAMPLES / 'llama.py'}:build"
MESH = ("torchax-mesh-dp", "torchax-mesh-fsdp", "port-mesh-dp", "port-mesh-fsdp")


def test_user_mesh_and_fsdp_names_select_several_devices():
    specs = build_specs("tiny", ["torch", "jax"], ["fsdp", "torchax-mesh-dp", "torchax-mesh-fsdp"], {"devices": 2},
                        BERT)
    assert [(s.framework, s.strategy.name, s.launch.devices) for s in specs] == [
        ("torch", "fsdp", 2), ("jax", "torchax-mesh-dp", 2), ("jax", "torchax-mesh-fsdp", 2)]
    assert set(MESH) | {"ddp", "fsdp"} == set(multi_device_bases())
    for name in MESH:
        s = registry.REGISTRY[("jax", name)]
        assert s.multi_device and s.families == ("user",) and s.builder == "twinbench.strategies.jax_user:build_mesh"
    with pytest.raises(SpecError, match="'torchax' runs a user model on one device; on several: ddp, fsdp, torchax-mesh-dp"):
        build_specs("tiny", ["jax"], ["torchax-mesh-dp", "torchax"], {"devices": 2}, BERT)


def test_port_mesh_needs_a_port_and_twins_refuse_user_only_names():
    assert needs_port("port-mesh-fsdp") and needs_port("port") and not needs_port("torchax-mesh-dp")
    with pytest.raises(SpecError, match="'port-mesh-dp' measures the user's own JAX port: give --jax-model"):
        build_specs("tiny", ["jax"], ["port-mesh-dp"], {"devices": 2}, LLAMA)
    every = [s.strategy.name for s in build_specs("tiny", ["torch", "jax"], ["all"], {}, LLAMA)]
    assert "torchax-mesh-fsdp" in every and "fsdp" in every and not any(needs_port(n) for n in every)
    with pytest.raises(SpecError, match="'torchax-mesh-dp' runs a user's own model: give --model"):
        plan_build_specs("tiny", "jax", "torchax-mesh-dp", {"devices": 2})
    with pytest.raises(SpecError, match=r"\+nodonate does not apply to jax 'torchax-mesh-dp'|modifier 'nodonate'"):
        build_specs("tiny", ["jax"], ["torchax-mesh-dp+nodonate"], {"devices": 2}, LLAMA)


@pytest.fixture(scope="module")
def bert_on_two_devices(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, dict[str, Any]]:
    """``compare --model hf_bert.py --strategies fsdp,torchax-mesh-dp --devices 2`` on a tiny BertConfig."""
    tmp = tmp_path_factory.mktemp("byo-many")
    js = tmp / "r.json"
    p = subprocess.run([sys.executable, "-m", "twinbench.cli", "compare", "--model", BERT, "--preset", "tiny",
                        "--steps", "3", "--warmup", "1", "--layers", "1", "--d-model", "32", "--heads", "2",
                        "--devices", "2", "--strategies", "fsdp,torchax-mesh-dp", "--out", str(tmp / "out"),
                        "--json", str(js)], capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    return p, {r["strategy"]: r for r in json.loads(js.read_text())}


@pytest.mark.slow
def test_hf_bert_under_fsdp_and_torchax_mesh_dp_follows_one_device_eager(bert_on_two_devices):
    p, records = bert_on_two_devices
    assert set(records) == {"fsdp", "torchax-mesh-dp"}
    for r in records.values():
        assert r["status"] == "ok" and r["device_count"] == 2, r.get("error")
        tr = r["parity"]["trajectory"]  # against the preparation process's one-device torch eager losses
        assert tr["ok"] and tr["steps"] == 3 and tr["max_rel"] <= 1e-5 and tr["vs"] == "torch eager"
        assert any("bert.encoder.layer.0.attention.self.dropout (Dropout p=0.1)" in w for w in r["warnings"])
    fsdp, mesh = records["fsdp"]["sharding"], records["torchax-mesh-dp"]["sharding"]
    assert fsdp["kind"] == "fsdp" and mesh["kind"] == "dp" and mesh["replicas_max_abs_diff"] == 0.0
    assert list(fsdp["params"]["specs"]) == ["DTensor(Shard(0))"]  # every parameter sharded over the 2 ranks
    assert fsdp["params"]["bytes_per_device"] < fsdp["params"]["bytes"] == mesh["params"]["bytes_per_device"]
    assert [e["spec"] for e in mesh["batch"]] == ["P('data', None)", "P('data')"]  # the batch split, not copied
    assert "doctor jax/torchax-mesh-dp:" in p.stdout


def test_where_a_shapes_initial_weights_live_does_not_label_rows():
    from twinbench.record import typed, varying

    records = typed({"framework": "jax", "strategy": "torchax-mesh-dp",
                     "spec": {"model": {}, "train": {"batch": b}, "user_dir": f"/out/shape-{i}/byo"}}
                    for i, b in enumerate((2, 4)))
    assert varying(records) == ["batch"]  # a sweep or claims prepares each shape in its own directory
