"""Flax NNX in the style of flax's nnx_toy_examples: nnx.jit steps bound to the model and optimizer with
nnx.cached_partial, a NumPy generator of small batches, and a test step every few hundred steps."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

X = np.linspace(0, 1, 100)[:, None]
Y = 0.8 * X**2 + 0.1 + np.random.default_rng(0).normal(0, 0.1, size=X.shape)


def dataset(batch_size):
    rng = np.random.default_rng(1)
    while True:
        idx = rng.choice(len(X), size=batch_size)
        yield X[idx], Y[idx]


class MLP(nnx.Module):
    def __init__(self, din, dhidden, dout, *, rngs: nnx.Rngs):
        self.linear1 = nnx.Linear(din, dhidden, rngs=rngs)
        self.linear2 = nnx.Linear(dhidden, dout, rngs=rngs)

    def __call__(self, x):
        return self.linear2(jax.nn.relu(self.linear1(x)))


model = MLP(1, 32, 1, rngs=nnx.Rngs(0))
optimizer = nnx.Optimizer(model, optax.sgd(1e-3), wrt=nnx.Param)


@nnx.jit
def train_step(model, optimizer, batch):
    x, y = batch

    def loss_fn(model):
        return jnp.mean((y - model(x)) ** 2)

    optimizer.update(model, nnx.grad(loss_fn)(model))


@nnx.jit
def test_step(model, batch):
    x, y = batch
    return {"loss": jnp.mean((y - model(x)) ** 2)}


cached_train_step = nnx.cached_partial(train_step, model, optimizer)
cached_test_step = nnx.cached_partial(test_step, model)
for step, batch in enumerate(dataset(32)):
    cached_train_step(batch)
    if step % 500 == 0:
        print(f"step: {step}, loss: {cached_test_step((X, Y))['loss']}")
    if step >= 2000:
        break
