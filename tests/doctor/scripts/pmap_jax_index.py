"""The pattern of Hugging Face's Flax GLUE example (run_flax_glue.py), in small: a pmapped step that donates a
multi-leaf train state (donate_argnums=(0,)), replicate/shard by hand, and a collator that indexes a
sequence-like dataset with a row of a JAX permutation (so every element is read with int())."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.jax_utils import replicate

N, D, B = 512, 64, 8
ROWS = np.random.default_rng(0).normal(size=(N, D)).astype(np.float32)


class Rows:  # like datasets.Dataset: a batch is a list of rows picked by index
    def __getitem__(self, idx):
        return {"x": np.stack([ROWS[int(i)] for i in idx]), "y": np.stack([ROWS[int(i), :1] for i in idx])}

    def __len__(self):
        return N


def collator(rng, dataset, batch_size):
    perms = jax.random.permutation(rng, len(dataset))
    perms = perms[: len(dataset) // batch_size * batch_size].reshape((-1, batch_size))
    for perm in perms:
        batch = dataset[perm]
        yield {k: v.reshape((jax.local_device_count(), -1, *v.shape[1:])) for k, v in batch.items()}


params = {f"w{i}": jnp.full((D, D), 0.01) for i in range(8)}
params["out"] = jnp.zeros((D, 1))
tx = optax.adam(1e-3)
state = (params, tx.init(params))


def train_step(state, batch):
    params, opt_state = state

    def loss_fn(p):
        h = batch["x"]
        for i in range(8):
            h = jnp.tanh(h @ p[f"w{i}"])
        return jnp.mean((h @ p["out"] - batch["y"]) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    grads = jax.lax.pmean(grads, "batch")
    updates, opt_state = tx.update(grads, opt_state, params)
    return (optax.apply_updates(params, updates), opt_state), jax.lax.pmean(loss, "batch")


p_train_step = jax.pmap(train_step, axis_name="batch", donate_argnums=(0,))
state = replicate(state)
rng = jax.random.PRNGKey(0)
for _epoch in range(3):
    rng, input_rng = jax.random.split(rng)
    for batch in collator(input_rng, Rows(), B * jax.local_device_count()):
        state, loss = p_train_step(state, batch)
