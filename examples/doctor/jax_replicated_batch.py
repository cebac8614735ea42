"""Bad (jax-replicated-batch): 4 devices, but the batch stays on one device, so one device does all the work.

Simulates 4 devices on the CPU with XLA_FLAGS (set before JAX is imported).
"""

import os

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"

from functools import partial

import jax
import jax.numpy as jnp


@partial(jax.jit, donate_argnums=0)
def train_step(w, x):
    loss, g = jax.value_and_grad(lambda w: jnp.mean((x @ w) ** 2))(w)
    return w - 0.01 * g, loss


w = jnp.ones((32, 1))
batches = [jax.random.normal(jax.random.key(i), (64, 32)) for i in range(8)]  # default device only
for x in batches:
    w, loss = train_step(w, x)
print(jax.device_count(), "devices; done", loss.shape)
