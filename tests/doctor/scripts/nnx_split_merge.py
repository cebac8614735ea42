"""Flax NNX in the functional style: nnx.split the model and optimizer once, a jax.jit step on their
states that nnx.merge-s them inside, states donated; nnx.update at the end."""

from functools import partial

import jax
import jax.numpy as jnp
import optax
from flax import nnx


class MLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.fc1 = nnx.Linear(16, 64, rngs=rngs)
        self.fc2 = nnx.Linear(64, 1, rngs=rngs)

    def __call__(self, x):
        return self.fc2(nnx.relu(self.fc1(x)))


model = MLP(nnx.Rngs(0))
optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
graphdef, state = nnx.split((model, optimizer))


@partial(jax.jit, donate_argnums=0)
def train_step(state, x, y):
    model, optimizer = nnx.merge(graphdef, state)

    def loss_fn(model):
        return jnp.mean((model(x) - y) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return nnx.state((model, optimizer)), loss


xs = jax.random.normal(jax.random.key(1), (200, 32, 16))
ys = jnp.sum(xs, axis=-1, keepdims=True)
losses = []
for i in range(200):
    state, loss = train_step(state, xs[i], ys[i])
    losses.append(loss)
nnx.update((model, optimizer), state)
print("final loss", float(losses[-1]))
