"""JAX legacy data parallelism: ``jax.pmap`` with ``lax.pmean`` of the gradients, as most older ports do.

Parameters and optimizer state are stacked, one copy per device; the batch is reshaped to
``[devices, batch / devices, seq]``; inside the mapped step the gradients (and the loss) are averaged with
``lax.pmean`` over the ``data`` axis, so every copy applies the same update. Kept for comparison with the
``jit`` + ``NamedSharding`` form (``mesh-dp``), which is what JAX recommends now.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import msgspec
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from twinbench.distributed import sharding_report as sr
from twinbench.distributed.mesh import AXIS
from twinbench.distributed.sharding_report import batch_leaves
from twinbench.models.weights import Canonical
from twinbench.spec import RunSpec
from twinbench.strategies.jax_jit import JaxTrainer


def pmean_grads(sync: bool = True) -> Callable[[Any, jax.Array], tuple[Any, jax.Array]]:
    """The ``reduce`` of the mapped step: gradients and loss averaged over ``data``; ``sync=False``
    (``+nosync``, anti-pattern of claim C13) leaves the gradients out of the pmean."""

    def reduce(grads: Any, loss: jax.Array) -> tuple[Any, jax.Array]:
        if sync:
            grads = jax.lax.pmean(grads, AXIS)  # the one line old ports forget (claim C13)
        return grads, jax.lax.pmean(loss, AXIS)

    return reduce


class FirstCopy:
    """A loss handle: the per-device losses are equal after pmean; ``float`` reads the first (after the loop)."""

    def __init__(self, arr: jax.Array):
        self.arr = arr

    def __float__(self) -> float:
        return float(np.asarray(self.arr.addressable_data(0)).reshape(-1)[0])


class PmapTrainer(JaxTrainer):
    def __init__(self, spec: RunSpec, weights: Canonical):
        self.n = spec.launch.devices
        if spec.launch.devices % jax.process_count():
            raise RuntimeError(f"--devices {spec.launch.devices} does not split over {jax.process_count()} processes")
        self.n_local = spec.launch.devices // jax.process_count()
        self.devices = jax.local_devices()[: self.n_local]
        if len(self.devices) < self.n_local:
            raise RuntimeError(f"--devices {spec.launch.devices}: only {len(jax.local_devices())} local device(s) visible")
        # where pmap keeps its stacked arrays: axis 0 over the local devices (jax >= 0.10 says so with a
        # NamedSharding; older versions had a PmapSharding)
        self.stacked = NamedSharding(Mesh(np.array(self.devices), (AXIS,)), P(AXIS))
        self.rows = spec.train.batch // self.n  # examples per device
        self.first_row = jax.process_index() * self.n_local * self.rows
        self.last_batch: tuple[Any, Any] | None = None
        super().__init__(spec, weights)

    def place(self, params: Any) -> tuple[Any, Any]:
        params = jax.tree.map(self._replicate, params)
        return params, jax.pmap(self.tx.init, axis_name=AXIS, devices=self.devices)(params)

    def reduce(self) -> Callable[[Any, jax.Array], tuple[Any, jax.Array]]:
        return pmean_grads(not self.spec.strategy.mods.nosync)

    def compile(self, step: Callable) -> Callable:
        return jax.pmap(step, axis_name=AXIS, devices=self.devices, donate_argnums=(0, 1))

    def _replicate(self, a: Any) -> jax.Array:
        stacked = np.broadcast_to(np.asarray(a), (self.n_local, *a.shape))
        return jax.device_put(stacked, self.stacked)

    def _local(self, a: np.ndarray) -> np.ndarray:
        mine = np.asarray(a)[self.first_row: self.first_row + self.n_local * self.rows]
        return mine.reshape(self.n_local, self.rows, *a.shape[1:])

    def step(self, x: Any, y: Any) -> Any:
        xb, yb = jax.tree.map(self._local, (x, y))
        self.last_batch = (xb, yb)
        return FirstCopy(super().step(xb, yb))

    def host_params(self) -> Any:
        """The first device's copy, without the device axis (a placed shard keeps it as [1, ...])."""
        return jax.tree.map(lambda a: np.asarray(a.addressable_data(0)).reshape(a.shape[1:]), self.params)

    def report(self) -> sr.Report:
        """Record fields; pmap keeps a full copy of every parameter and optimizer leaf on each device."""
        batch = []
        for name, host in batch_leaves(*self.last_batch) if self.last_batch else []:
            placed = jax.device_put(host, self.stacked)  # [devices, batch / devices, seq]
            batch.append(msgspec.structs.replace(sr.jax_entry(name, placed, with_layout=(name in ("x", "x.0"))),
                                                 spec="pmap: axis 0 over devices"))
        params = [_copy_entry(e) for e in sr.jax_tree_entries(self.params)]
        opt = [_copy_entry(e) for e in sr.jax_tree_entries(self.opt_state, "opt.")]
        rep = sr.build(kind="pmap", mesh=f"jax.pmap over {self.n_local} local device(s), axis "
                       f"{AXIS!r}, {jax.process_count()} process(es)", device_count=self.n, batch=batch,
                       params=params, opt_state=opt, drawn=batch[:1],
                       replicas_max_abs_diff=sr.jax_replica_diff(self.params, stacked=True))
        return sr.Report(device_count=self.n, state_bytes_per_device=rep.state_bytes_per_device, sharding=rep,
                      warnings=sr.warnings(rep))


def _copy_entry(e: sr.Entry) -> sr.Entry:
    """A stacked pmap leaf [devices, ...] reported as what it is: one full copy per device."""
    n = e.shape[0] if e.shape else 1
    return msgspec.structs.replace(e, shape=e.shape[1:], bytes=e.bytes // max(n, 1), sharded=False,
                                   spec="replicated (one pmap copy per device)")


def build(spec: RunSpec, weights: Canonical) -> PmapTrainer:
    return PmapTrainer(spec, weights)
