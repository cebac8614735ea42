"""JAX "naive port": only the gradient is jitted; the Optax update runs op by op outside jit.

This is what a first port from PyTorch often looks like: ``nnx.jit(nnx.value_and_grad(loss))`` for the
backward pass, then ``optimizer.update`` eagerly, each of its element-wise ops dispatched on its own.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from flax import nnx

from twinbench.models import family as families
from twinbench.models.weights import Canonical, jax_to_canonical
from twinbench.spec import RunSpec
from twinbench.strategies.jax_jit import make_model


@nnx.jit
def predict(model: nnx.Module, x: tuple[jax.Array, ...]) -> jax.Array:
    return model(*x).argmax(-1)


class NaiveTrainer:
    def __init__(self, spec: RunSpec, weights: Canonical):
        fam = families.get(spec)
        self.model = make_model(spec, weights, fam)
        tx = fam.jax_optimizer(spec.train.lr, spec.train.weight_decay, flat=spec.strategy.optimizer_state == "flat")
        self.grad_step = nnx.jit(nnx.value_and_grad(fam.jax_loss))  # the model's loss, jitted with its gradient
        self.optimizer = nnx.Optimizer(self.model, tx, wrt=nnx.Param)

    def step(self, x: np.ndarray, y: np.ndarray) -> Any:
        loss, grads = self.grad_step(self.model, x, y)
        self.optimizer.update(self.model, grads)  # eager: one dispatch per element-wise op
        return loss

    def sync(self) -> None:
        """Wait for the parameters AND the optimizer state: since Flax 0.11 the optimizer no longer holds the
        model, so waiting on ``nnx.state(self.optimizer)`` alone returns before the parameter update is done."""
        jax.block_until_ready((nnx.state(self.model, nnx.Param), nnx.state(self.optimizer)))

    def predict(self, x: Any) -> np.ndarray:
        """Predicted classes of a host batch (classification)."""
        return np.asarray(predict(self.model, x))

    def weights(self) -> Canonical:
        return jax_to_canonical(self.model)


def build(spec: RunSpec, weights: Canonical) -> NaiveTrainer:
    return NaiveTrainer(spec, weights)
