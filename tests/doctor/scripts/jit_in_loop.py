"""A jitted step re-created every iteration, as ports often do (a jax.jit of a closure over the learning rate
inside the loop): every call is a new function object, traced and compiled again."""

import jax
import jax.numpy as jnp
import numpy as np

w = jnp.zeros((16, 1))
X = np.random.default_rng(0).normal(size=(32, 16)).astype(np.float32)
Y = X[:, :1] * 2.0


def loss_fn(w, x, y):
    return jnp.mean((x @ w - y) ** 2)


for _step in range(100):
    lr = 0.1
    train_step = jax.jit(lambda w, x, y: w - lr * jax.grad(loss_fn)(w, x, y))  # noqa: B023
    w = train_step(w, X, Y)
