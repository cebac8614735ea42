"""The Flax linen port of ``classify_torch.py``: the same encoder, trained the linen way (a ``TrainState`` and a
jitted ``train_step``), on the same sentences of varying length.

The corpus's JAX side (examples/ports/README.md). Three realistic mistakes of a port can be switched on to make
this side the slow one:

- ``--pad longest``: each batch padded to its own longest sentence, as the torch script does; every new length is
  a new shape, and the jitted step compiles again (``--pad bucket``, the default and the doctor's fix: the
  length rounded up to a power of two, one compile a bucket);
- ``--no-jit``: the step left un-jitted (a debugging edit that stayed), so JAX runs it op by op;
- ``--log-every 1``: ``float(loss)`` read every step for the log, so the host waits for each step;
- ``--x64``: float64 by accident: ``jax_enable_x64`` turned on (copied from a notebook that needed 64-bit
  numbers) and the token embedding initialised from a numpy table, which numpy makes float64: the activations
  it starts are float64, so every product of the step and its backward computes in float64.

At the end it prints ``step_ms=...``: the mean step after the first ``WARM`` (the benchmark's A/B reads it): past the
bucketed lengths' first compiles, which a fixed side has too. ``--threads 1`` (the default,
as the torch side's) gives XLA:CPU one thread: both sides of a pair compute on the same number of threads.
"""

import argparse
import os
import time

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=12)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--dim", type=int, default=32, help="the model's width (a pair whose cause is compute takes a wider one)")
p.add_argument("--pad", choices=("bucket", "longest"), default="bucket")
p.add_argument("--no-jit", action="store_true")
p.add_argument("--log-every", type=int, default=0, help="read the loss on the host every N steps (0: at the end)")
p.add_argument("--threads", type=int, default=1, help="XLA:CPU threads (1: as the torch side)")
p.add_argument("--x64", action="store_true", help="jax_enable_x64 on, the embedding initialised from numpy float64")
args = p.parse_args()
if args.threads == 1:  # before JAX starts its CPU client (the doctor imports JAX first, and starts none)
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false"
                               " intra_op_parallelism_threads=1").strip()

import flax.linen as nn  # noqa: E402 (XLA reads its flags when JAX starts)
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax.training import train_state  # noqa: E402

jax.config.update("jax_enable_x64", args.x64)  # --x64: 64-bit numbers, as the notebook this came from had

VOCAB, D, HEADS, LAYERS, MAX_LEN, WARM = 1000, args.dim, 2, 1, 128, 4
rng = np.random.default_rng(0)
N = args.steps * args.batch
lengths = np.clip(rng.lognormal(np.log(24), 0.6, N).astype(int), 4, MAX_LEN)
ids = [rng.integers(0, VOCAB, n) for n in lengths]  # the tokenized corpus
labels = (rng.random(N) < 0.5).astype(np.int32)


def batches(epoch_rng: np.random.Generator):
    order = epoch_rng.permutation(N)
    for s in range(0, N - args.batch + 1, args.batch):
        rows = order[s:s + args.batch]
        longest = max(len(ids[r]) for r in rows)
        width = longest if args.pad == "longest" else max(16, 1 << (longest - 1).bit_length())  # the doctor's fix
        x = np.zeros((len(rows), width), np.int32)
        for k, r in enumerate(rows):
            x[k, : len(ids[r])] = ids[r]
        yield x, labels[rows]


class Block(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        B, T, C = x.shape
        q, k, v = nn.Dense(3 * C)(x).reshape(B, T, 3, HEADS, C // HEADS).transpose(2, 0, 1, 3, 4)
        a = jax.nn.dot_product_attention(q, k, v)
        x = nn.LayerNorm(epsilon=1e-5)(x + nn.Dense(C)(a.reshape(B, T, C)))
        return nn.LayerNorm(epsilon=1e-5)(x + nn.Dense(C)(nn.gelu(nn.Dense(4 * C)(x), approximate=False)))


class Classifier(nn.Module):
    @nn.compact
    def __call__(self, idx: jax.Array) -> jax.Array:
        x = nn.Embed(VOCAB, D)(idx) + nn.Embed(MAX_LEN, D)(jnp.arange(idx.shape[1]))
        for _ in range(LAYERS):
            x = Block()(x)
        return nn.Dense(2)(x[:, 0])


def train_step(state: train_state.TrainState, x: jax.Array, y: jax.Array):
    def loss_fn(params):
        logits = state.apply_fn({"params": params}, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


if not args.no_jit:
    train_step = jax.jit(train_step)

model = Classifier()
params = model.init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))["params"]
if args.x64:  # the token embedding from a numpy table (as a pretrained one is loaded): numpy's float64
    params["Embed_0"]["embedding"] = rng.normal(0.0, 0.02, (VOCAB, D))
state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.adamw(1e-3))
history, t0 = [], 0.0
for i, (x, y) in enumerate(batches(np.random.default_rng(1))):
    if i == WARM:
        jax.block_until_ready(state)
        t0 = time.perf_counter()
    state, loss = train_step(state, x, y)
    if args.log_every and i % args.log_every == 0:
        history.append(float(loss))  # the log's read: the host waits for this step
    else:
        history.append(loss)
jax.block_until_ready(state)
print(f"final loss {float(history[-1]):.4f}")
print(f"step_ms={1e3 * (time.perf_counter() - t0) / (args.steps - WARM):.3f}")
