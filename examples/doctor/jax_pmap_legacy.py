"""Bad (jax-pmap-legacy): data parallelism written with pmap (2 CPU devices simulated with XLA_FLAGS)."""

import os

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"

from functools import partial

import jax
import jax.numpy as jnp

n = jax.local_device_count()


@partial(jax.pmap, axis_name="d", donate_argnums=0)
def train_step(w, x):
    loss, g = jax.value_and_grad(lambda w: jnp.mean((x @ w) ** 2))(w)
    g = jax.lax.pmean(g, "d")
    return w - 0.01 * g, jax.lax.pmean(loss, "d")


w = jnp.stack([jnp.ones((16, 1))] * n)  # one replica per device
x = jnp.ones((n, 8, 16))
for _ in range(6):
    w, loss = train_step(w, x)
print("done", loss.shape)
