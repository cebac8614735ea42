"""Where every array of a run lives: the sharding report stored in the record and drawn by the CLI.

A report holds, for the batch, the parameters and the optimizer state, each array's partition spec (JAX
``PartitionSpec``, PyTorch DTensor placements, or DDP replication) and its bytes per device, plus the
params+optimizer bytes one device holds (``state_bytes_per_device``). A few arrays (the batch, the largest
parameter and its optimizer moment) also keep their layout, device by device, so ``--show-sharding`` can
draw them the way ``jax.debug.visualize_array_sharding`` does: one box per block of the array, labelled
with the devices that hold it. :func:`warnings` turns what the strategy meant and what the arrays show into
the record's ``warnings`` (a replicated batch, parameters FSDP could not shard, replicas that disagree).

Framework imports are local: the parent process (CLI) draws records without importing torch or jax.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import msgspec

from twinbench.record_sections import Placement, PlacementGroup, Record, Sharding
from twinbench.report.table import fmt_bytes

Entry = Placement
Layout = list[tuple[str, list[tuple[int, int]]]]  # (device label, [(start, stop) per dimension])


def entry(name: str, shape: tuple[int, ...], dtype: str, itemsize: int, spec: str, local_shape: tuple[int, ...],
          n_devices: int, layout: Layout | None = None) -> Entry:
    """One array of the report. ``local_shape`` is the block one device holds."""
    return Placement(name=name, shape=list(shape), dtype=dtype, spec=spec, bytes=math.prod(shape) * itemsize,
                     bytes_per_device=math.prod(local_shape) * itemsize, devices=n_devices,
                     sharded=tuple(local_shape) != tuple(shape),
                     layout=None if layout is None else [(dev, [tuple(r) for r in ranges]) for dev, ranges in layout])


def batch_leaves(x: Any, y: Any) -> list[tuple[str, Any]]:
    """(name, array) of every array of a batch: ``x`` and ``y``, or ``x.0``, ``x.1``, ... for a tuple ``x``."""
    xs = [("x", x)] if not isinstance(x, (tuple, list)) else [(f"x.{i}", a) for i, a in enumerate(x)]
    return [*xs, ("y", y)]


# ------------------------------------------------------------------------------------------------- JAX
def jax_entry(name: str, arr: Any, with_layout: bool = False) -> Entry:
    """Report entry of a ``jax.Array`` (NamedSharding, PmapSharding or a single device)."""
    sharding = arr.sharding
    shape = tuple(arr.shape)
    layout = None
    if with_layout:
        layout = [(_jax_label(d), [_range(s, n) for s, n in zip(idx, shape, strict=True)])
                  for d, idx in sorted(sharding.devices_indices_map(shape).items(), key=lambda kv: kv[0].id)]
    return entry(name, shape, str(arr.dtype), arr.dtype.itemsize, _jax_spec(sharding),
                 tuple(sharding.shard_shape(shape)), len(sharding.device_set), layout)


def _jax_label(device: Any) -> str:
    return f"{device.platform.upper()} {device.id}"


def _range(s: slice, n: int) -> tuple[int, int]:
    start, stop, _ = s.indices(n)
    return start, stop


def _jax_spec(sharding: Any) -> str:
    spec = getattr(sharding, "spec", None)
    if spec is not None:
        return "P(" + ", ".join(repr(p) for p in spec) + ")"
    return type(sharding).__name__


def jax_tree_entries(tree: Any, prefix: str = "") -> list[Entry]:
    import jax

    out = []
    for path, leaf in jax.tree.flatten_with_path(tree)[0]:
        if hasattr(leaf, "sharding"):
            out.append(jax_entry(prefix + path_name(path), leaf))
    return out


def path_name(path: tuple) -> str:
    parts = []
    for k in path:
        key = getattr(k, "key", getattr(k, "idx", getattr(k, "name", None)))
        if key is not None and key != "value":
            parts.append(str(key))
    return ".".join(parts)


def jax_replica_diff(tree: Any, stacked: bool = False) -> float:
    """Largest |difference| between copies of the same block held by different devices (0.0: consistent).

    Replicated NamedShardings (mesh-dp) compare the shards that cover the same block; ``stacked``: pmap's
    arrays ``[devices, ...]`` hold one copy per device along axis 0, compared with the first.
    """
    import jax
    import numpy as np

    worst = 0.0
    for leaf in jax.tree.leaves(tree):
        if not hasattr(leaf, "addressable_shards"):
            continue
        if stacked:
            copies = [np.asarray(s.data) for s in leaf.addressable_shards]
            worst = max([worst, *(float(np.max(np.abs(c - copies[0]), initial=0.0)) for c in copies)])
            continue
        first: dict[Any, Any] = {}
        for shard in leaf.addressable_shards:
            key = tuple((s.start, s.stop) for s in shard.index)
            data = np.asarray(shard.data)
            if key in first:
                worst = max(worst, float(np.max(np.abs(data - first[key]))) if data.size else 0.0)
            else:
                first[key] = data
    return worst


# ----------------------------------------------------------------------------------------------- torch
def torch_entry(name: str, t: Any, world: int, mode: str, with_layout: bool = False,
                batch_rows: int | None = None, spec: str = "replicated") -> Entry:
    """Report entry of a torch tensor: a DTensor (FSDP2), a DDP replica, or a rank's slice of the batch.

    ``mode``: "dtensor", "replicated" (every rank holds all of it, described by ``spec``) or "batch" (rank r holds rows
    ``[r * batch_rows, (r + 1) * batch_rows)`` of the global batch; ``t`` is the local slice).
    """
    itemsize = t.element_size()
    if mode == "dtensor":
        shape = tuple(t.shape)
        placements = tuple(t.placements)
        spec = "DTensor(" + ", ".join(_placement(p) for p in placements) + ")"
        local = tuple(t.to_local().shape) if _even(shape, placements, world) else _max_local(shape, placements, world)
        blocks = [_dtensor_ranges(shape, placements, world, r) for r in range(world)]
    elif mode == "replicated":
        shape = tuple(t.shape)
        local = shape
        blocks = [[(0, n) for n in shape] for _ in range(world)]
    else:
        rows = batch_rows or t.shape[0]
        shape = (rows * world, *t.shape[1:])
        spec, local = "split dim 0 across ranks", tuple(t.shape)
        blocks = [[(r * rows, (r + 1) * rows), *[(0, n) for n in t.shape[1:]]] for r in range(world)]
    layout = [(f"rank {r}", b) for r, b in enumerate(blocks)] if with_layout else None
    return entry(name, shape, str(t.dtype).replace("torch.", ""), itemsize, spec, local, world, layout)


def _placement(p: Any) -> str:
    dim = getattr(p, "dim", None)
    return f"Shard({dim})" if dim is not None else type(p).__name__


def _chunk(n: int, world: int, r: int) -> tuple[int, int]:
    size = -(-n // world)  # torch.chunk: ceil-sized chunks, the last ones shorter or empty
    return min(r * size, n), min((r + 1) * size, n)


def _dtensor_ranges(shape: tuple[int, ...], placements: tuple, world: int, rank: int) -> list[tuple[int, int]]:
    ranges = [(0, n) for n in shape]
    for p in placements:
        dim = getattr(p, "dim", None)
        if dim is not None:
            ranges[dim] = _chunk(shape[dim], world, rank)
    return ranges


def _even(shape: tuple[int, ...], placements: tuple, world: int) -> bool:
    return all(shape[p.dim] % world == 0 for p in placements if getattr(p, "dim", None) is not None)


def _max_local(shape: tuple[int, ...], placements: tuple, world: int) -> tuple[int, ...]:
    return tuple(b - a for a, b in _dtensor_ranges(shape, placements, world, 0))


# ------------------------------------------------------------------------------------------- the report
def group(entries: list[Entry]) -> PlacementGroup:
    """Totals of a group of arrays (parameters or optimizer state) and how often each spec occurs."""
    return PlacementGroup(arrays=len(entries), bytes=sum(e.bytes for e in entries),
                          bytes_per_device=sum(e.bytes_per_device for e in entries),
                          specs=dict(Counter(e.spec for e in entries).most_common()),
                          replicated=[e.name for e in entries  # scalars (step counts) are meant to be replicated
                                      if not e.sharded and e.devices > 1 and math.prod(e.shape) > 1],
                          entries=entries)


def build(*, kind: str, mesh: str, device_count: int, batch: list[Entry], params: list[Entry],
          opt_state: list[Entry], drawn: list[Entry], replicas_max_abs_diff: float | None = None) -> Sharding:
    """The ``sharding`` section of a record. ``kind``: what the strategy means to do (dp, fsdp, pmap, ...)."""
    p, o = group(params), group(opt_state)
    return Sharding(kind=kind, mesh=mesh, device_count=device_count, batch=batch, params=p, opt_state=o,
                    state_bytes_per_device=p.bytes_per_device + o.bytes_per_device, state_bytes_total=p.bytes + o.bytes,
                    drawn=drawn, replicas_max_abs_diff=replicas_max_abs_diff)


class Report(msgspec.Struct, kw_only=True, frozen=True):
    """What a multi-device trainer's ``report()`` gives the worker for its record."""

    device_count: int  # the devices the run used
    state_bytes_per_device: int  # params + optimizer state one device holds
    sharding: Sharding
    warnings: list[str]  # :func:`warnings` of the report


def largest(entries: list[Entry]) -> Entry | None:
    return max(entries, key=lambda e: e.bytes, default=None)


def warnings(report: Sharding) -> list[str]:
    """What the arrays show against what the strategy means to do, one line each (empty: as intended)."""
    out = []
    n, kind = report.device_count, report.kind
    if n > 1:
        for b in report.batch:
            if not b.sharded:
                out.append(f"batch {b.name} {b.shape} is replicated on all {n} devices: every device "
                           "computes the whole batch (no data parallelism)")
        if kind == "fsdp":
            for label, g in (("params", report.params), ("opt_state", report.opt_state)):
                if g.replicated:
                    rep = [e for e in g.entries if e.name in set(g.replicated)]
                    share = sum(e.bytes for e in rep) / max(g.bytes, 1)
                    out.append(f"{label}: {len(rep)} of {g.arrays} arrays ({share:.1%} of the bytes) stay "
                               f"replicated (no dimension divisible by {n}), e.g. {rep[0].name} {rep[0].shape}")
    diff = report.replicas_max_abs_diff
    if diff:
        out.append(f"replicas of the same parameters differ after the run (max |diff| {diff:.3g}): gradients "
                   "were not synchronised, each device trained its own model")
    return out


# ----------------------------------------------------------------------------------------------- drawing
def draw(e: Entry, width: int = 60) -> Any:
    """A rich Table drawing one array's layout like ``jax.debug.visualize_array_sharding``.

    Rows are the blocks along dimension 0, columns the blocks along dimension 1 (arrays of rank > 2 show
    their first two dimensions; a 1-D array is one row), sized in proportion to the block sizes; each cell
    names the devices that hold the block.
    """
    from rich import box
    from rich.table import Table

    shape = e.shape or [1]
    layout = e.layout or []
    cells: dict[tuple[tuple[int, int], tuple[int, int]], list[str]] = {}
    for dev, ranges in layout:
        ranges = [tuple(r) for r in ranges] or [(0, 1)]
        rows = ranges[0] if len(shape) > 1 else (0, 1)
        cols = ranges[1] if len(shape) > 1 else ranges[0]
        cells.setdefault((rows, cols), []).append(dev)
    row_keys = sorted({k[0] for k in cells})
    col_keys = sorted({k[1] for k in cells})
    n_cols = shape[1] if len(shape) > 1 else shape[0]
    table = Table(show_header=False, show_lines=True, box=box.SQUARE, padding=(0, 1))
    for c in col_keys:
        table.add_column(justify="center", width=max(9, int(width * (c[1] - c[0]) / max(n_cols, 1))))
    n_rows = shape[0] if len(shape) > 1 else 1
    for r in row_keys:
        height = max(1, round(4 * (r[1] - r[0]) / max(n_rows, 1))) if len(row_keys) > 1 else 1
        pad = (height - 1) // 2
        row = []
        for c in col_keys:
            label = _devices_label(cells.get((r, c), []))
            row.append("\n" * pad + label + "\n" * (height - 1 - pad))
        table.add_row(*row)
    return table


def _devices_label(devs: list[str]) -> str:
    if not devs:
        return ""
    prefix = devs[0].rsplit(" ", 1)[0]
    if all(d.rsplit(" ", 1)[0] == prefix for d in devs):
        ids = [d.rsplit(" ", 1)[1] for d in devs]
        return f"{prefix} {','.join(ids)}" if len(ids) <= 8 else f"{prefix} {ids[0]}-{ids[-1]}"
    return ",".join(devs)


def render(record: Record) -> list[Any]:
    """The sharding report of one record (its ``sharding`` section, as :func:`build` made it) as rich
    renderables (a heading, a table, drawings, the record's warnings)."""
    from rich.table import Table
    from rich.text import Text

    label = f"{record.run.framework}/{record.run.strategy}"
    rep = record.sharding
    if not rep:
        return [Text(f"{label}: no sharding report (single-device strategy or failed run)", style="dim")]
    head = Text.assemble((f"{label}", "bold"), f": {rep.mesh}, {rep.device_count} device(s); params + "
                         f"optimizer state per device {fmt_bytes(rep.state_bytes_per_device)} "
                         f"of {fmt_bytes(rep.state_bytes_total)}")
    table = Table(header_style="bold", box=None, padding=(0, 2))
    for c in ("array", "shape / arrays", "partition spec", "bytes", "per device"):
        table.add_column(c, justify="left" if c in ("array", "partition spec") else "right")
    for b in rep.batch:
        table.add_row(f"batch {b.name}", "x".join(map(str, b.shape)), b.spec, fmt_bytes(b.bytes),
                      fmt_bytes(b.bytes_per_device))
    for g, title in ((rep.params, "parameters"), (rep.opt_state, "optimizer state")):
        specs = "; ".join(f"{s} ×{k}" for s, k in g.specs.items())
        table.add_row(title, f"{g.arrays} arrays", specs, fmt_bytes(g.bytes), fmt_bytes(g.bytes_per_device))
    out: list[Any] = [head, table]
    for e in rep.drawn:
        out.append(Text(f"{e.name} {e.shape} {e.spec}", style="italic"))
        out.append(draw(e))
    diff = rep.replicas_max_abs_diff
    if diff is not None:
        out.append(Text(f"replicas identical after the run: {'yes' if diff == 0 else f'no (max |diff| {diff:.3g})'}"))
    for w in record.warnings:
        out.append(Text(f"warning: {w}", style="bold red"))
    return out
