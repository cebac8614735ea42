"""JAX "naive port": only the gradient is jitted; the Optax update runs op by op outside jit.

This is what a first port from PyTorch often looks like: ``nnx.jit(nnx.value_and_grad(loss))`` for the
backward pass, then ``optimizer.update`` eagerly, each of its element-wise ops dispatched on its own.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from flax import nnx

from twinbench.models import bert_jax, family, gpt_jax
from twinbench.models.weights import Canonical, jax_to_canonical
from twinbench.spec import RunSpec
from twinbench.strategies.jax_jit import make_model


@nnx.jit
def grad_step(model: gpt_jax.GPT, x: jax.Array, y: jax.Array):
    return nnx.value_and_grad(gpt_jax.loss_fn)(model, x, y)


@nnx.jit
def grad_step_bert(model: bert_jax.BERT, x: tuple[jax.Array, ...], y: jax.Array):
    return nnx.value_and_grad(bert_jax.loss_fn)(model, x, y)


@nnx.jit
def predict(model: bert_jax.BERT, x: tuple[jax.Array, ...]) -> jax.Array:
    return model(*x).argmax(-1)


class NaiveTrainer:
    def __init__(self, spec: RunSpec, weights: Canonical):
        self.model = make_model(spec, weights)
        tx = family.module("jax", spec.model.family).make_optimizer(spec.train.lr, spec.train.weight_decay)
        self.grad_step = grad_step if spec.model.family == "gpt" else grad_step_bert
        self.optimizer = nnx.Optimizer(self.model, tx, wrt=nnx.Param)

    def step(self, x: np.ndarray, y: np.ndarray) -> Any:
        loss, grads = self.grad_step(self.model, x, y)
        self.optimizer.update(self.model, grads)  # eager: one dispatch per element-wise op
        return loss

    def sync(self) -> None:
        jax.block_until_ready(nnx.state(self.optimizer))

    def predict(self, x: Any) -> np.ndarray:
        """Predicted classes of a host batch (classification)."""
        return np.asarray(predict(self.model, x))

    def weights(self) -> Canonical:
        return jax_to_canonical(self.model)


def build(spec: RunSpec, weights: Canonical) -> NaiveTrainer:
    return NaiveTrainer(spec, weights)
