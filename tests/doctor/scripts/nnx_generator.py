"""NNX with nnx.Optimizer, fed by a Python generator that tokenises text in pure Python (about 100 ms a batch).

The nnx.jit step takes a few ms; the loop spends most of each iteration in the generator: input-bound.
"""

import random

import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

VOCAB, SEQ, BATCH, DIM = 256, 32, 8, 128
WORDS = [f"tok{i}" for i in range(VOCAB)]


def tokenise(text: str) -> list[int]:
    ids = []
    for word in text.split():  # a slow, pure-Python tokeniser: per-character hashing
        h = 0
        for ch in word:
            h = (h * 31 + ord(ch)) % 1_000_003
        ids.append(h % VOCAB)
    return ids


def batches(seed: int = 0):
    rng = random.Random(seed)
    while True:
        rows = []
        for _ in range(BATCH):
            text = " ".join(rng.choice(WORDS) for _ in range(SEQ * 800))
            rows.append(tokenise(text)[: SEQ + 1])
        arr = np.asarray(rows, np.int32)
        yield arr[:, :-1], arr[:, 1:]


class LM(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.embed = nnx.Embed(VOCAB, DIM, rngs=rngs)
        self.hidden = nnx.Linear(DIM, 2 * DIM, rngs=rngs)
        self.out = nnx.Linear(2 * DIM, VOCAB, rngs=rngs)

    def __call__(self, x):
        return self.out(nnx.gelu(self.hidden(self.embed(x))))


@nnx.jit(donate_argnames=("model", "optimizer"))
def train_step(model, optimizer, x, y):
    def loss_fn(model):
        return optax.softmax_cross_entropy_with_integer_labels(model(x), y).mean()

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


model = LM(nnx.Rngs(0))
optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
losses = []
for step, (x, y) in enumerate(batches()):
    losses.append(train_step(model, optimizer, jnp.asarray(x), jnp.asarray(y)))
    if step == 200:
        break
print("final loss", float(losses[-1]))
