"""A user model on several devices: the plan's device rules, and `sweep --model ... --over devices=1,2` under ddp."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from twinbench.byo.plan import build_specs
from twinbench.spec import SpecError

LLAMA = Path(__file__).resolve().parents[2] / "examples" / "byo" / "llama.py"


def test_several_devices_take_only_multi_device_strategies():
    specs = build_specs("tiny", ["torch"], ["ddp"], {"devices": 2}, f"{LLAMA}:build")
    assert [(s.strategy.name, s.launch.devices) for s in specs] == [("ddp", 2)]
    with pytest.raises(SpecError, match="'eager' runs a user model on one device"):
        build_specs("tiny", ["torch"], ["ddp", "eager"], {"devices": 2}, f"{LLAMA}:build")


@pytest.mark.slow
def test_sweep_of_a_user_model_over_devices_under_ddp(tmp_path):
    js = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-m", "twinbench.cli", "sweep", "--model", f"{LLAMA}:build", "--preset", "tiny",
                        "--over", "devices=1,2", "--strategies", "ddp", "--steps", "4", "--warmup", "1",
                        "--layers", "2", "--d-model", "32", "--heads", "2", "--out", str(tmp_path / "out"),
                        "--json", str(js)], capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    records = json.loads(js.read_text())
    assert [(r["strategy"], r["device_count"], r["status"]) for r in records] == [("ddp", 1, "ok"), ("ddp", 2, "ok")]
    for r in records:  # the global batch split over ranks: the one-device eager trajectory
        assert r["parity"]["trajectory"]["ok"] and r["parity"]["trajectory"]["steps"] == 4
        assert r["sharding"]["replicas_max_abs_diff"] == 0.0
    assert records[1]["losses"] == pytest.approx(records[0]["losses"], rel=1e-5)
    assert "strong efficiency" in p.stdout  # the scaling table's summary line
