"""The doctor on scripts written the way the frameworks' public examples are (tests/doctor/scripts/): the
step is found (and by which signal), the findings and their severities, no self-check failure.

Each script runs as ``twinbench doctor SCRIPT --steps 8 --json FILE`` runs it (doctor_env.run_like_the_command: a
fresh bootstrap process per script, the command's exit code and JSON report), one at a time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from doctor_env import run_like_the_command

SCRIPTS = Path(__file__).resolve().parent / "scripts"
# script -> (step function, how it was found, {finding id: severity} expected exactly, exit code)
EXPECTED: dict[str, tuple[str, str, dict[str, str], int]] = {
    "torch_manual_sgd": ("loss.backward", "loss.backward()", {"torch-host-sync": "info"}, 0),
    "nnx_cached_partial": ("train_step", "a jitted function",
                           {"jax-host-transfer": "info", "nnx-graph-overhead": "info"}, 0),
    "nnx_generator": ("train_step", "a jitted function", {"input-bound": "warning"}, 1),
    "nnx_split_merge": ("train_step", "a jitted function", {}, 0),
    "optax_loop": ("train_step", "a jitted function", {}, 0),
    "torch_compile_dataloader": ("Optimizer.step", "torch Optimizer.step", {}, 0),
    # 10 loss.backward() micro-steps per optimizer step: --steps 8 counts the optimizer's steps
    "torch_grad_accum": ("Optimizer.step", "torch Optimizer.step", {}, 0),
    # Hugging Face's Flax GLUE pattern: a donating pmap step, a collator indexing with a JAX row
    # (pmap compiles the step again at step 2, its inputs then placed as its outputs: a recompile, issue 73;
    # pmap itself is info: its migration gained nothing on a public script)
    "pmap_jax_index": ("train_step", "a pmapped function",
                       {"jax-host-sync": "warning", "jax-pmap-legacy": "info", "jax-host-transfer": "info",
                        "jax-recompile": "info"}, 1),
    "pmap_numpy_index": ("train_step", "a pmapped function",
                         {"jax-pmap-legacy": "info", "jax-host-transfer": "info", "jax-recompile": "info"}, 0),
    # the slow-port patterns of the JAX and Flax performance guides, each with its fixed twin
    "jit_in_loop": ("<lambda>", "a jitted function", {"jax-recompile": "warning", "jax-host-transfer": "info"}, 1),
    "jit_once": ("<lambda>", "a jitted function", {}, 0),
    # 48 layers applied in a Python loop: an unrolled loop too, whose copies compile in ~0.2 s (info)
    "nnx_jit_deep": ("train_step", "a jitted function",
                     {"nnx-graph-overhead": "warning", "jax-unrolled-loop": "info"}, 1),
    "nnx_jit_deep_cached": ("train_step", "a jitted function",
                            {"nnx-graph-overhead": "info", "jax-unrolled-loop": "info"}, 0),
    "grad_accum_unrolled": ("train_step", "a jitted function", {"jax-unrolled-loop": "warning"}, 1),
    "grad_accum_scan": ("train_step", "a jitted function", {}, 0),
    "sgd_tree_map_eager": ("loss_fn", "a jitted function", {"jax-eager-ops": "warning"}, 1),
    "sgd_tree_map_jitted": ("train_step", "a jitted function", {}, 0),
}
MACHINE = ("cpu-oversubscribed", "compile-dominates")  # about the machine or the run's length, not the script
STEPS = 8


@pytest.fixture(scope="module")
def results() -> dict[str, tuple[int, dict[str, Any] | None, str]]:
    return {n: run_like_the_command(SCRIPTS / f"{n}.py", steps=STEPS, JAX_PLATFORMS="cpu") for n in EXPECTED}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_step_found_and_findings(results: dict, name: str) -> None:
    code, report, output = results[name]
    step_fn, signal, findings, exit_code = EXPECTED[name]
    assert report is not None, output
    assert report["self_errors"] == [], output
    assert (report["step_fn"], report["step_signal"]) == (step_fn, signal), output
    assert report["steps"] == STEPS and report["stopped_early"], output  # --steps ended the loop
    got = {f["id"]: f["severity"] for f in report["findings"] if f["id"] not in MACHINE}
    assert all(f["severity"] == "info" for f in report["findings"] if f["id"] == "compile-dominates")
    warned = any(f["id"] == "cpu-oversubscribed" and f["severity"] == "warning" for f in report["findings"])
    # other processes' load measured (info or warning: a JAX script's own threads no longer make it a warning)
    busy = any(f["id"] == "cpu-oversubscribed" for f in report["findings"])
    if busy:  # the doctor says its timings are unreliable then: a severity set by a measured cost may differ
        # (a host read's share of a step grows under the suite's load), and an info whose threshold is a measured
        # share may come (nnx.jit's graph traversal): every expected finding, and no other warning
        assert set(findings) <= set(got), output
        assert {i for i, sev in got.items() if sev == "warning"} <= set(findings), output
    else:
        assert got == findings, output  # compile-dominates (info in a short run) may come or not
    serious = warned or any(s in ("error", "warning") for s in got.values())
    assert code == (1 if serious else 0) if busy else code == exit_code, output  # a busy machine may warn too


def test_costs_are_in_the_evidence(results: dict) -> None:
    sync = next(f for f in results["torch_manual_sgd"][1]["findings"] if f["id"] == "torch-host-sync")
    assert "torch_manual_sgd.py" in sync["evidence"] and "ms per step in these reads" in sync["evidence"]
    assert sync["location"].startswith(str(SCRIPTS / "torch_manual_sgd.py"))  # the reading line, not the step
    transfer = next(f for f in results["nnx_cached_partial"][1]["findings"] if f["id"] == "jax-host-transfer")
    assert "0.5 KiB" in transfer["evidence"] and "GiB/s host-to-device" in transfer["evidence"]
    index = next(f for f in results["pmap_jax_index"][1]["findings"] if f["id"] == "jax-host-sync")
    assert index["location"].startswith(str(SCRIPTS / "pmap_jax_index.py"))  # the script's own line first
    assert "np.asarray(perm)" in index["fix"] and "loop lost" in index["evidence"]
    assert not any(f["id"] == "jax-no-donation" for f in results["pmap_jax_index"][1]["findings"])  # it donates
    recompile = next(f for f in results["jit_in_loop"][1]["findings"] if f["id"] == "jax-recompile")
    assert "new function object" in recompile["title"] and "s of backend compile after step 1" in recompile["evidence"]
    graph = next(f for f in results["nnx_jit_deep"][1]["findings"] if f["id"] == "nnx-graph-overhead")
    assert "ms per step in nnx.jit's own Python" in graph["evidence"] and "cached_partial" in graph["fix"]
    unrolled = next(f for f in results["grad_accum_unrolled"][1]["findings"] if f["id"] == "jax-unrolled-loop")
    assert "64 copies" in unrolled["title"] and "s of it for the copies" in unrolled["evidence"]
    assert "jax.lax.scan" in unrolled["fix"]
    eager = next(f for f in results["sgd_tree_map_eager"][1]["findings"] if f["id"] == "jax-eager-ops")
    assert "sgd_tree_map_eager.py:30" in eager["evidence"]  # the momentum update's lines
    bound = next(f for f in results["nnx_generator"][1]["findings"] if f["id"] == "input-bound")
    # decided by the doctor's A/B (the step on the batch already built), the tokeniser named where it runs
    assert "checked by the doctor" in bound["evidence"] and "Mann-Whitney" in bound["evidence"]
    assert "tokenise() at" in bound["evidence"]
