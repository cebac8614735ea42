"""A user's model on a JAX mesh of several devices: ``torchax-mesh-dp``, ``torchax-mesh-fsdp``, ``port-mesh-dp``,
``port-mesh-fsdp``.

The JAX side of a user model (:mod:`twinbench.strategies.jax_user`: the torch module through torchax, or the
user's own port) is a pure ``loss_of(params, x, y)`` over a parameter pytree; here it runs in the twins' mesh
step (:class:`twinbench.strategies.jax_mesh.MeshTrainer`): the batch split along the ``data`` axis of a
``jax.sharding.Mesh``, the parameters and Optax state replicated (``-mesh-dp``) or each leaf sharded on its
largest dimension the device count divides (``-mesh-fsdp``, the twins' rule :func:`~twinbench.distributed.mesh.fsdp_spec`),
gathered for compute inside the step and the gradients reduce-scattered back by XLA. torchax's buffers
(integer ids, masks: constants of the step, never trained) are replicated on the mesh. On the CPU the devices
are JAX host-platform devices (``JAX_NUM_CPU_DEVICES``, set by the worker for ``--devices N``).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from twinbench.byo import family as fam
from twinbench.distributed.mesh import put_global, to_host
from twinbench.spec import RunSpec
from twinbench.strategies.jax_jit import make_train_step
from twinbench.strategies.jax_mesh import MeshTrainer
from twinbench.strategies.jax_user import flat_weights, port_loss, tied_names, torch_layout, torchax_loss

#: The user-model mesh bases: name -> (source of the JAX loss, FSDP or not).
BASES = {"torchax-mesh-dp": ("torchax", False), "torchax-mesh-fsdp": ("torchax", True),
         "port-mesh-dp": ("port", False), "port-mesh-fsdp": ("port", True)}


class UserMeshTrainer(MeshTrainer):
    """The twins' mesh step over the user's ``loss_of`` (torchax or the port) instead of an NNX twin."""

    def __init__(self, spec: RunSpec, weights: dict[str, np.ndarray]):
        source, fsdp = BASES[spec.base_strategy]
        self.spec, self.source = spec, source
        self.init_mesh(spec, fsdp)
        self.tx = fam.jax_optimizer(spec.train.lr, spec.train.weight_decay)
        if source == "torchax":
            def replicate(tree: Any) -> Any:
                return jax.tree.map(lambda a: put_global(np.asarray(a), self.replicated), tree)

            params, self.loss_of, module = torchax_loss(spec, weights, place_buffers=replicate)
            self.alias = tied_names(module)
            self.initial = {k: np.asarray(v) for k, v in weights.items()}
        else:
            params, self.loss_of = port_loss(spec, weights)
        self.params, self.opt_state = self.place(params)
        self.train_step = self.compile(make_train_step(self.make_loss(), self.tx))

    def weights(self) -> dict[str, np.ndarray]:
        """torchax: the module's ``state_dict`` layout (torch names); port: the port's pytree, flattened."""
        if self.source == "torchax":
            return torch_layout(self.params, self.alias, self.initial, to_host)
        return flat_weights(self.params, to_host)

    def predict(self, x: Any) -> np.ndarray:
        raise NotImplementedError("a user model has no prediction head twinbench knows")


def build(spec: RunSpec, weights: dict[str, np.ndarray]) -> UserMeshTrainer:
    return UserMeshTrainer(spec, weights)
