"""A run's parameter count is known from its spec: a record of a run that never started (stopped by ``--timeout``
before its worker said anything) carries the ``n_params`` a real run of the same spec records."""

from __future__ import annotations

import pytest

from twinbench import runner
from twinbench.models.family import FAMILIES, n_params_of
from twinbench.plan import run_spec

PRESETS = [(fam.name, preset) for fam in FAMILIES.values() for preset in fam.presets]


@pytest.mark.parametrize(("family", "preset"), PRESETS)
def test_the_count_from_the_shape_is_the_built_models(family, preset):
    """Against the torch twin built on the meta device (no memory, no init), every preset of every family."""
    import torch

    from twinbench.models.options import ModelOptions

    fam = FAMILIES[family]
    cfg = fam.presets[preset][0]
    with torch.device("meta"):
        model = fam.torch_model(cfg, ModelOptions())
    assert n_params_of(cfg) == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("preset", ["tiny", "bert-tiny", "llama-tiny"])
def test_the_count_from_the_shape_is_what_a_run_records(preset):
    """The worker records ``fam.n_params`` of the weights it starts from (worker.build): the same number."""
    spec = run_spec(preset, "torch", "eager")
    fam = FAMILIES[spec.model.family]
    assert n_params_of(spec.model) == int(fam.n_params(fam.init_weights(spec.model, spec.train.seed)))


def test_a_run_stopped_by_its_timeout_before_it_started_records_its_count(monkeypatch):
    spec = run_spec("llama-tiny", "jax", "jit")
    monkeypatch.setattr(runner, "worker_command", lambda spec, args: ["sleep", "30"])  # a worker that never speaks
    record = runner._run_one(spec, 0.2, {})
    assert record.status == "failed" and "timed out" in record.error
    fam = FAMILIES["llama"]
    assert record.run.n_params == int(fam.n_params(fam.init_weights(spec.model, spec.train.seed))) > 0


def test_a_model_only_its_run_knows_has_no_count():
    from dataclasses import replace

    cfg = FAMILIES["gpt"].presets["tiny"][0]
    assert n_params_of(replace(cfg, family="user")) is None
    assert n_params_of(replace(cfg, vocab=10**30)) is None  # no array has that many elements
