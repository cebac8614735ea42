"""Flax NNX the way the basics guide writes it: @nnx.jit on a train step taking the model and the optimizer,
here a deep stack of small layers (many graph nodes), so each call's Python graph traversal is the step."""

import jax.numpy as jnp
import optax
from flax import nnx


class Deep(nnx.Module):
    def __init__(self, depth, width, *, rngs: nnx.Rngs):
        self.layers = nnx.List([nnx.Linear(width, width, rngs=rngs) for _ in range(depth)])

    def __call__(self, x):
        for layer in self.layers:
            x = nnx.relu(layer(x))
        return x


model = Deep(48, 4, rngs=nnx.Rngs(0))
optimizer = nnx.Optimizer(model, optax.sgd(1e-3), wrt=nnx.Param)
X = jnp.ones((2, 4), jnp.float32)


@nnx.jit
def train_step(model, optimizer, x):
    def loss_fn(model):
        return jnp.mean(model(x) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


for _step in range(200):
    loss = train_step(model, optimizer, X)
