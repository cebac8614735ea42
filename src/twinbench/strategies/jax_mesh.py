"""JAX data parallelism and FSDP with ``jit`` + ``NamedSharding`` on a 1-D ``data`` mesh.

``mesh-dp``: the batch is split along the ``data`` axis, parameters and optimizer state are replicated;
XLA's SPMD partitioner inserts the all-reduce of the gradients. ``mesh-fsdp``: the same, and every
parameter and optimizer-state leaf is split along ``data`` too (its largest divisible dimension, ZeRO-3
style); inside the step the parameters are gathered for compute (``with_sharding_constraint`` to
replicated) and the gradients come back reduce-scattered to the parameters' sharding. The model is the
unchanged twin of any family: parallelism is only shardings applied from outside.

Several processes (hosts) work the same way after ``jax.distributed.initialize``: the mesh spans every
process's devices and each process feeds only its own slices of the same global batch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from twinbench.distributed import sharding_report as sr
from twinbench.distributed.mesh import AXIS, batch_spec, data_mesh, put_global, to_host, tree_shardings
from twinbench.distributed.sharding_report import batch_leaves
from twinbench.models.weights import Canonical
from twinbench.spec import RunSpec
from twinbench.strategies.jax_jit import JaxTrainer, LossOf


class MeshTrainer(JaxTrainer):
    """The jit step of :class:`JaxTrainer` with shardings on a 1-D ``data`` mesh (FSDP: parameters gathered
    for compute by a sharding constraint, gradients reduce-scattered back by XLA)."""

    def __init__(self, spec: RunSpec, weights: Canonical, fsdp: bool):
        self.init_mesh(spec, fsdp)
        super().__init__(spec, weights)

    def init_mesh(self, spec: RunSpec, fsdp: bool) -> None:
        """The mesh of ``spec.launch.devices`` and the sharding choice, before any parameter is placed."""
        self.kind = "fsdp" if fsdp else "dp"
        self.fsdp = fsdp
        self.mesh = data_mesh(spec.launch.devices)
        self.replicated = NamedSharding(self.mesh, P())
        self.last_batch: tuple[Any, Any] | None = None

    def place(self, params: Any) -> tuple[Any, Any]:
        host = jax.tree.map(np.asarray, params)
        self.param_sh = tree_shardings(params, self.mesh, shard=self.fsdp)
        params = jax.tree.map(put_global, host, self.param_sh)
        self.opt_sh = tree_shardings(jax.eval_shape(self.tx.init, params), self.mesh, shard=self.fsdp)
        return params, jax.jit(self.tx.init, out_shardings=self.opt_sh)(params)

    def make_loss(self) -> LossOf:
        if not self.fsdp:
            return self.loss_of
        gather, loss_of = jax.tree.map(lambda _: self.replicated, self.param_sh), self.loss_of
        return lambda p, x, y: loss_of(jax.lax.with_sharding_constraint(p, gather), x, y)

    def compile(self, step: Callable) -> Callable:
        self._step = step  # jitted at the first batch, when the batch's structure (array or tuple) is known
        return self._first_call

    def batch_sharding(self, a: Any) -> NamedSharding:
        # +replicate-batch (anti-pattern, claim C10): every device gets the whole batch
        return self.replicated if self.spec.strategy.mods.replicate_batch else NamedSharding(self.mesh, batch_spec(a.ndim))

    def _first_call(self, params: Any, opt_state: Any, x: Any, y: Any) -> Any:
        x_sh, y_sh = jax.tree.map(self.batch_sharding, (x, y))
        self.train_step = jax.jit(self._step, in_shardings=(self.param_sh, self.opt_sh, x_sh, y_sh),
                                  out_shardings=(self.param_sh, self.opt_sh, self.replicated), donate_argnums=(0, 1))
        return self.train_step(params, opt_state, x, y)

    def step(self, x: Any, y: Any) -> Any:
        xb, yb = jax.tree.map(lambda a: put_global(np.asarray(a), self.batch_sharding(a)), (x, y))
        self.last_batch = (xb, yb)
        return super().step(xb, yb)

    def host_params(self) -> Any:
        return jax.tree.map(to_host, self.params)

    def place_buffers(self, tree: Any) -> Any:
        return jax.tree.map(lambda a: put_global(np.asarray(a), self.replicated), tree)

    def report(self) -> sr.Report:
        """Record fields: the sharding report, params+optimizer bytes per device, warnings."""
        leaves = batch_leaves(*self.last_batch) if self.last_batch else []
        batch = [sr.jax_entry(n, a, with_layout=(n in ("x", "x.0"))) for n, a in leaves]
        params = sr.jax_tree_entries(self.params)
        opt = sr.jax_tree_entries(self.opt_state, "opt.")
        drawn = batch[:1] + draw_largest(self.params, params) + draw_largest(self.opt_state, opt, "opt.")
        rep = sr.build(kind=self.kind, mesh=f"jax Mesh({AXIS}={self.mesh.shape[AXIS]}), "
                       f"{jax.process_count()} process(es)", device_count=self.mesh.size, batch=batch,
                       params=params, opt_state=opt, drawn=drawn,
                       replicas_max_abs_diff=sr.jax_replica_diff(self.params))
        return sr.Report(device_count=self.mesh.size, state_bytes_per_device=rep.state_bytes_per_device, sharding=rep,
                      warnings=sr.warnings(rep))


def draw_largest(tree: Any, entries: list[sr.Entry], prefix: str = "") -> list[sr.Entry]:
    """The report entry, with its device layout, of the largest array of ``tree``."""
    big = sr.largest(entries)
    if big is None:
        return []
    for path, leaf in jax.tree.flatten_with_path(tree)[0]:
        if prefix + sr.path_name(path) == big.name:
            return [sr.jax_entry(big.name, leaf, with_layout=True)]
    return []


def build_dp(spec: RunSpec, weights: Canonical) -> MeshTrainer:
    return MeshTrainer(spec, weights, fsdp=False)


def build_fsdp(spec: RunSpec, weights: Canonical) -> MeshTrainer:
    return MeshTrainer(spec, weights, fsdp=True)
