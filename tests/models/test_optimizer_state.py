"""``optimizer_state``: AdamW's moments over one flat vector (``optax.flatten``) is the same optimizer as the tree."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from twinbench.models.bert.model_jax import make_optimizer as bert_optimizer
from twinbench.models.layers_jax import make_optimizer


def _params() -> dict:
    keys = jax.random.split(jax.random.key(0), 3)
    return {"w": jax.random.normal(keys[0], (6, 4)), "b": jax.random.normal(keys[1], (4,)),
            "emb": {"table": jax.random.normal(keys[2], (5, 6))}}


@pytest.mark.parametrize("factory", [make_optimizer, bert_optimizer])
@pytest.mark.parametrize("scale", [0.01, 100.0])  # gradients under the clipping norm, and far over it
def test_flat_moments_train_the_same_parameters_as_the_tree(factory, scale: float) -> None:
    runs = []
    for flat in (False, True):
        tx = factory(1e-2, 0.1, flat=flat)
        params = _params()
        state = tx.init(params)
        for i in range(4):
            grads = jax.tree.map(lambda p, i=i: scale * jnp.sin(p * (i + 1)), params)
            updates, state = tx.update(grads, state, params)
            params = optax.apply_updates(params, updates)
        runs.append((params, len(jax.tree.leaves(state))))
    (tree, n_tree), (flat, n_flat) = runs
    for a, b in zip(jax.tree.leaves(tree), jax.tree.leaves(flat), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert n_flat < n_tree  # the moments are one vector each, not one array a parameter
    # the decay stayed per parameter: the bias (rank 1) is not decayed, so a decay-only step leaves it alone
    tx = factory(1e-2, 0.5, flat=True)
    zero = jax.tree.map(jnp.zeros_like, _params())
    updates, _ = tx.update(zero, tx.init(_params()), _params())
    assert float(jnp.abs(updates["b"]).max()) == 0.0 and float(jnp.abs(updates["w"]).max()) > 0.0


def test_the_flat_state_reaches_the_jit_step_and_the_torch_side_refuses_it() -> None:
    from twinbench.config import SpecError
    from twinbench.plan import build_specs
    from twinbench.worker import build

    spec = build_specs("tiny", "jax", "jit", {"optimizer_state": "flat"})[0]
    assert spec.strategy.optimizer_state == "flat"
    trainer = build(spec).trainer
    n_params = len(jax.tree.leaves(trainer.params))
    assert len(jax.tree.leaves(trainer.opt_state)) < n_params  # 2 moments a parameter would be 2 * n_params
    with pytest.raises(SpecError, match=r"--optimizer-state flat .* torch side"):
        build_specs("tiny", "torch", "eager", {"optimizer_state": "flat"})
