"""`twinbench compare --model` end to end: a user's Llama-style model (examples/byo) under torch and torchax,
and its own JAX port beside it (parity first, then measured). Real subprocesses on a tiny shape."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from twinbench.record import CONDITION_WARNINGS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "byo"
TINY = ["--preset", "tiny", "--steps", "4", "--warmup", "1", "--layers", "2", "--d-model", "32", "--heads", "2"]


def twinbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "twinbench.cli", *args], capture_output=True, text=True,
                          timeout=900)


@pytest.mark.slow
def test_compare_runs_a_user_model_under_torch_and_torchax(tmp_path):
    js = tmp_path / "r.json"
    p = twinbench("compare", "--model", f"{EXAMPLES / 'llama.py'}:build", *TINY, "--strategies", "eager,torchax",
                  "--out", str(tmp_path / "out"), "--json", str(js))
    assert p.returncode == 0, p.stderr[-3000:]
    torch_r, jax_r = json.loads(js.read_text())
    assert (torch_r["framework"], torch_r["strategy"], jax_r["framework"], jax_r["strategy"]) == (
        "torch", "eager", "jax", "torchax")
    for r in (torch_r, jax_r):
        assert r["status"] == "ok" and r["task"] == "custom" and len(r["losses"]) == 4
        assert r["tokens_per_s"] == pytest.approx(4 * 32 / (r["step_ms"] / 1e3))
        assert r["flops_per_token"] > 0 and "nn.Linear" in r["flops_convention"]
        assert any("dropout switched off" in w for w in r["warnings"])
    assert torch_r["n_params"] == jax_r["n_params"] and torch_r["flops_per_token"] == jax_r["flops_per_token"]
    # the same initial weights and batches: the same losses, step by step
    assert jax_r["losses"] == pytest.approx(torch_r["losses"], rel=1e-4)
    assert jax_r["compiles_during_steps"] == 0  # one jitted step, compiled once
    assert isinstance(jax_r["doctor"].get("findings"), list)  # the doctor looked at the JAX side
    assert (tmp_path / "out" / "byo" / "init.safetensors").exists()


@pytest.mark.slow
def test_compare_checks_and_measures_the_users_jax_port(tmp_path):
    js = tmp_path / "r.json"
    p = twinbench("compare", "--model", f"{EXAMPLES / 'llama.py'}:build",
                  "--jax-model", f"{EXAMPLES / 'llama_jax.py'}:build_jax", *TINY, "--strategies", "eager,port",
                  "--out", str(tmp_path / "out"), "--json", str(js))
    assert p.returncode == 0, p.stderr[-3000:]
    assert "parity of the JAX port against the torch model: OK" in p.stdout
    torch_r, port = json.loads(js.read_text())
    assert port["strategy"] == "port" and port["status"] == "ok"
    assert port["parity"]["ok"] and port["parity"]["steps"] == 10
    assert port["parity"]["grad_rel"] < 1e-3
    assert port["losses"] == pytest.approx(torch_r["losses"], rel=1e-4)
    assert isinstance(port["doctor"].get("findings"), list)
    assert "doctor jax/port:" in p.stdout  # the doctor's view of the JAX side, printed after the table
    # the dropout note is about the torch module, not the user's port (a busy machine or an uncertain peak may be said)
    assert [w for w in port["warnings"] if not w.startswith(CONDITION_WARNINGS)] == []
