"""A modifier is one unit (strategies/modifiers.py): its declaration alone decides where it applies (bases,
frameworks, the multi-device bases, why not), which options it owns, and its time and memory terms, which the
claims budget and the preflight read instead of naming a modifier themselves."""

from __future__ import annotations

from dataclasses import fields

import pytest

from twinbench.byo.family import UserFamily
from twinbench.spec import FIELDS, from_preset
from twinbench.strategies import registry
from twinbench.strategies.modifiers import DECLARED, ModifierOptions, Modifiers


def test_a_cell_a_modifier_refuses_gives_the_modifier_s_own_reason():
    families = [*registry.model_family.FAMILIES.values(), UserFamily()]
    refused = 0
    for fam in families:
        for (fw, base), strategy in registry.REGISTRY.items():
            if strategy.families is not None and fam.name not in strategy.families:
                continue
            for name, m in DECLARED.items():
                why = registry.modifier_reason(m, strategy)
                got = registry.cell_reason(fam, fw, f"{base}+{name}")
                if why is not None:
                    refused += 1
                    assert got == why, (fam.name, fw, base, name)
    assert refused > 100  # the matrix has many such cells: the registry holds no list of its own
    assert "modifiers" not in {f.name for f in fields(registry.Strategy)}


def test_a_modifier_s_options_are_declared_with_it_and_read_as_spec_fields():
    owned = {o for m in DECLARED.values() for o in m.options}
    assert owned == {f.name for f in fields(ModifierOptions)}
    assert owned <= set(FIELDS)  # the spec's flags, validation and identity read them like any field
    spec = from_preset("tiny", {"remat_policy": "dots-saveable"}, framework="jax", strategy="jit+remat")
    assert spec.strategy.remat_policy == "dots-saveable"


def test_the_budget_reads_each_modifier_s_costs():
    from twinbench.claims import budget

    plain = from_preset("small", framework="jax", strategy="jit")
    remat = plain.evolve(strategy="jit+remat")
    costs = DECLARED["remat"].costs
    assert budget.flops_per_step(remat) == pytest.approx(budget.flops_per_step(plain) * costs.flops)
    assert budget.n_params(remat) == pytest.approx(budget.n_params(plain))
    for platform in ("tpu", "gpu"):
        assert budget.compile_s(remat, platform) == pytest.approx(budget.compile_s(plain, platform) * costs.compile)
    bert = from_preset("bert-tiny", framework="jax", strategy="jit+dynamic")
    assert budget.compile_s(bert, "tpu") == pytest.approx(
        budget.compile_s(bert.evolve(strategy="jit"), "tpu") * min(DECLARED["dynamic"].costs.programs, bert.train.steps))
    assert Modifiers.parse(("remat", "bucket")).flops() == costs.flops


def test_the_preflight_suggests_a_memory_saving_modifier_only_where_it_applies():
    from twinbench.measure import memory

    jit = from_preset("small", framework="jax", strategy="jit")
    assert memory.advice(jit, 10, 0, 1, "cpu")[0] == "+remat (jax/jit+remat)"
    assert not any("+remat" in a for a in memory.advice(jit.evolve(strategy="jit+remat"), 10, 0, 1, "cpu"))
    port = jit.evolve(strategy="port")  # the user's port has no remat form: not suggested
    assert not any("+remat" in a for a in memory.advice(port, 10, 0, 1, "cpu"))
