"""A Flax NNX loop whose batches come from a pure-Python tokenizer, built in the loop between step calls (with
``prebuilt``: built before the loop).

On a CPU the tokenizer and XLA's threads share the cores: the input's cost shows as a slower step, not as the
device waiting. The doctor's A/B (the step called back to back on a batch already built) finds it.
"""

import itertools
import random
import sys

import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 40
PREBUILT = "prebuilt" in sys.argv  # the batches built before the loop: the same loop, not input-bound
BATCH, SEQ, VOCAB, DIM = 16, 64, 512, 64
WORDS = [f"w{i}{c}" for i in range(300) for c in "abc"]


def tokenize(text):
    """Character-pair hashing in pure Python: a slow tokenizer, as a hand-written one is."""
    ids = []
    for word in text.split():
        h = 0
        for ch in word:
            h = (h * 31 + ord(ch)) % VOCAB
        ids.append(h)
        for a, b in itertools.pairwise(word):
            ids.append((ord(a) * 7 + ord(b)) % VOCAB)
    return (ids + [0] * SEQ)[:SEQ]


def batches(rng):
    while True:
        texts = [" ".join(rng.choice(WORDS) for _ in range(800)) for _ in range(BATCH)]
        toks = np.array([tokenize(t) for t in texts], dtype=np.int32)
        yield toks[:, :-1], toks[:, 1:]


class Model(nnx.Module):
    def __init__(self, rngs):
        self.embed = nnx.Embed(VOCAB, DIM, rngs=rngs)
        self.fc1 = nnx.Linear(DIM, 4 * DIM, rngs=rngs)
        self.fc2 = nnx.Linear(4 * DIM, DIM, rngs=rngs)
        self.out = nnx.Linear(DIM, VOCAB, rngs=rngs)

    def __call__(self, x):
        h = self.embed(x)
        h = h + self.fc2(nnx.gelu(self.fc1(h)))
        return self.out(h)


@nnx.jit
def train_step(model, optimizer, x, y):
    def loss_fn(model):
        return optax.softmax_cross_entropy_with_integer_labels(model(x), y).mean()

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


model = Model(nnx.Rngs(0))
optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
data = batches(random.Random(0))
if PREBUILT:
    data = [next(data) for _ in range(STEPS)]
for x, y in itertools.islice(data, STEPS):
    loss = train_step(model, optimizer, jnp.asarray(x), jnp.asarray(y))
print(f"final loss {float(loss):.3f}")
