"""``twinbench predict`` end to end on the tiny preset: a TPU target, this machine, calibration, bad input."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from twinbench.cli import app
from twinbench.load_meter import Reading
from twinbench.predict import command


@pytest.fixture(autouse=True)
def _cpu_peak(monkeypatch):
    """`--device here` reads this CPU's matmul peak as a run does (measure/peak.py's job, tested there): a fixed
    figure."""
    monkeypatch.setattr(command, "_run_peak", lambda *a, **k: 0.05)


def _predict(*args: str):
    return CliRunner().invoke(app, ["predict", "--preset", "tiny", *args])


def test_tpu_prediction_with_devices_curve_and_json(tmp_path):
    out = tmp_path / "p.json"
    r = _predict("--strategies", "jax:jit,jax:jit+bf16", "--device", "tpu-v5e", "--devices", "4", "--json", str(out))
    assert r.exit_code == 0, r.output
    assert "on tpu-v5e (TPU v5 lite): predicted step" in r.output and "error bar:" in r.output
    rows = json.loads(out.read_text())
    assert [row["strategy"] for row in rows] == ["jit", "jit+bf16"]
    fp32, bf16 = rows
    assert fp32["flops"] == pytest.approx(bf16["flops"], rel=0.05)  # the same work, in another dtype
    assert fp32["step_ms"] > 0 and fp32["fits"] == "yes" and 0 < fp32["memory_bytes_range"][0] <= fp32["memory_bytes_range"][1]
    assert [p["devices"] for p in bf16["devices_curve"]] == [1, 2, 4]
    assert bf16["devices_curve"][-1]["allreduce_ms"] > 0 and bf16["devices_curve"][-1]["link"] == "ICI"
    assert bf16["dominant"] and bf16["error_bar"]["n"] >= 1  # the shipped TPU point of jax


def test_here_with_calibration_from_records(tmp_path):
    from twinbench.measure.device import cpu_name

    rec = {"framework": "jax", "strategy": "jit", "preset": "tiny", "batch": 4, "seq": 32, "status": "ok",
           "step_ms": 40.0, "device": cpu_name(), "platform": "cpu", "run_id": "a", "n_params": 1}
    elsewhere = {**rec, "device": "another machine's CPU", "run_id": "b", "step_ms": 400.0}
    results = tmp_path / "results.jsonl"
    results.write_text(json.dumps(rec) + "\n" + json.dumps(elsewhere) + "\n")
    out = tmp_path / "p.json"
    r = _predict("--strategies", "jax:jit", "--device", "here", "--calibrate", str(results), "--json", str(out))
    assert r.exit_code == 0, r.output
    (row,) = json.loads(out.read_text())
    assert row["platform"] == "cpu"
    # the one point is fitted exactly: the calibrated prediction of its own configuration is its measurement
    assert row["step_ms"] == pytest.approx(40.0, rel=1e-3)
    assert row["calibration_factor"] == pytest.approx(40.0 / row["roofline_ms"], rel=1e-3)
    assert "measured / predicted" in r.output and "over 1 point(s)" in r.output  # not the other machine's


@pytest.mark.parametrize(("args", "message"), [
    (["--device", "tpu-v9"], "--device: unknown device 'tpu-v9'"),
    (["--device", "h200", "--devices", "0"], "--devices must be 1 to 1,048,576"),
    (["--device", "h200", "--calibrate", "/nonexistent.jsonl"], "--calibrate: /nonexistent.jsonl is not a file"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    r = _predict("--strategies", "jax:jit", *args)
    assert r.exit_code == 2
    assert message in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_torchax_is_predicted_from_its_own_program(tmp_path):
    """jax:torchax lowers the family's PyTorch module through torchax: its own HLO, the same model's matmuls. In a
    process of its own: importing torchax registers a device with torch for good, and a torch.compile later in the
    same test worker fails on it ("PyTorch is not linked with support for jax devices")."""
    import subprocess
    import sys

    out = tmp_path / "p.json"
    r = subprocess.run([sys.executable, "-m", "twinbench.cli", "predict", "--preset", "tiny", "--strategies",
                        "jax:torchax+bf16,jax:jit+bf16", "--device", "tpu-v5e", "--json", str(out)],
                       capture_output=True, text=True, timeout=300)
    output = r.stdout + r.stderr
    assert r.returncode == 0, output
    assert "jax torchax+bf16 tiny 4x32 on tpu-v5e (TPU v5 lite): predicted step" in " ".join(output.split())
    torchax, jit = json.loads(out.read_text())
    assert torchax["strategy"] == "torchax+bf16" and torchax["step_ms"] > 0 and torchax["fits"] == "yes"
    assert torchax["flops"] == pytest.approx(jit["flops"], rel=0.05)  # the same model's matmuls
    assert torchax["source"].startswith("unoptimized HLO") and torchax["source"] != jit["source"]


def test_model_and_its_port_are_predicted_from_one_build_with_no_step_run(monkeypatch):
    """predict --model builds the user's module once, in its own process, and traces its step (fake tensors; the
    port's under jax.eval_shape): not compare's check (byo.prepare, byo.parity: real training steps, at BERT-base
    size minutes and gigabytes); progress printed; --jax-model predicts the port (jax:port)."""
    from twinbench import runner

    started, real = [], runner.run_module
    monkeypatch.setattr(runner, "run_module", lambda module, *a, **k: started.append(module) or real(module, *a, **k))
    r = _predict("--model", "examples/flax_port/model_torch.py:build", "--jax-model",
                 "examples/flax_port/model_nnx.py:build_jax", "--device", "h200")
    assert r.exit_code == 0, r.output
    assert started == ["twinbench.predict.user"]
    assert "torch eager tiny" in r.output and "jax port tiny" in r.output and "error bar:" in r.output
    assert "predict [" in r.output and "no training step is run" in r.output
    assert "reading jax:port's step" in r.output


def test_here_on_a_busy_machine_says_so_with_the_threads_flag():
    """--device here reads this CPU's sheet now: with other processes taking cores it says the figure is this
    moment's and gives the flag (`--threads N`, the cores left); a quiet machine gets no line."""
    from twinbench.plan import build_specs

    specs = build_specs("tiny", "jax", "jit", {})
    (line,) = command.busy_here(specs, Reading(load_avg_1m=None, cpu_count=4, load_avg_1m_external=3.0))
    assert line.startswith("busy machine: other processes' load 3.00 on 4 core(s)") and "`--threads 1`" in line
    assert command.busy_here(specs, Reading(load_avg_1m=None, cpu_count=4, load_avg_1m_external=0.4)) == []
    one = build_specs("tiny", "jax", "jit", {"threads": 1})
    assert "--threads" not in command.busy_here(one, Reading(load_avg_1m=None, cpu_count=4, load_avg_1m_external=3.0))[0]
