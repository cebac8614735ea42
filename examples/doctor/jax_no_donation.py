"""Bad (jax-no-donation): params and optimizer state are replaced every step but not donated."""

import jax
import jax.numpy as jnp
import optax

tx = optax.adam(1e-3)
params = {"w": jnp.zeros((512, 512)), "b": jnp.zeros((512,))}  # 1 MiB of weights, 3 MiB with Adam state
opt_state = tx.init(params)


@jax.jit  # no donate_argnums: XLA must keep the old and the new state alive at once
def train_step(params, opt_state, x):
    loss, grads = jax.value_and_grad(lambda p: jnp.mean((x @ p["w"] + p["b"]) ** 2))(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


x = jax.random.normal(jax.random.key(0), (8, 512))
for _ in range(6):
    params, opt_state, loss = train_step(params, opt_state, x)
print("done", loss.shape)
