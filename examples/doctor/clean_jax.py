"""Clean: plain JAX + Optax, the whole step (optimizer included) in one jit, state donated, data on device.

The doctor should find nothing of severity warning or worse here.
"""

from functools import partial

import jax
import jax.numpy as jnp
import optax

STEPS, BATCH, DIM = 30, 32, 64


def init(key):
    k1, k2 = jax.random.split(key)
    return {"w1": jax.random.normal(k1, (DIM, 256)) * 0.05, "w2": jax.random.normal(k2, (256, 1)) * 0.05}


def loss_fn(params, x, y):
    h = jnp.tanh(x @ params["w1"])
    return jnp.mean((h @ params["w2"] - y) ** 2)


tx = optax.adamw(1e-3)


@partial(jax.jit, donate_argnums=(0, 1))
def train_step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


key = jax.random.key(0)
params = init(key)
opt_state = tx.init(params)
xs = jax.random.normal(jax.random.key(1), (STEPS, BATCH, DIM))  # the data lives on the device already
ys = jnp.sum(xs, axis=-1, keepdims=True)
losses = []
for i in range(STEPS):
    params, opt_state, loss = train_step(params, opt_state, xs[i], ys[i])
    losses.append(loss)
print(f"final loss {float(losses[-1]):.4f}")
