"""An asynchronous JAX loop: a jitted step far slower than its dispatch (its batches already on the device), and
with ``--read`` the loss read with ``.item()`` after every step; with ``--carry-only`` the step returns only its
state, donated to the next call (no output of its own the doctor could wait on). It prints its own step time
(steps 5 to the end, synchronised on the last step's outputs): ``OWN_STEP_MS x``."""

import sys
import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

READ = "--read" in sys.argv
CARRY_ONLY = "--carry-only" in sys.argv
STEPS = 40


@jax.jit
def train_step(w, x):
    h = x
    for _ in range(6):
        h = jnp.tanh(h @ w)
    loss = jnp.mean(h * h)
    return w * (1 - 1e-4 * loss), loss


@partial(jax.jit, donate_argnums=0)
def carry_step(w, x):
    return train_step(w, x)[0]


rng = np.random.default_rng(0)
w = jnp.asarray(rng.standard_normal((512, 512), dtype=np.float32) / 20)
batches = [jnp.asarray(rng.standard_normal((512, 512), dtype=np.float32)) for _ in range(4)]
t5 = 0.0
for i in range(STEPS):
    if i == 5:
        jax.block_until_ready(w)
        t5 = time.perf_counter()
    if CARRY_ONLY:
        w = loss = carry_step(w, batches[i % 4])
        continue
    w, loss = train_step(w, batches[i % 4])
    if READ:
        print(f"step {i} loss {loss.item():.5f}")
jax.block_until_ready((w, loss))
print(f"OWN_STEP_MS {1e3 * (time.perf_counter() - t5) / (STEPS - 5):.3f}")
