"""Each fact of explain's closed vocabularies declared once: an op category is one :class:`taxonomy.Category`
from which the rule tables, the compute and memory-bound lists and the categories' listing derive (a table naming
an undeclared one fails when taxonomy is imported), and an evidence check is one :class:`causes.Gate` (its id, its
words in a refusal, its facts)."""

from __future__ import annotations

import pytest

from twinbench.explain import causes, ops, taxonomy, tpu_trace
from twinbench.explain.side import GateFailure


def test_a_table_naming_an_undeclared_category_fails() -> None:
    taxonomy.declared("a table", ["matmul", "data movement"])
    with pytest.raises(ValueError, match=r"a table names categories never declared.*'matmull'"):
        taxonomy.declared("a table", ["matmull"])


def test_every_rule_table_names_declared_categories_only() -> None:
    """What the import-time checks cover, asked of every table again (a table added without its check is caught
    by the classifiers' answers being declared)."""
    samples = ["aten::addmm", "aten::gelu", "aten::_foreach_mul_", "aten::nonsense_op", "c10d::allreduce_"]
    got = {taxonomy.torch_op(n) for n in samples} | {taxonomy.torch_any("AddmmBackward0")}
    got |= {taxonomy.hlo_op(o) for o in ("dot", "add", "reduce", "copy", "all-reduce", "fusion")}
    got |= {taxonomy.kernel(k) or taxonomy.generic_kernel(k) for k in ("sm90_xmma_gemm", "ncclDevKernel", "memcpy")}
    got |= {taxonomy.custom_call("__cublas$lt$matmul"), taxonomy.jax_op_name("jit(f)/jvp(x)/dot_general")}
    got |= set(tpu_trace._BY_HLO_CATEGORY.values()) | set(taxonomy.DOMINANCE)
    assert got <= set(taxonomy.REGISTRY), got - set(taxonomy.REGISTRY)


def test_the_lists_derive_from_the_declarations() -> None:
    assert ops.COMPUTE == taxonomy.COMPUTE == ("matmul", "attention")
    assert set(causes.MEMORY_BOUND) == {"element-wise", "normalization", "reductions", "data movement"}
    assert "compilation" in taxonomy.CATEGORIES and "idle" not in taxonomy.CATEGORIES
    assert all(c.bound and c.holds for c in taxonomy.DECLARED)


def test_each_gate_is_one_declaration() -> None:
    """A refusal says each failed gate in its own words, taken from its declaration, in the declared order."""
    checks = [g.check for g in causes.GATES]
    assert len(set(checks)) == len(checks) == 4 and "quiet" not in checks
    for g in causes.GATES:
        said = causes.refusal([GateFailure(check=g.check, fact="F")])
        assert said == f"no row is named as a cause; check failed: {g.words}. F"
    every = causes.refusal([GateFailure(check=c, fact=c) for c in checks])
    assert every.index(causes.GATES[0].words) < every.index(causes.GATES[-1].words)
