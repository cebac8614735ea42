"""JAX whole-step jit: forward, loss, gradient, clipping and the Optax update in ONE jitted function.

The model is split once into a static graph definition and a parameter pytree (``nnx.split``); the step
is a pure function of (params, optimizer state, batch) and both states are donated, so XLA updates them
in place. No NNX graph traversal happens per step: that is what idiomatic, fast JAX looks like.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import optax
from flax import nnx

from twinbench.models import family, gpt_jax
from twinbench.models.weights import Canonical, canonical_to_jax, jax_to_canonical
from twinbench.spec import RunSpec
from twinbench.strategies.options import model_options


def make_model(spec: RunSpec, weights: Canonical) -> gpt_jax.GPT:
    """The twin with the strategy's options (scan-layers, +remat, +bf16), holding ``weights``."""
    if spec.model.family == "gpt":
        model = gpt_jax.GPT(spec.model, nnx.Rngs(spec.train.seed), model_options(spec))
    else:
        model = family.model_class("jax", spec.model.family)(spec.model, nnx.Rngs(spec.train.seed))
    canonical_to_jax(model, weights)
    return model


def make_train_step(graphdef: nnx.GraphDef, tx: optax.GradientTransformation, loss_fn=gpt_jax.loss_fn):
    """The pure step (params, opt_state, x, y) -> (params, opt_state, loss); ``loss_fn`` of the model's twin."""

    def train_step(params, opt_state, x, y):
        def loss_of(p):
            return loss_fn(nnx.merge(graphdef, p), x, y)

        loss, grads = jax.value_and_grad(loss_of)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return train_step


def scan_steps(train_step):
    """K steps in one call: ``lax.scan`` of ``train_step`` over batches stacked as [K, batch, seq]."""

    def multi_step(params, opt_state, xs, ys):
        def body(state, batch):
            params, opt_state, loss = train_step(*state, *batch)
            return (params, opt_state), loss

        (params, opt_state), losses = jax.lax.scan(body, (params, opt_state), (xs, ys))
        return params, opt_state, losses

    return multi_step


class JitTrainer:
    """``jit`` and ``scan-layers`` (the same step over a model whose blocks are scanned); ``+nodonate``
    keeps the old params and optimizer state alive, so XLA must allocate new buffers for the updated ones.
    ``steps_per_call`` > 1 (``scan-steps``) wraps the step in a ``lax.scan`` over K stacked batches.
    """

    steps_per_call = 1

    def __init__(self, spec: RunSpec, weights: Canonical, donate: bool | None = None):
        model = make_model(spec, weights)
        self.graphdef, self.params = nnx.split(model, nnx.Param)
        twin = family.module("jax", spec.model.family)  # gpt_jax | bert_jax
        tx = twin.make_optimizer(spec.train.lr, spec.train.weight_decay)
        self.opt_state = tx.init(self.params)
        donate = "nodonate" not in spec.modifiers if donate is None else donate
        step = make_train_step(self.graphdef, tx, twin.loss_fn)
        if self.steps_per_call > 1:
            step = scan_steps(step)
        self.train_step = jax.jit(step, donate_argnums=(0, 1) if donate else ())

    def step(self, x: np.ndarray, y: np.ndarray) -> Any:
        self.params, self.opt_state, loss = self.train_step(self.params, self.opt_state, x, y)
        return loss

    def sync(self) -> None:
        jax.block_until_ready((self.params, self.opt_state))

    def predict(self, x: Any) -> np.ndarray:
        """Predicted classes of a host batch (classification), by a jitted forward pass."""
        if not hasattr(self, "_predict"):
            graphdef = self.graphdef
            self._predict = jax.jit(lambda params, x: nnx.merge(graphdef, params)(*x).argmax(-1))
        return np.asarray(self._predict(self.params, x))

    def weights(self) -> Canonical:
        return jax_to_canonical(nnx.merge(self.graphdef, self.params))


def build(spec: RunSpec, weights: Canonical) -> JitTrainer:
    return JitTrainer(spec, weights)
