"""Bad (jax-host-sync): float(loss) every step makes the host wait for the device each time."""

from functools import partial

import jax
import jax.numpy as jnp


@partial(jax.jit, donate_argnums=0)
def train_step(w, x):
    loss, g = jax.value_and_grad(lambda w: jnp.mean((x @ w) ** 2))(w)
    return w - 0.1 * g, loss


w, x = jnp.ones((32, 1)), jnp.ones((8, 32))
for step in range(8):
    w, loss = train_step(w, x)
    print(f"step {step} loss {float(loss):.4f}")  # a device -> host read per step
