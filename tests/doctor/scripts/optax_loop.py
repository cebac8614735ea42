"""A plain JAX + Optax loop (no Keras, no Flax): params as a dict, one jitted step with the update inside,
params and optimizer state donated, the loss read every 50 steps."""

from functools import partial

import jax
import jax.numpy as jnp
import optax


def init(key):
    k1, k2 = jax.random.split(key)
    return {"w1": jax.random.normal(k1, (32, 128)) * 0.1, "b1": jnp.zeros(128),
            "w2": jax.random.normal(k2, (128, 1)) * 0.1}


def loss_fn(params, x, y):
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    return jnp.mean((h @ params["w2"] - y) ** 2)


tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3))


@partial(jax.jit, donate_argnums=(0, 1))
def train_step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


params = init(jax.random.key(0))
opt_state = tx.init(params)
xs = jax.random.normal(jax.random.key(1), (500, 64, 32))  # the data set, on the device once
ys = jnp.sum(xs, -1, keepdims=True)
for step in range(500):
    params, opt_state, loss = train_step(params, opt_state, xs[step], ys[step])
    if step % 50 == 0:
        print(f"step {step} loss {float(loss):.4f}")
