"""Bad (jax-recompile): the batch size changes every step, so jit traces and compiles the step again."""

from functools import partial

import jax
import jax.numpy as jnp
import optax

tx = optax.sgd(1e-2)
params = {"w": jnp.zeros((16, 1))}
opt_state = tx.init(params)


@partial(jax.jit, donate_argnums=(0, 1))
def train_step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(lambda p: jnp.mean((x @ p["w"] - y) ** 2))(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


key = jax.random.key(0)
for step in range(8):
    batch = 8 + step  # a ragged last batch, a length-sorted loader... every new shape is a new program
    x = jax.random.normal(jax.random.fold_in(key, step), (batch, 16))
    params, opt_state, loss = train_step(params, opt_state, x, x.sum(-1, keepdims=True))
print("done", loss.shape)
