"""The doctor's fixes run as printed: the decorator a finding prints is put in a copy of the script it read, at the
line it names, and the copy runs to its end under the doctor (no error, no timeout), which no longer finds what it
fixed. Scripts shaped like the public examples: a Flax linen TrainState loop with ``train_epoch(state, ds,
batch_size, rng)`` and its steps not jitted (one of them takes the number of classes, which sets an array's shape),
a linen TrainState step whose batch is a dict of NumPy arrays, an NNX loop with a pure-Python tokenizer, and a
PyTorch loop over a map-style Dataset whose ``__getitem__`` reads its tensors item by item. Each script runs under
the doctor in a fresh process. The doctor's own bad example of a step without donation is fixed the same way in
test_doctor_examples.py, from that file's run of it under the doctor.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from doctor_fixes import apply_decorators, finding, script_ran

from twinbench.doctor import run_doctor
from twinbench.doctor.findings import compile_dominates, donation, input, jax_eager_ops
from twinbench.doctor.observations import Split
from twinbench.doctor.report import summary_line

SCRIPTS = Path(__file__).resolve().parent / "scripts"


@pytest.mark.slow
def test_the_eager_steps_jit_runs_as_printed(tmp_path: Path) -> None:
    """jax-eager-ops names the functions to jit and the argument that must be static (num_classes sets the
    one-hot's shape: a plain @jax.jit of apply_model fails); compile-dominates points to it, not to scans."""
    script = SCRIPTS / "linen_mnist_eager.py"
    res = run_doctor(script, [], timeout=300)
    eager = finding(res, "jax-eager-ops")
    assert "static_argnames=('num_classes',)" in eager.fix and "def apply_model(" in eager.fix
    fixed = apply_decorators(eager.fix, script, tmp_path / script.name)
    after = run_doctor(fixed, [], timeout=300)
    script_ran(after)
    assert "jax-eager-ops" not in {f.id for f in after.findings}, [f.evidence for f in after.findings]
    compiles = next((f for f in res.findings if f.id == "compile-dominates"), None)
    if compiles is not None:  # above its threshold on this machine: its fix is the eager step's
        assert "jax-eager-ops" in compiles.fix and "scan" not in compiles.fix


TOKENIZER = SCRIPTS / "nnx_tokenizer_input.py"


@pytest.fixture(scope="module")
def tokenizer_runs() -> dict[str, object]:
    """The NNX loop whose batches come from a pure-Python tokenizer under the doctor, as written and with its
    batches built before the loop (input-bound's fix), 40 steps each: the prebuilt run is also the donation
    test's run of that script."""
    return {mode: run_doctor(TOKENIZER, ["40", *extra], steps=40, timeout=240)
            for mode, extra in (("written", []), ("prebuilt", ["prebuilt"]))}


def _parts_ms(split: Split) -> float:
    return split.step_ms + split.call_tail_ms + split.host_ms + split.descheduled_ms + (split.idle_ms or 0.0)


@pytest.mark.slow
def test_tokenizer_in_the_loop_is_input_bound_and_prebuilt_batches_are_not(tokenizer_runs: dict) -> None:
    """The input cost of a JAX loop on a CPU, where the input work and the step share the cores: found by the
    doctor's own A/B (the step called back to back on a batch already built, between the loop's steps), not by
    idle time; gone with the batches built before the loop; every iteration's time in the split."""
    written, prebuilt = tokenizer_runs["written"], tokenizer_runs["prebuilt"]
    ab = written.observations.input_check
    assert ab.replays >= input.INPUT_CHECK_MIN, ab
    found = next((f for f in written.findings if f.id == "input-bound"), None)
    assert found is not None, (ab.cpu, ab.wall, written.observations.split)
    assert "checked by the doctor" in found.evidence and "tokenize()" in found.evidence  # the A/B, and where
    assert "num_workers=" not in found.fix or "cores were free" in found.fix  # workers only on free cores
    assert "input-bound" not in {f.id for f in prebuilt.findings}, prebuilt.observations.input_check.cpu
    for res in (written, prebuilt):  # every iteration's time is in a row of the split
        split = res.observations.split
        assert _parts_ms(split) == pytest.approx(split.iter_ms, rel=0.10), split


@pytest.mark.slow
@pytest.mark.parametrize("script, args, donated", [
    (SCRIPTS / "linen_trainstate_step.py", [], "donate_argnums=(0,)"),
    (TOKENIZER, ["24", "prebuilt"], "donate_argnames=('model', 'optimizer')"),
])
def test_donation_of_the_carried_arguments_runs_as_printed(tmp_path: Path, script: Path, args: list[str],
                                                           donated: str, request: pytest.FixtureRequest) -> None:
    """Only the arguments carried from one step to the next are donated (not the batch), and the printed
    decorator, in place of the script's jit decorator, runs and leaves nothing undonated (for the NNX step, with
    the input check's calls of a donating step on copies of its state; its run before the fix is the input-bound
    test's prebuilt one, its fixed copy runs 24 steps). The doctor's own example without donation is fixed the
    same way in test_doctor_examples.py, from that file's run of it."""
    shared = script == TOKENIZER
    res = request.getfixturevalue("tokenizer_runs")["prebuilt"] if shared else run_doctor(script, args, timeout=300)
    fix = finding(res, "jax-no-donation").fix
    assert donated in fix, fix
    line = int(res.observations.info.step_def.split(":")[-2])
    fixed = apply_decorators(fix, script, tmp_path / script.name, at=[line])
    after = run_doctor(fixed, args, timeout=300)
    script_ran(after)
    assert "jax-no-donation" not in {f.id for f in after.findings}
    assert not after.observations.info.input_check_error, after.observations.info


@pytest.mark.slow
def test_reads_in_a_datasets_getitem_are_named_as_the_datasets() -> None:
    """The dataset's own int(self.targets[index]) per item is not the loop's host sync: said where it is, info."""
    res = run_doctor(SCRIPTS / "torch_map_dataset.py", [], timeout=300)
    sync = finding(res, "torch-host-sync")
    assert sync.severity == "info" and "DataLoader" in sync.title, sync
    assert "__getitem__" in sync.location and "Nothing to change in the loop" in sync.fix


def test_the_static_argument_of_an_eager_step_is_found_from_its_values() -> None:
    from twinbench.doctor.instruments_jax.eager_step import needs_static

    jax = pytest.importorskip("jax")
    import numpy as np

    assert needs_static(jax, 10) == "an int" and needs_static(jax, (32, 784)) == "a shape"
    assert needs_static(jax, {"image": np.zeros((2, 3))}) is None and needs_static(jax, jax.numpy.ones(3)) is None
    assert needs_static(jax, print) == "a function" and needs_static(jax, 0.1) is None


def test_compile_dominates_on_an_eager_step_points_to_jitting_it() -> None:
    notes = [{"fn": f"jit({op})", "s": 0.1} for op in ("add", "mul", "dot_general", "reshape") * 8]
    obs = {"compile_s": 10.0, "wall_s": 12.0, "frameworks": ["jax"], "steady_steps": 10, "candidates": {"step": 10},
           "per_step": {"eager_ops": 150.0}, "notes": {"compile": notes}, "steps": 12}
    f = compile_dominates(obs)
    assert f is not None and "jax-eager-ops" in f.fix and "scan" not in f.fix and "32 backend compiles" in f.evidence
    obs["per_step"]["eager_ops"] = 0.0  # a jitted step: the usual advice
    assert "scan" in compile_dominates(obs).fix


def test_workers_are_suggested_only_where_cores_are_free() -> None:
    busy = {"machine": {"cores": 2, "others_cores": 1.2, "own_cores": 0.8}}
    assert "num_workers=" not in input.input_fix(busy) and "before the loop" in input.input_fix(busy)
    idle = {"machine": {"cores": 16, "others_cores": 0.5, "own_cores": 1.5}}
    assert "num_workers=4" in input.input_fix(idle)


def test_the_donation_keeps_the_jits_options_and_names_only_carried_arguments() -> None:
    obs = {"step_fn": "train_step", "info": {"carried_args": ["0:state"], "jit_options": {"static_argnums": (2,)},
                                             "step_def": "jit:/s.py:12:train_step"}}
    fix = donation.donation_fix(obs)
    assert "@functools.partial(jax.jit, static_argnums=(2,), donate_argnums=(0,))" in fix and "state" in fix


def test_the_headline_gives_one_step_time_and_names_every_other_figure() -> None:
    import re

    from twinbench.doctor.report import pace_details

    # examples/doctor/clean_torch.py on a busy machine (issue 76): steps of 1 to 70 ms, the mean 17.27 ms (what the
    # script's own clock shows a step) against a median of 1.60 ms
    obs = {"frameworks": ["torch"], "step_fn": "Optimizer.step", "step_signal": "torch Optimizer.step", "steps": 30,
           "step_kind": "torch-optimizer", "step_ms": 1.60, "iter_ms": 17.27, "split": {"step_ms": 15.1},
           "compile_s": 0.0, "wall_s": 3.0}
    line = summary_line(obs)
    assert re.findall(r"[\d.]+ ms", line) == ["17.27 ms"] and "17.27 ms a step" in line  # one step time
    details = pace_details(obs)
    assert "the median step is 1.60 ms" in details and "forward, backward and update 15.10 ms" in details
    steady = obs | {"step_ms": 17.0}  # the median within 10% of the mean: not said
    assert "median" not in pace_details(steady)
    jitted = obs | {"step_kind": "jit", "step_fn": "train_step", "split": {"step_ms": 3.2}}
    assert "train_step from its call to its results ready 3.20 ms" in pace_details(jitted)
    nested = obs | {"iter_ms": 65.78, "step_ms": 66.0, "split": {"step_ms": 67.92}}  # central steps above the mean
    assert "67.92 ms over the central steps, about all of it" in pace_details(nested)
    assert "67.92 ms of it" not in pace_details(nested)  # a part is never said to be larger than its whole


def test_a_skipped_check_is_said_in_the_text_and_the_json() -> None:
    import io

    from rich.console import Console

    from twinbench.doctor.report import render, to_json

    why = "a pmapped step is not traced again from its shapes"
    obs = {"frameworks": ["jax"], "step_fn": "train_step", "steps": 6, "steady_steps": 4, "iter_ms": 2.0,
           "info": {"skipped": {"the step's program (unrolled layers, attention kernel)": why}}}
    out = io.StringIO()
    render(Console(file=out, width=200), [], obs, "s.py")
    assert f"not checked: the step's program (unrolled layers, attention kernel): {why}" in out.getvalue()
    assert to_json([], obs)["not_checked"] == obs["info"]["skipped"]


def test_an_eager_fix_names_its_function_and_decorator() -> None:
    step = {"functions": [{"name": "apply_model", "file": "/s.py", "line": 27, "params": ["state", "n"],
                           "static": {"n": "an int"}, "nnx": False}], "loop": False, "at": "/s.py:30"}
    obs = {"steady_steps": 10, "per_step": {"eager_ops": 100.0}, "info": {"eager_step": step}}
    fix = jax_eager_ops(obs).fix
    assert "/s.py:27\n  @functools.partial(jax.jit, static_argnames=('n',))\n  def apply_model(state, n):" in fix
