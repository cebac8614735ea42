"""A Flax linen TrainState loop shaped like the Flax MNIST example (``apply_model``, ``update_model``,
``train_epoch(state, train_ds, batch_size, rng)``), with its step functions not jitted: the gradient and the update
run op by op. ``apply_model`` takes the number of classes, which sets the one-hot's shape (a jit of it needs it
static). Synthetic images instead of MNIST (no download); ``--jit`` jits them as the example does."""

import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn
from flax.training import train_state

EPOCHS = 2
NUM_CLASSES = 10


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = x.reshape((x.shape[0], -1))
        x = nn.relu(nn.Dense(128)(x))
        return nn.Dense(NUM_CLASSES)(x)


def apply_model(state, images, labels, num_classes):
    """Computes gradients, loss and accuracy for a single batch."""

    def loss_fn(params):
        logits = state.apply_fn({"params": params}, images)
        one_hot = jax.nn.one_hot(labels, num_classes)
        loss = jnp.mean(optax.softmax_cross_entropy(logits=logits, labels=one_hot))
        return loss, logits

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    (loss, logits), grads = grad_fn(state.params)
    accuracy = jnp.mean(jnp.argmax(logits, -1) == labels)
    return grads, loss, accuracy


def update_model(state, grads):
    return state.apply_gradients(grads=grads)


if "--jit" in sys.argv:
    apply_model = jax.jit(apply_model, static_argnames=("num_classes",))
    update_model = jax.jit(update_model)


def train_epoch(state, train_ds, batch_size, rng):
    """Train for a single epoch."""
    train_ds_size = len(train_ds["image"])
    steps_per_epoch = train_ds_size // batch_size
    perms = jax.random.permutation(rng, len(train_ds["image"]))
    perms = np.asarray(perms[: steps_per_epoch * batch_size]).reshape((steps_per_epoch, batch_size))
    epoch_loss, epoch_accuracy = [], []
    for perm in perms:
        batch_images = train_ds["image"][perm, ...]
        batch_labels = train_ds["label"][perm, ...]
        grads, loss, accuracy = apply_model(state, batch_images, batch_labels, NUM_CLASSES)
        state = update_model(state, grads)
        epoch_loss.append(loss)
        epoch_accuracy.append(accuracy)
    return state, np.mean(np.asarray(epoch_loss)), np.mean(np.asarray(epoch_accuracy))


rng = np.random.default_rng(0)
train_ds = {"image": rng.random((512, 28, 28, 1), dtype=np.float32),
            "label": rng.integers(0, NUM_CLASSES, 512).astype(np.int32)}
model = MLP()
params = model.init(jax.random.key(0), jnp.ones((1, 28, 28, 1)))["params"]
state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.sgd(0.1, 0.9))
key = jax.random.key(1)
for epoch in range(EPOCHS):
    key, sub = jax.random.split(key)
    state, loss, accuracy = train_epoch(state, train_ds, 32, sub)
    print(f"epoch {epoch} loss {loss:.4f} accuracy {accuracy:.3f}")
