"""JAX meshes and shardings: the ``data`` mesh axis, the FSDP sharding rule (a run's processes join in backends/jax.py).

One axis, ``data``, carries both data parallelism (the batch is split along it) and FSDP (every parameter
and optimizer-state leaf is split along it too, ZeRO-3 style). Arrays are built with
``jax.make_array_from_callback``, so the same code feeds one process or many: each process supplies only
the slices its own devices hold, cut from the same deterministic global array.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "data"


def data_mesh(n: int) -> Mesh:
    """A 1-D mesh over the first ``n`` devices (of all processes) with the axis ``data``."""
    devices = jax.devices()
    if len(devices) < n:
        raise RuntimeError(f"--devices {n}: only {len(devices)} {devices[0].platform} device(s) visible")
    return Mesh(np.array(devices[:n]), (AXIS,), axis_types=(AxisType.Auto,))


def fsdp_spec(shape: tuple[int, ...], n: int) -> P:
    """Shard the largest dimension that ``n`` divides (the first of equals); replicate if none does."""
    dims = [d for d in sorted(range(len(shape)), key=lambda d: (-shape[d], d)) if shape[d] % n == 0]
    if n == 1 or not dims:
        return P()
    return P(*[AXIS if d == dims[0] else None for d in range(len(shape))])


def batch_spec(ndim: int) -> P:
    """The batch is split along its first dimension (examples), the rest replicated."""
    return P(AXIS, *[None] * (ndim - 1))


def put_global(host: np.ndarray, sharding: NamedSharding) -> jax.Array:
    """A global array from a host array every process holds: each process places only its own slices."""
    return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])


def to_host(arr: jax.Array) -> np.ndarray:
    """The whole value of a (possibly multi-process, sharded) array as one NumPy array, on every process."""
    if arr.is_fully_addressable:
        return np.asarray(arr)
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(arr, tiled=True))


def tree_shardings(tree: Any, mesh: Mesh, shard: bool) -> Any:
    """NamedShardings for every leaf: FSDP's rule if ``shard``, else replicated (``P()``)."""
    n = mesh.shape[AXIS]
    return jax.tree.map(lambda a: NamedSharding(mesh, fsdp_spec(tuple(a.shape), n) if shard else P()), tree)
