"""The matmuls of two runs by shape: the largest by time in each run, matched across the runs where phase and
shape agree, each with its time, FLOP/s, share of its framework's measured peak and operand layout.

A shape is ``batch x [m,k] x [k,n]`` with the operands' layout in BLAS terms (``NN``, ``NT``: the second
operand read transposed...). Two runs' matmuls match when they are in the same phase and do the same work
(batch, k and the pair {m, n}: ``x @ w`` and ``w.T @ x.T`` match), whatever their layouts; a row whose two
layouts differ names both, since a transposed operand is a usual cause of a slow matmul.
"""

from __future__ import annotations

from typing import Any

TOP = 8


def by_shape(ops: list[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """(phase, key) -> ms, calls, flops, layouts, shape text, names, of one run's matmul-shaped ops (the
    ``OpGroup.to_dict`` rows of :mod:`.ops`)."""
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for g in ops:
        if not g.get("key"):
            continue
        row = out.setdefault((g["phase"], tuple(g["key"])), {"ms": 0.0, "raw_ms": 0.0, "calls": 0.0, "flops": 0.0, "trans": {},
                                                              "shape": g["shape"].rsplit(" ", 1)[0], "names": []})
        row["ms"] += g["ms"]
        row["raw_ms"] += g.get("raw_ms", g["ms"])
        row["calls"] += g["calls"]
        row["flops"] += g["flops"]
        row["trans"][g["trans"]] = row["trans"].get(g["trans"], 0.0) + g["ms"]
        if g["name"] not in row["names"]:
            row["names"].append(g["name"])
    return out


def _layout(row: dict[str, Any] | None) -> str:
    if not row:
        return ""
    return "/".join(t for t, _ in sorted(row["trans"].items(), key=lambda kv: -kv[1]))


def _side(row: dict[str, Any] | None, peak: float | None) -> dict[str, Any]:
    if not row:
        return {"ms": 0.0, "calls": 0.0, "tflops": None, "peak_share": None, "layout": ""}
    tf = row["flops"] / (row["raw_ms"] / 1e3) / 1e12 if row["raw_ms"] > 0 else None  # the ops' own time
    return {"ms": row["ms"], "calls": row["calls"], "tflops": tf,
            "peak_share": tf / peak if tf is not None and peak else None, "layout": _layout(row)}


def table(a_ops: list[dict[str, Any]], b_ops: list[dict[str, Any]], peak_a: float | None, peak_b: float | None,
          top: int = TOP) -> list[dict[str, Any]]:
    """The ``top`` largest matmul shapes of each run (by time), matched: one row per (phase, shape)."""
    a, b = by_shape(a_ops), by_shape(b_ops)
    keys = [k for k, _ in sorted(a.items(), key=lambda kv: -kv[1]["ms"])[:top]]
    keys += [k for k, _ in sorted(b.items(), key=lambda kv: -kv[1]["ms"])[:top] if k not in keys]
    rows = []
    for k in keys:
        ra, rb = a.get(k), b.get(k)
        sa, sb = _side(ra, peak_a), _side(rb, peak_b)
        rows.append({"phase": k[0], "key": list(k[1]), "shape": (ra or rb or {}).get("shape", ""),
                     "matched": bool(ra and rb), "a": sa, "b": sb, "diff_ms": sb["ms"] - sa["ms"]})
    rows.sort(key=lambda r: -max(r["a"]["ms"], r["b"]["ms"]))
    return rows


def line(row: dict[str, Any], a_name: str, b_name: str) -> str:
    """``backward [1024,256]x[256,1024]: torch/eager 1.9 ms NN (71% of peak), jax/jit 3.4 ms NT (40%)``."""
    def side(name: str, s: dict[str, Any]) -> str:
        if not s["ms"]:
            return f"{name} -"
        share = f", {s['peak_share']:.0%} of peak" if s["peak_share"] is not None else ""
        tf = f"{s['tflops'] * 1e3:.0f} GFLOP/s{share}" if s["tflops"] else ""
        return f"{name} {s['ms']:.2f} ms {s['layout']} ({tf})"

    return f"{row['phase']} {row['shape']}: {side(a_name, row['a'])}, {side(b_name, row['b'])}"
