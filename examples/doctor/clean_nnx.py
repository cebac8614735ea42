"""Clean: Flax NNX model and optimizer, one nnx.jit step, model/optimizer donated, data on device.

The doctor should find nothing of severity warning or worse here.
"""

import jax
import jax.numpy as jnp
import optax
from flax import nnx

STEPS, BATCH, DIM = 30, 32, 64


class MLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.fc1 = nnx.Linear(DIM, 256, rngs=rngs)
        self.fc2 = nnx.Linear(256, 1, rngs=rngs)

    def __call__(self, x):
        return self.fc2(nnx.gelu(self.fc1(x)))


@nnx.jit(donate_argnames=("model", "optimizer"))
def train_step(model, optimizer, x, y):
    def loss_fn(model):
        return jnp.mean((model(x) - y) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


model = MLP(nnx.Rngs(0))
optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
xs = jax.random.normal(jax.random.key(1), (STEPS, BATCH, DIM))
ys = jnp.sum(xs, axis=-1, keepdims=True)
losses = [train_step(model, optimizer, xs[i], ys[i]) for i in range(STEPS)]
print(f"final loss {float(losses[-1]):.4f}")
