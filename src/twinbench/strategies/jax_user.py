"""JAX strategies over a user's model (``--model`` / ``--jax-model``): ``torchax``, ``port`` and their mesh forms.

A user model has no NNX twin; its JAX side is a pure ``loss_of(params, x, y)`` of a parameter pytree, which
the twins' own trainers run: :class:`~twinbench.strategies.jax_jit.JaxTrainer` (one ``jax.jit`` step,
``jax.value_and_grad``, the twins' Optax chain, parameters and optimizer state donated; ``+nodonate`` keeps them)
and :class:`~twinbench.strategies.jax_mesh.MeshTrainer` (``-mesh-dp``, ``-mesh-fsdp``). Only where the model
comes from differs (``init_model``):

- ``torchax``: the user's torch module run on JAX arrays by torchax. ``torchax.extract_jax`` of a small
  wrapper module whose ``forward(x, y)`` is the user's ``loss_fn(module, x, y)`` gives the state (parameters
  and buffers, torch names) and a pure function; the parameters are trained, the buffers are constants (on a
  mesh: replicated). torchax is imported through :func:`twinbench.byo.torchax_compat.import_torchax` in this
  (JAX) process only.
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
from twinbench.strategies.jax_jit import JaxTrainer, LossOf
from twinbench.strategies.jax_mesh import MeshTrainer


def flat_weights(params: Any) -> dict[str, np.ndarray]:
    """A parameter pytree as one flat dict of host arrays, named by their paths (``blocks.0.attn.wq``)."""
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    return {jax.tree_util.keystr(path, simple=True, separator="."): np.asarray(v) for path, v in flat}


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


def torch_layout(params: dict[str, Any], alias: dict[str, list[str]],
                 initial: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """torchax params (``model.<name>``, on the host) in the module's ``state_dict`` layout: torch names, tied
    weights under each name, buffers (never trained) from ``initial``."""
    out = {}
    for k in initial:
        hit = next((f"model.{a}" for a in alias[k] if f"model.{a}" in params), None)
        out[k] = np.asarray(params[hit]) if hit else initial[k]
    return out


def port_loss(spec: RunSpec, weights: dict[str, np.ndarray]) -> tuple[Any, Callable]:
    """(params mapped by the user's ``to_jax``, the port's ``loss_fn``)."""
    um = load_jax(spec.user_jax_model, fam.config(spec))
    params = jax.tree.map(jnp.asarray, map_to_jax(um.to_jax, weights))
    return params, um.loss_fn


class UserModelMixin:
    """What a user's JAX model lacks next to a twin: a prediction head twinbench knows."""

    def predict(self, x: Any) -> np.ndarray:
        raise NotImplementedError("a user model has no prediction head twinbench knows")


class TorchaxModel(UserModelMixin):
    """The trainer's model is the user's torch module under torchax; ``weights`` in its ``state_dict`` layout."""

    spec: RunSpec

    def init_model(self, weights: dict[str, np.ndarray]) -> tuple[Any, LossOf]:
        params, loss_of, module = torchax_loss(self.spec, weights, self.place_buffers)  # type: ignore[attr-defined]
        self.alias = tied_names(module)
        self.initial = {k: np.asarray(v) for k, v in weights.items()}
        return params, loss_of

    def weights(self) -> dict[str, np.ndarray]:
        """The module's ``state_dict`` layout (torch names, tied weights under each name)."""
        return torch_layout(self.host_params(), self.alias, self.initial)  # type: ignore[attr-defined]


class PortModel(UserModelMixin):
    """The trainer's model is the user's own JAX port; ``weights`` its pytree, flattened by path."""

    spec: RunSpec

    def init_model(self, weights: dict[str, np.ndarray]) -> tuple[Any, LossOf]:
        return port_loss(self.spec, weights)

    def weights(self) -> dict[str, np.ndarray]:
        return flat_weights(self.host_params())  # type: ignore[attr-defined]


class FunctionTrainer(UserModelMixin, JaxTrainer):
    """The twins' jit step over a given ``(params, loss_of)`` (the port's parity check, tests)."""

    def __init__(self, spec: RunSpec, params: Any, loss_of: LossOf):
        self._given = (params, loss_of)
        super().__init__(spec, {})

    def init_model(self, weights: dict[str, np.ndarray]) -> tuple[Any, LossOf]:
        return self._given

    def weights(self) -> dict[str, np.ndarray]:
        return flat_weights(self.host_params())


class TorchaxTrainer(TorchaxModel, JaxTrainer):
    """``torchax``: the twins' jit step over the user's torch module."""


class PortTrainer(PortModel, JaxTrainer):
    """``port``: the twins' jit step over the user's JAX port."""


class TorchaxMeshTrainer(TorchaxModel, MeshTrainer):
    """``torchax-mesh-dp`` / ``-fsdp``: the twins' mesh step over the user's torch module."""


class PortMeshTrainer(PortModel, MeshTrainer):
    """``port-mesh-dp`` / ``-fsdp``: the twins' mesh step over the user's JAX port."""


def build_torchax(spec: RunSpec, weights: dict[str, np.ndarray]) -> TorchaxTrainer:
    return TorchaxTrainer(spec, weights)


def build_port(spec: RunSpec, weights: dict[str, np.ndarray]) -> PortTrainer:
    return PortTrainer(spec, weights)


def build_mesh(spec: RunSpec, weights: dict[str, np.ndarray]) -> MeshTrainer:
    """``{torchax,port}-mesh-{dp,fsdp}``: the source and the sharding from the base's name."""
    source, _, kind = spec.base_strategy.partition("-mesh-")
    cls = TorchaxMeshTrainer if source == "torchax" else PortMeshTrainer
    return cls(spec, weights, fsdp=kind == "fsdp")
