"""The fixed twin of sgd_tree_map_eager.py: the same ``jax.tree.map`` momentum update, inside the jitted step (one
dispatch per step), parameters and velocities donated."""

from functools import partial

import jax
import jax.numpy as jnp

LR, MOMENTUM = 0.05, 0.9


def init(key):
    ks = jax.random.split(key, 3)
    return [{"w": jax.random.normal(k, (32, 32)) * 0.1, "b": jnp.zeros(32)} for k in ks]


def loss_fn(params, x, y):
    h = x
    for layer in params:
        h = jnp.tanh(h @ layer["w"] + layer["b"])
    return jnp.mean((h - y) ** 2)


@partial(jax.jit, donate_argnums=(0, 1))
def train_step(params, vel, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    vel = jax.tree.map(lambda v, g: MOMENTUM * v + g, vel, grads)
    return jax.tree.map(lambda p, v: p - LR * v, params, vel), vel, loss


params = init(jax.random.key(0))
x = jax.random.normal(jax.random.key(1), (16, 32))
y = jnp.tanh(x)
vel = jax.tree.map(jnp.zeros_like, params)
for step in range(200):
    params, vel, loss = train_step(params, vel, x, y)
    if step % 50 == 0:
        print(f"step {step} loss {float(loss):.4f}")
