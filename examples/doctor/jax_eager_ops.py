"""Bad (jax-eager-ops): only the gradient is jitted; the Optax update runs op by op outside jit."""

import jax
import jax.numpy as jnp
import optax

tx = optax.adamw(1e-3)
params = {f"w{i}": jnp.zeros((32, 32)) for i in range(6)}
opt_state = tx.init(params)


@jax.jit
def grad_step(params, x):
    def loss_fn(p):
        h = x
        for i in range(6):
            h = jnp.tanh(h @ p[f"w{i}"])
        return jnp.mean(h**2)

    return jax.value_and_grad(loss_fn)(params)


x = jax.random.normal(jax.random.key(0), (8, 32))
for _ in range(8):
    loss, grads = grad_step(params, x)
    updates, opt_state = tx.update(grads, opt_state, params)  # eager: dozens of tiny dispatches
    params = optax.apply_updates(params, updates)
print("done", loss.shape)
