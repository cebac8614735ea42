"""The verdicts a claims run writes (claims.json) are what ``report`` reads: a timed claim's numbers carry the
range of its repeats (``<name>_range: [min, max]``), which the report's typed reader takes."""

from __future__ import annotations

import json

import msgspec

from twinbench.claims.core import Setup, load_all
from twinbench.claims.suite import verdicts
from twinbench.report import page
from twinbench.spec import RunSpec


def test_the_verdicts_of_repeated_runs_are_reported(tmp_path):
    claims = load_all()
    c7 = claims["C7"]
    setup = Setup(quick=True, gpt="tiny")
    runs: dict[str, RunSpec] = c7.runs(setup)
    reps = []
    for k, jit_ms in enumerate((10.0, 9.0, 9.6)):
        rep = []
        for name, spec in runs.items():
            step = jit_ms if name == "jit" else 12.0 + (name == "compile")
            rep.append({"status": "ok", "framework": spec.framework, "strategy": spec.strategy.name,
                        "run_id": spec.run_id() if k == 0 else f"{spec.run_id()}-r{k}", "config_id": spec.run_id(),
                        "repeat": k, "step_ms": step, "platform": "cpu", "n_params": 100_000})
        reps.append(rep)
    (out,) = verdicts([c7], setup, {"C7": runs}, reps, {})
    assert out.numbers["jax_advantage_vs_best_torch_range"] == [0.2, 0.333]
    (tmp_path / "claims.json").write_bytes(msgspec.json.encode([out]))
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in reps[0]))
    loaded = page.load(tmp_path)
    assert loaded.claims[0].numbers["jax_advantage_vs_best_torch_range"] == [0.2, 0.333]
