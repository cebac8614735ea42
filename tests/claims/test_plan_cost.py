"""``claims --plan`` on a CPU counts the compiles of its runs and the load measured now: a plan made on a busy
machine says how long the runs take at that load, not only on an idle one (claims/suite.py, claims/budget.py)."""

from __future__ import annotations

import pytest

from twinbench.claims import suite
from twinbench.claims.budget import plan
from twinbench.claims.core import select, setup_for
from twinbench.load_meter import Reading


def test_the_load_stretches_a_cpu_plan_and_a_quiet_machine_does_not():
    assert suite.load_factor(Reading(load_avg_1m=None, cpu_count=2, load_avg_1m_external=4.5))[0] == pytest.approx(3.25)
    assert suite.load_factor(Reading(load_avg_1m=None, cpu_count=2, load_avg_1m_external=0.05)) == (1.0, "")
    assert suite.load_factor(Reading(load_avg_1m=None, cpu_count=None, load_avg_1m_external=None)) == (1.0, "")


def test_a_cpu_plan_counts_the_compiles_and_the_load_now(monkeypatch):
    from twinbench.load_meter import LoadMeter

    monkeypatch.setattr(LoadMeter, "reading", lambda self: Reading(load_avg_1m=4.5, load_avg_1m_external=4.5,
                                                                   cpu_count=2))
    chosen = select("C1")
    setup = setup_for("cpu", True)
    per_claim, specs = suite.plan(chosen, setup)
    rounds = suite.schedule(chosen, per_claim, specs, setup.repeats)
    p = plan(chosen, setup, per_claim, rounds, None)
    runs = {r.name: r for r in p.claims[0].runs}
    assert runs["jax_naive"].compile_s > runs["torch"].compile_s == 0  # a compile per new length
    assert p.predicted_compile_s == pytest.approx(sum(r.compile_s * r.runs for r in runs.values()))
    assert p.predicted_total_s_at_load == pytest.approx(p.predicted_total_s * 3.25, rel=0.01)
    assert p.load and "4.50 from other processes on 2 core(s)" in p.load


def test_claims_threads_reaches_every_run(monkeypatch, tmp_path):
    """`claims --threads N`, the flag a busy machine's caveat names, sets every run's threads."""
    from typer.testing import CliRunner

    from twinbench.cli import app

    seen = []
    real = suite.plan
    monkeypatch.setattr(suite, "plan", lambda chosen, setup: seen.append(real(chosen, setup)) or seen[-1])
    r = CliRunner().invoke(app, ["claims", "--only", "C1", "--quick", "--threads", "1", "--plan"])
    assert r.exit_code == 0, r.output
    (_, specs), = seen
    assert specs and {s.host.threads for s in specs} == {1}
    assert "error" in CliRunner().invoke(app, ["claims", "--only", "C1", "--threads", "-1", "--plan"]).output


def test_a_device_planted_in_a_claims_folder_is_not_taken_nor_blamed_on_device(tmp_path):
    """The device a plan is for comes from the command line: a claims run writes none into its settings, and a
    folder's (planted) one is neither used nor reported as a --device the user never gave."""
    import json

    from typer.testing import CliRunner

    from twinbench.cli import app

    d = tmp_path / "r"
    d.mkdir()
    (d / "claims-settings.json").write_text(json.dumps({
        "quick": True, "only": "C1", "preset": None, "plan_steps": 1000, "repeats": None, "model": None,
        "jax_model": None, "device": "nonesuch", "threads": None}))
    r = CliRunner().invoke(app, ["claims", "--resume", str(d), "--plan"])
    assert r.exit_code == 0 and "nonesuch" not in r.output and "--device" not in r.output, r.output
