"""``layers_jax.cross_entropy``, the GPT and Llama twins' loss: optax's integer-label cross-entropy of the fp32
logits (values and gradients), from fp32 or bf16 logits."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from twinbench.models.layers_jax import cross_entropy


def optax_loss(logits: jax.Array, targets: jax.Array) -> jax.Array:
    return optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), targets).mean()


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_cross_entropy_is_optax_in_fp32(dtype) -> None:
    logits = (4 * jax.random.normal(jax.random.key(0), (3, 5, 37))).astype(dtype)
    targets = jax.random.randint(jax.random.key(1), (3, 5), 0, 37)
    got, g_got = jax.jit(jax.value_and_grad(cross_entropy))(logits, targets)
    want, g_want = jax.jit(jax.value_and_grad(optax_loss))(logits, targets)
    assert got.dtype == jnp.float32 and g_got.dtype == dtype
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(g_got, np.float32), np.asarray(g_want, np.float32), rtol=1e-6, atol=1e-7)
    assert float(jnp.abs(g_got).max()) > 0


def test_cross_entropy_of_a_confident_right_answer_is_small() -> None:
    logits = jnp.zeros((2, 10)).at[jnp.arange(2), jnp.array([3, 7])].set(30.0)
    assert float(cross_entropy(logits, jnp.array([3, 7]))) < 1e-6
    assert float(cross_entropy(logits, jnp.array([4, 7]))) > 10
