"""JAX legacy data parallelism: ``jax.pmap`` with ``lax.pmean`` of the gradients, as most older ports do.

Parameters and optimizer state are stacked, one copy per device; the batch is reshaped to
``[devices, batch / devices, seq]``; inside the mapped step the gradients (and the loss) are averaged with
``lax.pmean`` over the ``data`` axis, so every copy applies the same update. Kept for comparison with the
``jit`` + ``NamedSharding`` form (``mesh-dp``), which is what JAX recommends now.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from twinbench.distributed import sharding_report as sr
from twinbench.distributed.mesh import AXIS
from twinbench.models import gpt_jax
from twinbench.models.weights import Canonical, jax_to_canonical
from twinbench.spec import RunSpec
from twinbench.strategies.jax_jit import make_model


def make_pmap_step(graphdef: nnx.GraphDef, tx: optax.GradientTransformation, sync: bool = True):
    """The mapped step; ``sync=False`` (``+nosync``, anti-pattern of claim C13) leaves out the gradient pmean."""

    def train_step(params, opt_state, x, y):
        def loss_of(p):
            return gpt_jax.loss_fn(nnx.merge(graphdef, p), x, y)

        loss, grads = jax.value_and_grad(loss_of)(params)
        if sync:
            grads = jax.lax.pmean(grads, AXIS)  # the one line old ports forget (claim C13)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, jax.lax.pmean(loss, AXIS)

    return train_step


class FirstCopy:
    """A loss handle: the per-device losses are equal after pmean; ``float`` reads the first (after the loop)."""

    def __init__(self, arr: jax.Array):
        self.arr = arr

    def __float__(self) -> float:
        return float(np.asarray(self.arr.addressable_data(0)).reshape(-1)[0])


class PmapTrainer:
    def __init__(self, spec: RunSpec, weights: Canonical):
        self.n = spec.devices
        if spec.devices % jax.process_count():
            raise RuntimeError(f"--devices {spec.devices} does not split over {jax.process_count()} processes")
        self.n_local = spec.devices // jax.process_count()
        self.devices = jax.local_devices()[: self.n_local]
        if len(self.devices) < self.n_local:
            raise RuntimeError(f"--devices {spec.devices}: only {len(jax.local_devices())} local device(s) visible")
        # where pmap keeps its stacked arrays: axis 0 over the local devices (jax >= 0.10 says so with a
        # NamedSharding; older versions had a PmapSharding)
        self.stacked = NamedSharding(Mesh(np.array(self.devices), (AXIS,)), P(AXIS))
        self.graphdef, params = nnx.split(make_model(spec, weights), nnx.Param)
        self.params = jax.tree.map(self._replicate, params)
        tx = gpt_jax.make_optimizer(spec.train.lr, spec.train.weight_decay)
        self.opt_state = jax.pmap(tx.init, devices=self.devices)(self.params)
        self.p_step = jax.pmap(make_pmap_step(self.graphdef, tx, "nosync" not in spec.modifiers), axis_name=AXIS, devices=self.devices,
                               donate_argnums=(0, 1))
        self.rows = spec.train.batch // self.n  # examples per device
        self.first_row = jax.process_index() * self.n_local * self.rows
        self.last_batch: tuple[jax.Array, jax.Array] | None = None

    def _replicate(self, a: Any) -> jax.Array:
        stacked = np.broadcast_to(np.asarray(a), (self.n_local, *a.shape))
        return jax.device_put(stacked, self.stacked)

    def _local(self, a: np.ndarray) -> np.ndarray:
        mine = a[self.first_row: self.first_row + self.n_local * self.rows]
        return mine.reshape(self.n_local, self.rows, *a.shape[1:])

    def step(self, x: np.ndarray, y: np.ndarray) -> Any:
        xb, yb = self._local(x), self._local(y)
        self.params, self.opt_state, loss = self.p_step(self.params, self.opt_state, xb, yb)
        self.last_batch = (xb, yb)
        return FirstCopy(loss)

    def sync(self) -> None:
        jax.block_until_ready((self.params, self.opt_state))

    def weights(self) -> Canonical:
        first = jax.tree.map(lambda a: np.asarray(a.addressable_data(0)), self.params)
        return jax_to_canonical(nnx.merge(self.graphdef, first))

    def report(self) -> dict[str, Any]:
        """Record fields; pmap keeps a full copy of every parameter and optimizer leaf on each device."""
        batch = []
        for name, host in zip("xy", self.last_batch or (), strict=False):
            placed = jax.device_put(host, self.stacked)  # [devices, batch / devices, seq]
            batch.append(sr.jax_entry(name, placed, with_layout=(name == "x")) | {"spec": "pmap: axis 0 over devices"})
        params = [_copy_entry(e) for e in sr.jax_tree_entries(self.params)]
        opt = [_copy_entry(e) for e in sr.jax_tree_entries(self.opt_state, "opt.")]
        rep = sr.build(kind="pmap", mesh=f"jax.pmap over {self.n_local} local device(s), axis "
                       f"{AXIS!r}, {jax.process_count()} process(es)", device_count=self.n, batch=batch,
                       params=params, opt_state=opt, drawn=batch[:1],
                       replicas_max_abs_diff=sr.jax_replica_diff(self.params, stacked=True))
        return {"device_count": self.n, "state_bytes_per_device": rep["state_bytes_per_device"],
                "sharding": rep, "warnings": sr.warnings(rep)}


def _copy_entry(e: sr.Entry) -> sr.Entry:
    """A stacked pmap leaf [devices, ...] reported as what it is: one full copy per device."""
    n = e["shape"][0] if e["shape"] else 1
    return e | {"shape": e["shape"][1:], "bytes": e["bytes"] // max(n, 1), "sharded": False,
                "spec": "replicated (one pmap copy per device)"}


def build(spec: RunSpec, weights: Canonical) -> PmapTrainer:
    return PmapTrainer(spec, weights)
