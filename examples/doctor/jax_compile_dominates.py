"""Bad (compile-dominates): a deep stack unrolled by a Python loop compiles far longer than it runs.

The fix is to compile one layer and scan over the stack (jax.lax.scan / nnx.scan) and to keep compiled
programs in the persistent cache.
"""

from functools import partial

import jax
import jax.numpy as jnp

LAYERS = 150  # compiles in ~2.5 s on an idle 2-core CPU, well above the 1 s from which compilation is reported


@partial(jax.jit, donate_argnums=0)
def train_step(ws, x):
    def loss_fn(ws):
        h = x
        for i in range(LAYERS):  # unrolled: the program grows with the depth
            h = jnp.tanh(h @ ws[i]) + h
        return jnp.mean(h**2)

    loss, g = jax.value_and_grad(loss_fn)(ws)
    return ws - 1e-3 * g, loss


ws = jnp.zeros((LAYERS, 16, 16))
x = jnp.ones((4, 16))
for _ in range(4):
    ws, loss = train_step(ws, x)
print("done", loss.shape)
