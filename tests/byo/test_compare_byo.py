"""`twinbench compare --model` end to end: a user's Llama-style model (examples/byo) under torch and torchax,
and its own JAX port beside it (parity first, then measured). One real compare of the three on a tiny shape, as a
user would run it; each run is its own subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from twinbench.record import CONDITION_WARNINGS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "byo"
TINY = ["--preset", "tiny", "--steps", "4", "--warmup", "1", "--layers", "2", "--d-model", "32", "--heads", "2"]


def twinbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "twinbench.cli", *args], capture_output=True, text=True,
                          timeout=900)


pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, dict[str, Any], Path]:
    """``compare --model llama.py --jax-model llama_jax.py --strategies eager,torchax,port``: the process, the
    records by strategy, the results directory."""
    tmp = tmp_path_factory.mktemp("byo")
    js = tmp / "r.json"
    p = twinbench("compare", "--model", f"{EXAMPLES / 'llama.py'}:build",
                  "--jax-model", f"{EXAMPLES / 'llama_jax.py'}:build_jax", *TINY,
                  "--strategies", "eager,torchax,port", "--out", str(tmp / "out"), "--json", str(js))
    assert p.returncode == 0, p.stderr[-3000:]
    records = json.loads(js.read_text())
    assert [(r["framework"], r["strategy"]) for r in records] == [("torch", "eager"), ("jax", "torchax"),
                                                                   ("jax", "port")]
    return p, {r["strategy"]: r for r in records}, tmp / "out"


def test_compare_runs_a_user_model_under_torch_and_torchax(compared):
    _, records, out = compared
    torch_r, jax_r = records["eager"], records["torchax"]
    for r in (torch_r, jax_r):
        assert r["status"] == "ok" and r["task"] == "custom" and len(r["losses"]) == 4
        assert r["tokens_per_s"] == pytest.approx(4 * 32 / (r["step_ms"] / 1e3))
        assert r["flops_per_token"] > 0 and "nn.Linear" in r["flops_convention"]
        assert any("dropout switched off (blocks.0.drop (Dropout p=0.1)" in w for w in r["warnings"])
        assert r["parity"]["trajectory"]["ok"] and r["parity"]["trajectory"]["steps"] == 4  # against torch eager
        assert r["memory_breakdown"]["parts"]["activations"] > 0, r["memory_breakdown"]  # no "error" either
    assert torch_r["n_params"] == jax_r["n_params"] and torch_r["flops_per_token"] == jax_r["flops_per_token"]
    # the same initial weights and batches: the same losses, step by step
    assert jax_r["losses"] == pytest.approx(torch_r["losses"], rel=1e-4)
    assert jax_r["compiles_during_steps"] == 0  # one jitted step, compiled once
    assert isinstance(jax_r["doctor"].get("findings"), list)  # the doctor looked at the JAX side
    assert (out / "byo" / "init.safetensors").exists()


def test_user_model_records_are_unchanged_on_the_twins_trainers(compared, records_unchanged):
    _, records, _ = compared
    records_unchanged(list(records.values()), "compare_byo_tiny")  # fields and losses as before


def test_compare_checks_and_measures_the_users_jax_port(compared):
    p, records, _ = compared
    torch_r, port = records["eager"], records["port"]
    assert "parity of the JAX port against the torch model: OK" in p.stdout
    assert port["status"] == "ok"
    assert port["parity"]["ok"] and port["parity"]["steps"] == 10
    assert port["parity"]["grad_rel"] < 1e-3
    assert port["losses"] == pytest.approx(torch_r["losses"], rel=1e-4)
    assert isinstance(port["doctor"].get("findings"), list)
    # the doctor's view of the JAX side, printed after the table: one line per distinct finding, naming every run
    # that has it ("doctor jax/torchax, jax/port: ..." when both got the same one, e.g. a busy machine's)
    doctor_runs = [line.strip().partition(": ")[0].removeprefix("doctor ").split(", ")
                   for line in p.stdout.splitlines() if line.strip().startswith("doctor ")]
    assert any("jax/port" in runs for runs in doctor_runs), p.stdout[-3000:]
    # the dropout note is about the torch module, not the user's port (a busy machine or an uncertain peak may be said)
    assert [w for w in port["warnings"] if not w.startswith(CONDITION_WARNINGS)] == []
