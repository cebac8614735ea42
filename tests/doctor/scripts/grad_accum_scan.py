"""The fixed twin of grad_accum_unrolled.py: the micro-batches accumulated with ``jax.lax.scan``, so the
forward and backward pass are traced and compiled once whatever the number of micro-batches."""

from functools import partial

import jax
import jax.numpy as jnp
import optax

ACCUM = 64  # micro-batches per step, as in grad_accum_unrolled.py


def init(key):
    ks = jax.random.split(key, 4)
    return {f"w{i}": jax.random.normal(k, (64, 64)) * 0.1 for i, k in enumerate(ks)}


def loss_fn(params, x, y):
    h = x
    for i in range(4):
        h = jnp.tanh(h @ params[f"w{i}"])
    return jnp.mean((h - y) ** 2)


tx = optax.adam(1e-3)


@partial(jax.jit, donate_argnums=(0, 1))
def train_step(params, opt_state, xs, ys):
    def micro(carry, batch):
        grads, loss = carry
        micro_loss, g = jax.value_and_grad(loss_fn)(params, *batch)
        return (jax.tree.map(jnp.add, grads, g), loss + micro_loss), None

    zeros = jax.tree.map(jnp.zeros_like, params)
    (grads, loss), _ = jax.lax.scan(micro, (zeros, 0.0), (xs, ys))
    grads = jax.tree.map(lambda g: g / ACCUM, grads)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss / ACCUM


params = init(jax.random.key(0))
opt_state = tx.init(params)
xs = jax.random.normal(jax.random.key(1), (ACCUM, 16, 64))
ys = jnp.tanh(xs)
for step in range(100):
    params, opt_state, loss = train_step(params, opt_state, xs, ys)
    if step % 20 == 0:
        print(f"step {step} loss {float(loss):.4f}")
