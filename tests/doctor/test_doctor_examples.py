"""The doctor on every example script: each bad one gets its finding id, the clean ones nothing serious.

Each example runs as the command runs it (doctor_env.run_like_the_command: a fresh bootstrap process per script,
the command's exit code and JSON report), one at a time; the diagnosis runs in the test process, so SciPy (the
input check's test) is imported once, not once per script (tests/doctor/test_doctor_cli.py runs the command).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from doctor_env import run_like_the_command
from doctor_fixes import apply_decorators, script_ran

from twinbench.doctor.findings import KINDS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "doctor"
# example -> the finding id it must get: each finding names its example where it is declared (findings.base.finding)
BAD = {k.example: k.id for k in KINDS if k.example}
CLEAN = ("clean_jax", "clean_nnx", "clean_torch")
pytestmark = pytest.mark.slow  # 17 scripts, each in a fresh process under the doctor


@pytest.fixture(scope="module")
def results() -> dict[str, tuple[int, dict[str, Any] | None, str]]:
    """Run the doctor on every example once."""
    return {n: run_like_the_command(EXAMPLES / f"{n}.py") for n in [*BAD, *CLEAN]}


def test_every_finding_id_has_a_bad_example_or_says_where_it_is_tested() -> None:
    assert all(bool(k.example) != bool(k.tested_by) for k in KINDS)  # one or the other, as declared
    assert all((EXAMPLES / f"{n}.py").exists() for n in [*BAD, *CLEAN])


@pytest.mark.parametrize("name", list(BAD))
def test_bad_example_gets_its_finding(results: dict, name: str) -> None:
    code, report, output = results[name]
    assert report is not None, output
    assert report["self_errors"] == [], output  # every instrument and check of the doctor worked
    ids = {f["id"] for f in report["findings"]}
    assert BAD[name] in ids, f"{name}: expected {BAD[name]}, got {ids}\n{output}"
    finding = next(f for f in report["findings"] if f["id"] == BAD[name])
    assert finding["severity"] in ("error", "warning", "info")
    assert finding["title"] and "\n" not in finding["title"]
    assert finding["evidence"] and finding["fix"]
    assert any(ch.isdigit() for ch in finding["evidence"])  # evidence is numbers, not prose only
    if finding["severity"] in ("error", "warning"):
        assert code == 1, output


@pytest.mark.parametrize("name", CLEAN)
def test_clean_example_gets_nothing_serious(results: dict, name: str) -> None:
    code, report, output = results[name]
    assert report is not None, output
    assert report["self_errors"] == [], output
    serious = [f for f in report["findings"] if f["severity"] in ("error", "warning")]
    busy = [f for f in serious if f["id"] == "cpu-oversubscribed"]  # other processes' load: not the script's
    assert serious == busy, f"{name}: {serious}"
    assert code == (1 if busy else 0), output
    assert report["steps"] == 30 and report["step_ms"] > 0  # the step was found in every framework


def test_json_document_shape(results: dict) -> None:
    _, report, _ = results["jax_host_sync"]
    assert {"findings", "steps", "step_ms", "compile_s", "wall_s"} <= set(report)
    assert set(report["findings"][0]) >= {"id", "severity", "title", "evidence", "fix"}
    assert report["steps"] == 8 and report["step_fn"] == "train_step"


def test_script_error_shows_the_traceback_tail(results: dict) -> None:
    _, report, _ = results["script_error"]
    err = next(f for f in report["findings"] if f["id"] == "script-error")
    assert "FileNotFoundError" in err["title"]
    assert "load_config" in err["evidence"] and "missing.yaml" in err["evidence"]
    assert "twinbench/doctor" not in err["evidence"]  # the bootstrap's own frames are cut
    assert "own folder" in err["fix"]  # what it means, where known


def test_recompile_says_why(results: dict) -> None:
    _, report, _ = results["jax_recompile"]
    f = next(f for f in report["findings"] if f["id"] == "jax-recompile")
    assert f["severity"] == "warning" and "shape" in f["title"] and "f32[" in f["evidence"]


def test_torch_graph_break_gives_dynamo_reason(results: dict) -> None:
    _, report, _ = results["torch_graph_break"]
    f = next(f for f in report["findings"] if f["id"] == "torch-graph-break")
    assert "Data-dependent branching" in f["evidence"] and "torch_graph_break.py:14" in f["evidence"]


def test_the_printed_donation_runs_and_leaves_nothing_undonated(results: dict, tmp_path: Path) -> None:
    """jax-no-donation's decorator (the carried params and optimizer state donated, not the batch), put in place of
    the example's jit decorator, runs to its end under the doctor, which no longer finds it."""
    from twinbench.doctor import run_doctor

    _, report, output = results["jax_no_donation"]
    assert report is not None, output
    fix = next(f for f in report["findings"] if f["id"] == "jax-no-donation")["fix"]
    assert "donate_argnums=(0, 1)" in fix, fix
    line = int(report["observations"]["info"]["step_def"].split(":")[-2])
    script = EXAMPLES / "jax_no_donation.py"
    after = run_doctor(apply_decorators(fix, script, tmp_path / script.name, at=[line]), [], timeout=300)
    script_ran(after)
    assert "jax-no-donation" not in {f.id for f in after.findings}
    assert not after.observations.info.input_check_error, after.observations.info
