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
w = jnp.zeros((256, 1))
batches = [rng.standard_normal((1024, 256), dtype=np.float32) for _ in range(8)]  # 1 MiB each, host memory
for x in batches:
    w, loss = train_step(w, x, x.sum(-1, keepdims=True))  # copied to the device inside every call
print("done", loss.shape)
