"""Bad (jax-host-transfer): NumPy batches go straight into the jitted step, copied to the device in the call."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np


@partial(jax.jit, donate_argnums=0)
def train_step(w, x, y):
    loss, g = jax.value_and_grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
    return w - 0.01 * g, loss


rng = np.random.default_rng(0)
w = jnp.zeros((64, 1))
for _ in range(8):
    x = rng.standard_normal((64, 64), dtype=np.float32)  # host memory, every step
    w, loss = train_step(w, x, x.sum(-1, keepdims=True))
print("done", loss.shape)
