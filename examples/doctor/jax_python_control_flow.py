"""Bad (jax-python-control-flow): a Python `if` on a traced value inside jit fails when traced."""

import jax
import jax.numpy as jnp


@jax.jit
def train_step(w, x):
    loss = jnp.mean((x @ w) ** 2)
    if loss > 1.0:  # Python needs a concrete bool; under jit the loss is a tracer
        w = w * 0.5
    return w, loss


w, x = jnp.ones((4, 1)), jnp.ones((2, 4))
for _ in range(3):
    w, loss = train_step(w, x)
