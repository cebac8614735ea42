"""JAX data parallelism and FSDP with ``jit`` + ``NamedSharding`` on a 1-D ``data`` mesh.

``mesh-dp``: the batch is split along the ``data`` axis, parameters and optimizer state are replicated;
XLA's SPMD partitioner inserts the all-reduce of the gradients. ``mesh-fsdp``: the same, and every
parameter and optimizer-state leaf is split along ``data`` too (its largest divisible dimension, ZeRO-3
style); inside the step the parameters are gathered for compute (``with_sharding_constraint`` to
replicated) and the gradients come back reduce-scattered to the parameters' sharding. The model is the
unchanged twin GPT: parallelism is only shardings applied from outside.

Several processes (hosts) work the same way after ``jax.distributed.initialize``: the mesh spans every
process's devices and each process feeds only its own slices of the same global batch.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from twinbench.distributed import sharding_report as sr
from twinbench.distributed.mesh import AXIS, batch_spec, data_mesh, put_global, to_host, tree_shardings
from twinbench.models import gpt_jax
from twinbench.models.weights import Canonical, jax_to_canonical
from twinbench.spec import RunSpec
from twinbench.strategies.jax_jit import make_model


def make_sharded_step(graphdef: nnx.GraphDef, tx: optax.GradientTransformation, gather: Any = None):
    """The pure step (params, opt_state, x, y) -> (params, opt_state, loss); ``gather``: shardings the
    parameters are constrained to for the forward/backward pass (FSDP: replicated), or None."""

    def train_step(params, opt_state, x, y):
        def loss_of(p):
            if gather is not None:
                p = jax.lax.with_sharding_constraint(p, gather)
            return gpt_jax.loss_fn(nnx.merge(graphdef, p), x, y)

        loss, grads = jax.value_and_grad(loss_of)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return train_step


class MeshTrainer:
    def __init__(self, spec: RunSpec, weights: Canonical, fsdp: bool):
        self.kind = "fsdp" if fsdp else "dp"
        self.mesh = data_mesh(spec.devices)
        graphdef, params = nnx.split(make_model(spec, weights), nnx.Param)
        self.graphdef = graphdef
        host = jax.tree.map(np.asarray, params)
        self.param_sh = tree_shardings(params, self.mesh, shard=fsdp)
        self.params = jax.tree.map(put_global, host, self.param_sh)
        tx = gpt_jax.make_optimizer(spec.train.lr, spec.train.weight_decay)
        self.opt_sh = tree_shardings(jax.eval_shape(tx.init, self.params), self.mesh, shard=fsdp)
        self.opt_state = jax.jit(tx.init, out_shardings=self.opt_sh)(self.params)
        # +replicate-batch (anti-pattern, claim C10): every device gets the whole batch
        self.batch_sh = NamedSharding(self.mesh, P() if "replicate-batch" in spec.modifiers else batch_spec(2))
        replicated = NamedSharding(self.mesh, P())
        gather = jax.tree.map(lambda _: replicated, self.param_sh) if fsdp else None
        self.train_step = jax.jit(make_sharded_step(graphdef, tx, gather),
                                  in_shardings=(self.param_sh, self.opt_sh, self.batch_sh, self.batch_sh),
                                  out_shardings=(self.param_sh, self.opt_sh, replicated),
                                  donate_argnums=(0, 1))
        self.last_batch: tuple[jax.Array, jax.Array] | None = None

    def step(self, x: np.ndarray, y: np.ndarray) -> Any:
        xb, yb = put_global(x, self.batch_sh), put_global(y, self.batch_sh)
        self.last_batch = (xb, yb)
        self.params, self.opt_state, loss = self.train_step(self.params, self.opt_state, xb, yb)
        return loss

    def sync(self) -> None:
        jax.block_until_ready((self.params, self.opt_state))

    def weights(self) -> Canonical:
        host = jax.tree.map(to_host, self.params)
        return jax_to_canonical(nnx.merge(self.graphdef, host))

    def report(self) -> dict[str, Any]:
        """Record fields: the sharding report, params+optimizer bytes per device, warnings."""
        batch = [sr.jax_entry(n, a, with_layout=(n == "x")) for n, a in zip("xy", self.last_batch or (), strict=False)]
        params = sr.jax_tree_entries(self.params)
        opt = sr.jax_tree_entries(self.opt_state, "opt.")
        drawn = batch[:1] + draw_largest(self.params, params) + draw_largest(self.opt_state, opt, "opt.")
        rep = sr.build(kind=self.kind, mesh=f"jax Mesh({AXIS}={self.mesh.shape[AXIS]}), "
                       f"{jax.process_count()} process(es)", device_count=self.mesh.size, batch=batch,
                       params=params, opt_state=opt, drawn=drawn,
                       replicas_max_abs_diff=sr.jax_replica_diff(self.params))
        return {"device_count": self.mesh.size, "state_bytes_per_device": rep["state_bytes_per_device"],
                "sharding": rep, "warnings": sr.warnings(rep)}


def draw_largest(tree: Any, entries: list[sr.Entry], prefix: str = "") -> list[sr.Entry]:
    """The report entry, with its device layout, of the largest array of ``tree``."""
    big = sr.largest(entries)
    if big is None:
        return []
    for path, leaf in jax.tree.flatten_with_path(tree)[0]:
        if prefix + sr.path_name(path) == big["name"]:
            return [sr.jax_entry(big["name"], leaf, with_layout=True)]
    return []


def build_dp(spec: RunSpec, weights: Canonical) -> MeshTrainer:
    return MeshTrainer(spec, weights, fsdp=False)


def build_fsdp(spec: RunSpec, weights: Canonical) -> MeshTrainer:
    return MeshTrainer(spec, weights, fsdp=True)
