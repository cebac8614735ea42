"""The trainer contract: protocols checked with ``isinstance`` by the commands that need them, modifiers parsed
once, and the user's model on the twins' trainers (no user-only trainer class)."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
from strategy_helpers import make_spec

from twinbench.byo.family import UserFamily
from twinbench.strategies import registry
from twinbench.strategies.base import Explainable, HloExplainable, JaxStepTrainer, TorchModuleTrainer, lacks
from twinbench.strategies.modifiers import Modifiers

SRC = Path(__file__).resolve().parents[2] / "src" / "twinbench"


def test_modifiers_are_parsed_once_into_flags():
    m = Modifiers.parse(("bf16", "remat", "replicate-batch", "bucket"))
    assert (m.bf16, m.remat, m.replicate_batch, m.length) == (True, True, True, "bucket")
    assert not (m.nodonate or m.optc or m.prefetch or m.nosync or m.symbolic)
    assert Modifiers.parse(()) == Modifiers() and Modifiers().length is None
    assert make_spec("jax", "jit+nodonate").strategy.mods.nodonate and not make_spec("jax", "jit").strategy.mods.nodonate


def test_every_modifier_is_declared_once_and_fits_the_family_options():
    from twinbench.models.family import OPTIONS
    from twinbench.strategies import registry
    from twinbench.strategies.modifiers import DECLARED, LENGTH_POLICIES

    assert registry.MODIFIERS is DECLARED
    flags = {f.name.replace("_", "-") for f in fields(Modifiers)} - {"length"}
    assert set(DECLARED) == flags | set(LENGTH_POLICIES)  # a flag per modifier, a length policy per padding
    assert [n for n, m in DECLARED.items() if m.family_option and n not in OPTIONS] == []
    assert Modifiers.parse([n for n in DECLARED if n not in LENGTH_POLICIES]) == Modifiers(
        **{f.name: True for f in fields(Modifiers) if f.name != "length"})


def test_no_module_tests_modifiers_as_strings():
    pattern = re.compile(r"""["'][a-z-]+["']\s+(not\s+)?in\s+[\w.]*spec(\.strategy)?\.modifiers""")
    hits = [f"{p.relative_to(SRC)}:{i}" for p in SRC.rglob("*.py")
            for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert hits == []


def test_the_jax_step_trainer_is_what_memory_and_explain_need():
    from twinbench.measure import memory
    from twinbench.models import family
    from twinbench.strategies.jax_jit import build
    from twinbench.strategies.jax_naive import build as build_naive

    spec = make_spec("jax", "jit")
    weights = family.get(spec).init_weights(spec.model, spec.train.seed)
    jit = build(spec, weights)
    assert isinstance(jit, JaxStepTrainer) and isinstance(jit, Explainable) and isinstance(jit, HloExplainable)
    assert lacks(jit, JaxStepTrainer, "memory breakdown") is None
    naive = build_naive(make_spec("jax", "naive"), weights)
    why = lacks(naive, JaxStepTrainer, "memory breakdown")
    assert why is not None and "\n" not in why and "JaxStepTrainer" in why and "NaiveTrainer" in why
    x = np.zeros((spec.train.batch, spec.train.seq), np.int32)
    out = memory.breakdown(make_spec("jax", "naive"), naive, (x, x), 0, "none", 0, "cpu", None)
    assert out == why  # refused with the reason (the record's memory_breakdown error), not silently left out


def test_the_torch_module_trainer_and_a_stranger():
    from twinbench.models import family
    from twinbench.strategies.torch_eager import build

    spec = make_spec("torch", "eager")
    t = build(spec, family.get(spec).init_weights(spec.model, spec.train.seed))
    assert isinstance(t, TorchModuleTrainer) and isinstance(t, Explainable) and not isinstance(t, HloExplainable)

    class Stranger:
        def step(self, x, y): ...

    assert "Explainable" in lacks(Stranger(), Explainable, "explain torch:x")


def test_a_user_model_runs_the_twins_builders_and_is_refused_what_it_cannot_run():
    user = UserFamily()
    twin_spec = make_spec("torch", "eager")
    for name in ("eager", "compile", "compile-regional", "ddp", "fsdp", "eager+bf16", "eager+remat",
                 "compile+optc"):
        assert registry.cell_reason(user, "torch", name) is None, name
    for name in ("torchax", "port", "torchax+nodonate", "torchax-mesh-fsdp"):
        assert registry.cell_reason(user, "jax", name) is None, name
    assert "no NNX twin" in registry.cell_reason(user, "jax", "jit")
    assert "no NNX twin" in registry.cell_reason(user, "jax", "mesh-dp")
    for name in ("torchax+bf16", "torchax+remat"):  # torchax applies them to any torch module (torchax_step.py)
        assert registry.cell_reason(user, "jax", name) is None, name
    assert registry.cell_reason(user, "jax", "port+bf16") == "the user's port runs fp32 only: it has no bf16 form"
    assert "own batches" in registry.cell_reason(user, "torch", "eager+prefetch")
    # one builder per strategy, whoever's model: the twins' torch trainers build a user's module too
    assert registry.builder(twin_spec) is registry.get("torch", "eager").load()
    assert not (SRC / "strategies" / "torch_user.py").exists()
    assert "USER_BUILDERS" not in vars(registry)


@pytest.mark.parametrize("name", ["jit", "naive", "scan-layers"])
def test_twin_only_jax_bases_refuse_a_user_model_in_one_line(name):
    from twinbench.byo.plan import select
    from twinbench.spec import SpecError

    with pytest.raises(SpecError, match=f"jax:{name} with a user model .*no NNX twin"):
        select(["jax"], [name], port=False)
