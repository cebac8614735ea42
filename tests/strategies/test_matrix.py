"""`twinbench strategies --matrix`: every (family, framework, strategy, modifier) cell is ok and parity-tested,
or a one-line reason it cannot exist."""

from __future__ import annotations

import parity_cells
import pytest
from typer.testing import CliRunner

from twinbench.cli import app
from twinbench.models.bert import FAMILY as BERT
from twinbench.models.gpt import FAMILY as GPT
from twinbench.spec import SpecError, from_preset, validate
from twinbench.strategies import registry
from twinbench.strategies.modifiers import DATA_MODIFIERS


def test_every_ok_cell_is_covered_by_a_parity_test():
    covered = parity_cells.covered()
    missing = []
    for c in registry.matrix():
        if c.reason is not None:
            continue
        key = (c.family, c.framework, c.strategy, c.modifier)
        ok = key in covered or parity_cells.compiled_elsewhere(*key, covered)
        if c.modifier in DATA_MODIFIERS:  # data-side: the base's step, and the modifier on some base
            base = (c.family, c.framework, c.strategy, "")
            ok = ok or ((base in covered or parity_cells.compiled_elsewhere(*base, covered))
                        and (c.family, c.framework, c.modifier) in parity_cells.DATA_COVERED)
        if not ok:
            missing.append(key)
    assert not missing, f"ok cells no parity test covers: {missing}"


def test_reasons_are_one_line_and_every_family_runs_every_base():
    cells = registry.matrix()
    assert {c.family for c in cells} == set(parity_cells.FAMILIES)
    for c in cells:
        assert c.reason is None or ("\n" not in c.reason and 0 < len(c.reason) < 140), c
    plain = {(c.family, c.framework, c.strategy) for c in cells if not c.modifier and c.reason is None}
    assert plain == {(f, fw, s) for f in parity_cells.FAMILIES for (fw, s), st in registry.REGISTRY.items()
                     if st.families is None or f in st.families}


def test_a_base_of_some_families_only_says_so(monkeypatch):
    monkeypatch.setitem(registry.REGISTRY, ("jax", "only-user"),
                        registry.Strategy("jax", "only-user", "test", "x:y", default=False, families=("user",)))
    assert registry.cell_reason(BERT, "jax", "only-user") == "only-user builds the user family only"


@pytest.mark.parametrize(("family", "framework", "strategy", "reason"), [
    (GPT, "jax", "jit+bucket", "pads variable-length text"),
    (BERT, "jax", "scan-steps+dynamic", "needs one shape"),
    (BERT, "torch", "ddp+prefetch", "place their own slices"),
    (GPT, "torch", "eager+nodonate", "jax only"),
    (GPT, "jax", "naive+nodonate", "applies to jit, scan-steps, scan-layers, torchax, port only"),
])
def test_cells_that_cannot_exist_say_why(family, framework, strategy, reason):
    assert reason in (registry.cell_reason(family, framework, strategy) or "")


def test_a_family_without_an_option_gets_its_reason():
    from dataclasses import replace

    plain = replace(GPT, name="user", supports=frozenset({"bf16", "jax-twin"}),
                    unsupported={"multi-device": "the user's model was not written for several devices"})
    assert registry.cell_reason(plain, "jax", "mesh-dp") == "the user's model was not written for several devices"
    assert registry.cell_reason(plain, "torch", "eager+remat") == "the user family does not support remat"
    assert registry.cell_reason(plain, "torch", "eager+bf16") is None


def test_check_devices_refuses_a_cell_that_cannot_exist_in_one_line():
    spec = validate(from_preset("llama-tiny", framework="jax", strategy="jit+fused-qkv"))
    with pytest.raises(SpecError, match=r"^--strategies: jax:jit\+fused-qkv with the llama family: llama's grouped"):
        registry.check_devices(spec)
    # a modifier that skips the multi-device bases says so where the name is read (its own declaration's reason)
    with pytest.raises(SpecError, match=r"^--strategies: modifier 'prefetch' does not apply to torch 'ddp' \(\+prefetch "
                       r"puts whole batches on one device"):
        registry.get("torch", "ddp+prefetch")


def test_strategies_matrix_prints_every_cell():
    res = CliRunner().invoke(app, ["strategies", "--matrix"])
    assert res.exit_code == 0, res.output
    n_ok = sum(c.reason is None for c in registry.matrix())
    assert f"{n_ok} ok" in res.output and "bert" in res.output and "mesh-fsdp" in res.output
