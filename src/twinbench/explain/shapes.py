"""The matmuls of two runs by shape: the largest by time in each run, matched across the runs where phase and
shape agree, each with its time, FLOP/s, share of its framework's measured peak and operand layout.

A shape is ``batch x [m,k] x [k,n]`` with the operands' layout in BLAS terms (``NN``, ``NT``: the second
operand read transposed...). Two runs' matmuls match when they are in the same phase and do the same work
(batch, k and the pair {m, n}: ``x @ w`` and ``w.T @ x.T`` match), whatever their layouts; a row whose two
layouts differ names both, since a transposed operand is a usual cause of a slow matmul.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from twinbench.explain.side import Op, ShapeRow, ShapeSide

TOP = 8


@dataclass
class Shape:
    """One run's matmul-shaped ops of one (phase, shape), summed a step (:func:`by_shape`)."""

    shape: str  # the shape's text, without its layout
    ms: float = 0.0
    raw_ms: float = 0.0  # the ops' own traced time, what the rate is over
    calls: float = 0.0
    flops: float = 0.0
    trans: dict[str, float] = field(default_factory=dict)  # layout -> its ms
    names: list[str] = field(default_factory=list)

    def layout(self) -> str:
        """Its layouts, the one with most time first (``NN/NT``)."""
        return "/".join(t for t, _ in sorted(self.trans.items(), key=lambda kv: -kv[1]))


def by_shape(ops: list[Op]) -> dict[tuple[str, tuple[int, ...]], Shape]:
    """(phase, key) -> one run's matmul-shaped ops (the op groups of :mod:`.ops`), summed."""
    out: dict[tuple[str, tuple[int, ...]], Shape] = {}
    for g in ops:
        if not g.key:
            continue
        row = out.setdefault((g.phase, tuple(g.key)), Shape(g.shape.rsplit(" ", 1)[0]))
        row.ms += g.ms
        row.raw_ms += g.raw_ms or g.ms  # an op row of an older explain.json has no raw_ms
        row.calls += g.calls
        row.flops += g.flops
        row.trans[g.trans] = row.trans.get(g.trans, 0.0) + g.ms
        if g.name not in row.names:
            row.names.append(g.name)
    return out


def _side(row: Shape | None, peak: float | None) -> ShapeSide:
    if row is None:
        return ShapeSide()
    tf = row.flops / (row.raw_ms / 1e3) / 1e12 if row.raw_ms > 0 else None  # the ops' own time
    return ShapeSide(ms=row.ms, calls=row.calls, tflops=tf, peak_share=tf / peak if tf is not None and peak else None,
                     layout=row.layout())


def table(a_ops: list[Op], b_ops: list[Op], peak_a: float | None, peak_b: float | None,
          top: int = TOP) -> list[ShapeRow]:
    """The ``top`` largest matmul shapes of each run (by time), matched: one row per (phase, shape)."""
    a, b = by_shape(a_ops), by_shape(b_ops)
    keys = [k for k, _ in sorted(a.items(), key=lambda kv: -kv[1].ms)[:top]]
    keys += [k for k, _ in sorted(b.items(), key=lambda kv: -kv[1].ms)[:top] if k not in keys]
    rows = []
    for k in keys:
        ra, rb = a.get(k), b.get(k)
        sa, sb = _side(ra, peak_a), _side(rb, peak_b)
        either = ra or rb
        rows.append(ShapeRow(phase=k[0], key=list(k[1]), shape=either.shape if either else "",
                             matched=ra is not None and rb is not None, a=sa, b=sb, diff_ms=sb.ms - sa.ms))
    rows.sort(key=lambda r: -max(r.a.ms, r.b.ms))
    return rows


def line(row: ShapeRow, a_name: str, b_name: str) -> str:
    """``backward [1024,256]x[256,1024]: torch/eager 1.9 ms NN (71% of peak), jax/jit 3.4 ms NT (40%)``."""
    def side(name: str, s: ShapeSide) -> str:
        if not s.ms:
            return f"{name} -"
        share = f", {s.peak_share:.0%} of peak" if s.peak_share is not None else ""
        tf = f"{s.tflops * 1e3:.0f} GFLOP/s{share}" if s.tflops else ""
        return f"{name} {s.ms:.2f} ms {s.layout} ({tf})"

    return f"{row.phase} {row.shape}: {side(a_name, row.a)}, {side(b_name, row.b)}"
