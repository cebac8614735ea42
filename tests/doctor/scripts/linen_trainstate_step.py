"""A Flax linen TrainState loop with one jitted step, ``train_step(state, batch)``, its batch a dict of NumPy arrays
(the state is carried from step to step, the batch is not), not donated."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn
from flax.training import train_state


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(512)(x.reshape((x.shape[0], -1))))
        return nn.Dense(10)(x)


@jax.jit
def train_step(state, batch):
    def loss_fn(params):
        logits = state.apply_fn({"params": params}, batch["image"])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


rng = np.random.default_rng(0)
model = MLP()
state = train_state.TrainState.create(apply_fn=model.apply, tx=optax.adam(1e-3),
                                      params=model.init(jax.random.key(0), jnp.ones((1, 28, 28, 1)))["params"])
for _ in range(12):
    batch = {"image": rng.random((32, 28, 28, 1), dtype=np.float32), "label": rng.integers(0, 10, 32)}
    state, loss = train_step(state, batch)
print(f"loss {float(loss):.4f}")
