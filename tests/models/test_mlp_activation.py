"""``mlp_activation``: the MLP's activation stored (an optimization barrier) is the same model as fused."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from tests.models.test_attention_impl import _twin_inputs
from twinbench.models.options import ModelOptions


@pytest.mark.parametrize("family", ["gpt", "bert", "llama"])
def test_a_stored_activation_is_the_same_model_and_is_kept_from_fusion(family: str) -> None:
    """Loss and every gradient equal with the activation stored or fused, and the stored program holds one
    barrier a layer (what keeps XLA from recomputing the activation inside the products that read it)."""
    from flax import nnx

    from twinbench.models.bert import model_jax as bert_jax
    from twinbench.models.gpt import model_jax as gpt_jax
    from twinbench.models.llama import model_jax as llama_jax
    from twinbench.models.weights import canonical_to_jax

    module, cls = {"gpt": (gpt_jax, "GPT"), "bert": (bert_jax, "BERT"), "llama": (llama_jax, "Llama")}[family]
    cfg, (x, y), weights = _twin_inputs(family)
    results, barriers = [], []
    for how in ("fused", "stored"):
        model = getattr(module, cls)(cfg, nnx.Rngs(0), ModelOptions(mlp_activation=how))
        canonical_to_jax(model, weights)
        step = nnx.value_and_grad(module.loss_fn)
        jaxpr = jax.make_jaxpr(lambda m, step=step: step(m, x, y))(model)
        barriers.append(str(jaxpr).count("optimization_barrier"))
        loss, grads = nnx.jit(step)(model, x, y)
        results.append((float(loss), jax.tree.leaves(grads)))
    (loss_f, g_f), (loss_s, g_s) = results
    assert barriers[0] == 0 and barriers[1] >= cfg.layers
    assert loss_s == pytest.approx(loss_f, rel=1e-6)
    for a, b in zip(g_s, g_f, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_an_unknown_mlp_activation_is_refused() -> None:
    with pytest.raises(ValueError, match="mlp_activation"):
        ModelOptions(mlp_activation="kept")


def test_the_torch_twin_refuses_a_stored_activation_in_one_line() -> None:
    from twinbench.config import SpecError
    from twinbench.plan import build_specs

    assert build_specs("tiny", "jax", "jit", {"mlp_activation": "stored"})[0].strategy.mlp_activation == "stored"
    with pytest.raises(SpecError, match=r"--mlp-activation stored .* torch twin"):
        build_specs("tiny", "torch", "eager", {"mlp_activation": "stored"})
