"""JAX strategies over a user's model (``--model`` / ``--jax-model``): ``torchax`` and ``port``.

Both are a pure ``loss_of(params, x, y)`` of a parameter pytree, trained by ONE ``jax.jit`` step
(``jax.value_and_grad``, the twins' Optax chain: clip by global norm 1.0 + AdamW), parameters and optimizer
state donated (``+nodonate`` keeps them):

- ``torchax``: the user's torch module run on JAX arrays by torchax. ``torchax.extract_jax`` of a small
  wrapper module whose ``forward(x, y)`` is the user's ``loss_fn(module, x, y)`` gives the state (parameters
  and buffers, torch names) and a pure function; the parameters are trained, the buffers are constants.
  torchax is imported through :func:`twinbench.byo.torchax_compat.import_torchax` in this (JAX) process
  only.
- ``port``: the user's own JAX port (``--jax-model``): its ``loss_fn(params, x, y)`` over the parameters
  its ``to_jax`` maps from the same initial torch weights.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from twinbench.byo import family as fam
from twinbench.byo import load_jax, map_to_jax
from twinbench.spec import RunSpec
from twinbench.strategies.jax_jit import explain_hlo, explain_parts, make_train_step


class PureStepTrainer:
    """A parameter pytree, its Optax state and one jitted, donated step of ``loss_of``."""

    def __init__(self, spec: RunSpec, params: Any, loss_of: Callable[[Any, Any, Any], Any]):
        tx = fam.jax_optimizer(spec.train.lr, spec.train.weight_decay)
        self.params = params
        self.opt_state = tx.init(params)
        self.loss_of = loss_of
        donate = "nodonate" not in spec.modifiers
        self.train_step = jax.jit(make_train_step(loss_of, tx), donate_argnums=(0, 1) if donate else ())

    def step(self, x: np.ndarray, y: np.ndarray) -> Any:
        self.params, self.opt_state, loss = self.train_step(self.params, self.opt_state, x, y)
        return loss

    def sync(self) -> None:
        jax.block_until_ready((self.params, self.opt_state))

    def explain_parts(self) -> dict[str, Any]:
        return explain_parts(self, self.loss_of)

    def explain_hlo(self, x: Any, y: Any) -> str:
        return explain_hlo(self, x, y)

    def weights(self) -> dict[str, np.ndarray]:
        return flat_weights(self.params)


def flat_weights(params: Any, to_host: Callable[[Any], np.ndarray] = np.asarray) -> dict[str, np.ndarray]:
    """A parameter pytree as one flat dict of host arrays, named by their paths (``blocks.0.attn.wq``)."""
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    return {jax.tree_util.keystr(path, simple=True, separator="."): to_host(v) for path, v in flat}


def torchax_loss(spec: RunSpec, weights: dict[str, np.ndarray],
                 place_buffers: Callable[[Any], Any] | None = None) -> tuple[dict[str, Any], Callable, Any]:
    """(trainable params by torch name, ``loss_of(params, x, y)``, the user's module) through torchax.

    ``place_buffers`` (optional) maps the buffers (constants of the step) to where the step runs (a mesh)."""
    from twinbench.byo.torchax_compat import import_torchax

    torchax = import_torchax()
    um = fam.torch_model(spec, weights)
    wrapper = fam.with_loss(um.module, um.loss_fn)
    states, fn = torchax.extract_jax(wrapper)
    names = {n for n, _ in wrapper.named_parameters()}
    params = {k: v for k, v in states.items() if k in names}
    buffers = {k: v for k, v in states.items() if k not in names}
    if place_buffers is not None:
        buffers = place_buffers(buffers)

    def loss_of(params: dict[str, Any], x: Any, y: Any) -> Any:
        return fn({**params, **buffers}, (x, y))

    return params, loss_of, um.module


def tied_names(module: Any) -> dict[str, list[str]]:
    """Each ``state_dict`` name -> every name of the same tensor (tied weights)."""
    sd = module.state_dict(keep_vars=True)
    groups: dict[int, list[str]] = {}
    for k, t in sd.items():
        groups.setdefault(id(t), []).append(k)
    return {k: groups[id(t)] for k, t in sd.items()}


def torch_layout(params: dict[str, Any], alias: dict[str, list[str]], initial: dict[str, np.ndarray],
                 to_host: Callable[[Any], np.ndarray] = np.asarray) -> dict[str, np.ndarray]:
    """torchax params (``model.<name>``) in the module's ``state_dict`` layout: torch names, tied weights under
    each name, buffers (never trained) from ``initial``."""
    out = {}
    for k in initial:
        hit = next((f"model.{a}" for a in alias[k] if f"model.{a}" in params), None)
        out[k] = to_host(params[hit]) if hit else initial[k]
    return out


class TorchaxTrainer(PureStepTrainer):
    def __init__(self, spec: RunSpec, weights: dict[str, np.ndarray]):
        params, loss_of, module = torchax_loss(spec, weights)
        super().__init__(spec, params, loss_of)
        self.alias = tied_names(module)
        self.initial = {k: np.asarray(v) for k, v in weights.items()}

    def weights(self) -> dict[str, np.ndarray]:
        """The module's ``state_dict`` layout (torch names, tied weights under each name)."""
        return torch_layout(self.params, self.alias, self.initial)


def port_loss(spec: RunSpec, weights: dict[str, np.ndarray]) -> tuple[Any, Callable]:
    """(params mapped by the user's ``to_jax``, the port's ``loss_fn``)."""
    um = load_jax(spec.user_jax_model, fam.config(spec))
    params = jax.tree.map(jnp.asarray, map_to_jax(um.to_jax, weights))
    return params, um.loss_fn


class PortTrainer(PureStepTrainer):
    def __init__(self, spec: RunSpec, weights: dict[str, np.ndarray]):
        super().__init__(spec, *port_loss(spec, weights))


def build_torchax(spec: RunSpec, weights: dict[str, np.ndarray]) -> TorchaxTrainer:
    return TorchaxTrainer(spec, weights)


def build_port(spec: RunSpec, weights: dict[str, np.ndarray]) -> PortTrainer:
    return PortTrainer(spec, weights)
