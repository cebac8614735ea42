"""JAX strategies over a user's model (``--model`` / ``--jax-model``): ``torchax``, ``port`` and their mesh forms.

A user model has no NNX twin; its JAX side is a pure ``loss_of(params, x, y)`` of a parameter pytree, which
the twins' own trainers run: :class:`~twinbench.strategies.jax_jit.JaxTrainer` (one ``jax.jit`` step,
``jax.value_and_grad``, the twins' Optax chain, parameters and optimizer state donated; ``+nodonate`` keeps them)
and :class:`~twinbench.strategies.jax_mesh.MeshTrainer` (``-mesh-dp``, ``-mesh-fsdp``). Only where the model
comes from differs (``init_model``):

- ``torchax``: the user's torch module run on JAX arrays by torchax, through the one torchax integration the
  twins use too (:mod:`twinbench.strategies.torchax_step`); the parameters are trained, the buffers are
  constants (on a mesh: replicated).
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
from twinbench.strategies.torchax_step import TorchaxMeshTrainer


def flat_weights(params: Any) -> dict[str, np.ndarray]:
    """A parameter pytree as one flat dict of host arrays, named by their paths (``blocks.0.attn.wq``)."""
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    return {jax.tree_util.keystr(path, simple=True, separator="."): np.asarray(v) for path, v in flat}


def port_loss(spec: RunSpec, weights: dict[str, np.ndarray]) -> tuple[Any, Callable]:
    """(params mapped by the user's ``to_jax``, the port's ``loss_fn``)."""
    um = load_jax(spec.user.user_jax_model, fam.config(spec))
    params = jax.tree.map(jnp.asarray, map_to_jax(um.to_jax, weights))
    return params, um.loss_fn


class UserModelMixin:
    """What a user's JAX model lacks next to a twin: a prediction head twinbench knows."""

    def predict(self, x: Any) -> np.ndarray:
        raise NotImplementedError("a user model has no prediction head twinbench knows")


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


class PortTrainer(PortModel, JaxTrainer):
    """``port``: the twins' jit step over the user's JAX port."""


class PortMeshTrainer(PortModel, MeshTrainer):
    """``port-mesh-dp`` / ``-fsdp``: the twins' mesh step over the user's JAX port."""


def build_port(spec: RunSpec, weights: dict[str, np.ndarray]) -> PortTrainer:
    return PortTrainer(spec, weights)


def build_mesh(spec: RunSpec, weights: dict[str, np.ndarray]) -> MeshTrainer:
    """``{torchax,port}-mesh-{dp,fsdp}``: the source and the sharding from the base's name."""
    source, _, kind = spec.strategy.base.partition("-mesh-")
    cls = TorchaxMeshTrainer if source == "torchax" else PortMeshTrainer
    return cls(spec, weights, fsdp=kind == "fsdp")
