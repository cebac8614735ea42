"""The suite on an accelerator, planned on this CPU: the seeds' sizes, torch through torchax on a TPU, memory as
each platform reports it, no verdict from two platforms, and the plan's predicted device time."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from twinbench.claims.core import NOT_MEASURABLE, SUPPORTED, Evidence, load_all, select, setup_for
from twinbench.claims.suite import plan, verdicts
from twinbench.measure.memory import PROGRAM_PEAK

CLAIMS = load_all()


def rec(step_ms: float, **kw: Any) -> dict[str, Any]:
    return {"status": "ok", "framework": "jax", "strategy": "jit+bf16", "step_ms": step_ms, "platform": "tpu",
            "peak_mem_bytes": 5 * 2**30, "peak_mem_source": PROGRAM_PEAK, "n_params": 124_000_000,
            "device": "TPU v5 lite"} | kw


def twinbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "twinbench.cli", *args], capture_output=True, text=True, timeout=120)


def test_a_tpu_plans_the_seeds_sizes_in_bf16_with_torch_through_torchax():
    setup = setup_for("tpu", quick=True)
    per_claim, specs = plan(select(None), setup)
    assert specs and all(s.framework == "jax" for s in specs)  # no torch process on a TPU: torchax on the chip
    assert {s.preset for s in specs} == {"gpt2-124m", "llama-300m", "bert-base"}
    assert all(s.train.precision == "bf16" for s in specs)
    torch_runs = [s for runs in per_claim.values() for n, s in runs.items() if n.startswith(("torch", "eager"))]
    assert torch_runs and all(s.strategy.base == "torchax" for s in torch_runs)
    gpt = next(s for s in specs if s.preset == "gpt2-124m")
    assert (gpt.train.batch, gpt.train.seq, gpt.strategy.attention_impl) == (8, 1024, "splash")
    bert = next(s for s in specs if s.preset == "bert-base")
    assert (bert.train.batch, bert.train.seq) == (32, 128)
    # the CPU keeps its small sizes, and a GPU runs torch itself
    _, cpu = plan(select(None), setup_for("cpu", quick=True))
    assert {s.preset for s in cpu} == {"tiny", "small", "bert-tiny"}
    _, gpu = plan(select("C7"), setup_for("gpu", quick=True))
    assert {(s.framework, s.strategy.name) for s in gpu} == {("torch", "eager+bf16"), ("torch", "compile+bf16"),
                                                        ("jax", "jit+bf16")}


def test_claims_a_single_accelerator_cannot_measure_say_so_in_one_line_and_plan_nothing():
    setup = setup_for("tpu", quick=False, device="tpu-v5e")
    per_claim, _ = plan(select(None), setup)
    for cid in ("C1", "C6", "C10", "C11", "C12", "C13"):
        assert per_claim[cid] == {}, cid
        assert "\n" not in CLAIMS[cid].unmeasurable(setup)
    line = CLAIMS["C10"].unmeasurable(setup)
    assert "needs 2 devices" in line and "PREDICTION, not a measurement" in line and "--devices 8" in line
    assert CLAIMS["C10"].unmeasurable(setup_for("tpu", quick=True, devices=4)) == ""  # a slice of four runs them
    # --quick on a TPU leaves whole experiments out (never smaller models), each with its line
    quick = setup_for("tpu", quick=True)
    assert "not run by --quick" in CLAIMS["C3"].unmeasurable(quick) and CLAIMS["C3"].unmeasurable(setup) == ""


def test_a_memory_claim_judges_the_compiled_steps_memory_on_a_tpu():
    gib = 2**30
    runs = {"torch": rec(98, strategy="torchax+bf16", peak_mem_bytes=11 * gib),
            "torch_remat": rec(125, strategy="torchax+remat+bf16", peak_mem_bytes=6 * gib),
            "jax": rec(66, peak_mem_bytes=5 * gib), "jax_remat": rec(90, peak_mem_bytes=3 * gib)}
    v = CLAIMS["C20"].judge(Evidence(setup_for("tpu", quick=True), runs))
    assert v.verdict == SUPPORTED and v.numbers["jax_mem_saving"] == 0.4
    assert v.numbers["memory_figure"].startswith("compiled step")
    # a TPU's allocator peak leaves the temporaries out: not the figure a TPU step is judged by
    allocator = {n: r | {"peak_mem_source": "device allocator peak"} for n, r in runs.items()}
    v = CLAIMS["C20"].judge(Evidence(setup_for("tpu", quick=True), allocator))
    assert v.verdict == NOT_MEASURABLE and "compiled step" in v.finding
    assert CLAIMS["C20"].runs(setup_for("tpu", quick=True))["torch_remat"].strategy.name == "torchax+remat+bf16"


def test_a_verdict_refuses_records_from_two_platforms():
    setup = setup_for("tpu", quick=True)
    chosen = [CLAIMS["C22"]]
    per_claim, specs = plan(chosen, setup)
    ok = [rec(66 if s.strategy.base == "jit" else 70, run_id=s.run_id(), strategy=s.strategy.name, preset=s.preset)
          for s in specs]
    (good,) = verdicts(chosen, setup, per_claim, ok, {})
    assert good.verdict != NOT_MEASURABLE and "measured at gpt2-124m (L12 d768) 8 x 1024" in good.finding
    mixed = [r | {"platform": "cpu"} if r["strategy"].startswith("torchax") else r for r in ok]
    (bad,) = verdicts(chosen, setup, per_claim, mixed, {})
    assert bad.verdict == NOT_MEASURABLE and "2 platforms" in bad.finding
    on_host = [r | {"platform": "cpu"} for r in ok]  # all on the host while the plan was the chip's
    (host,) = verdicts(chosen, setup, per_claim, on_host, {})
    assert host.verdict == NOT_MEASURABLE and "did a framework miss the TPU" in host.finding


def test_the_quick_plan_of_a_tpu_v5e_fits_twenty_minutes(tmp_path):
    p = twinbench("claims", "--quick", "--plan", "--device", "tpu-v5e", "--json", str(tmp_path / "plan.json"))
    assert p.returncode == 0, p.stderr
    got = json.loads((tmp_path / "plan.json").read_text())
    assert got["device"] == "tpu-v5e" and 0 < got["predicted_total_s"] <= 1200
    runs = [r for c in got["claims"] for r in c["runs"]]
    assert runs and all(r["platform"] == "tpu" and r["framework"] == "jax" for r in runs)
    assert any(r["strategy"].startswith("torchax") for r in runs)
    assert {r["preset"] for r in runs} >= {"gpt2-124m", "llama-300m", "bert-base"}
    assert all(r["compile_s"] > 0 and r["total_s"] > r["compile_s"] for r in runs)
    assert not (tmp_path / "runs").exists()  # nothing ran


@pytest.mark.parametrize("args, needle", [(["--only", ""], "--only '' names no claim"),
                                          (["--only", " , "], "names no claim"),
                                          (["--resume", "nowhere"], "--resume nowhere: no claims run there"),
                                          (["--device", "tpu-v5e"], "--device names the device to plan for"),
                                          (["--plan", "--device", "tpu-v9"], "unknown device 'tpu-v9'")])
def test_bad_claims_input_exits_2_with_one_line(args, needle, tmp_path):
    p = twinbench("claims", "--quick", *args)
    assert p.returncode == 2, p.stdout
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in p.stderr


def test_an_interrupted_claims_run_names_a_resume_command_that_exists(tmp_path):
    import signal
    import time

    out = tmp_path / "c"
    p = subprocess.Popen([sys.executable, "-m", "twinbench.cli", "claims", "--quick", "--only", "C22", "--repeats", "1",
                          "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None
    line = p.stdout.readline()  # the plan line: the runs start after it
    assert "claims C22" in line, line
    time.sleep(1.0)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert f"continue with `twinbench claims --resume {out}`" in " ".join(err.split())
    assert json.loads((out / "claims-settings.json").read_text())["only"] == "C22"
    q = twinbench("claims", "--resume", str(out), "--plan")  # the command exists: the saved suite, planned
    assert q.returncode == 0, q.stderr
    assert "C22" in q.stdout and "C7" not in q.stdout  # --only C22, from the settings


@pytest.mark.parametrize("kind, chips, device", [("v5litepod-1", 1, "tpu-v5e"), ("v5litepod-8", 8, "tpu-v5e"),
                                                 ("v4-8", 4, "tpu-v4"), ("v6e-4", 4, "tpu-v6e")])
def test_a_tpu_vm_names_its_chip_and_counts_its_chips(kind, chips, device, monkeypatch):
    from twinbench.claims.sizes import device_here, devices_here

    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", kind)
    assert (devices_here("tpu"), device_here("tpu")) == (chips, device)


def test_on_an_accelerator_c22s_runs_keep_a_trace_for_explain_and_the_input_runs_go_last():
    from dataclasses import replace

    setup = replace(setup_for("tpu", quick=True), reason_traces="/results/traces")
    per_claim, specs = plan(select(None), setup)
    traced = {s.run_id() for s in specs if s.output.trace_dir == "/results/traces"}
    assert traced == {s.run_id() for s in per_claim["C22"].values()}  # the shared runs too (C2's jit, C7's ...)
    assert {s.run_id() for s in per_claim["C8"].values()} & traced  # one process each, traced once
    assert [s.train.slow_input > 0 for s in specs][-2:] == [True, True]  # a cut sitting loses C15/C16 first
    _, plain = plan(select(None), setup_for("tpu", quick=True))  # without the CLI's directory: nothing traced
    assert not any(s.output.trace_dir for s in plain)
