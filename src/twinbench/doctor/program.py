"""What the step's program says about itself: a Python loop unrolled into it (repeated identical runs of
equations in its jaxpr).

Pure functions over a jaxpr, so the findings can be tested on any traced function.
"""

from __future__ import annotations

from typing import Any

# sub-jaxprs inlined into the caller's program (a nested jit, a custom derivative, remat): their equations are
# part of the step's own sequence; scan/while/cond bodies are not (a loop compiled once is the fix)
INLINED = ("pjit", "jit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr",
           "remat", "checkpoint", "remat2", "custom_lin")
MIN_PERIOD = 8  # equations in one repeated unit: shorter runs are a tree_map over same-shaped leaves
MIN_COPIES = 4  # copies of the unit one after another
COMPUTE = ("dot_general:", "conv_general_dilated:")  # a loop body worth compiling once does some
MAX_EQNS = 40_000  # longer programs are not searched (the search is O(n) per candidate period)


def _sub_jaxprs(eqn: Any) -> list[Any]:
    out = []
    for v in eqn.params.values():
        j = getattr(v, "jaxpr", v)
        if hasattr(j, "eqns"):
            out.append(j)
    return out


def tokens(jaxpr: Any) -> list[str]:
    """The step's equations in program order, inlined calls flattened: primitive and output shapes."""
    out: list[str] = []

    def walk(j: Any) -> None:
        for eqn in j.eqns:
            name = eqn.primitive.name
            subs = _sub_jaxprs(eqn) if name in INLINED else []
            if subs:
                for s in subs[:1]:
                    walk(s)
                continue
            shapes = ",".join(str(v.aval) for v in eqn.outvars)
            out.append(f"{name}:{shapes}")
            if len(out) > MAX_EQNS:
                return

    walk(getattr(jaxpr, "jaxpr", jaxpr))
    return out


def find_repeat(seq: list[str]) -> dict[str, int] | None:
    """The longest run of one unit of >= MIN_PERIOD equations, a matmul or convolution among them, repeated
    back to back >= MIN_COPIES times:
    ``{"period", "copies", "start", "eqns"}``, or None. For each candidate period p, the positions where the
    sequence equals itself shifted by p; a run of r such positions is r // p + 1 copies."""
    import numpy as np

    n = len(seq)
    if n < MIN_PERIOD * MIN_COPIES or n > MAX_EQNS:
        return None
    ids: dict[str, int] = {}
    a = np.array([ids.setdefault(t, len(ids)) for t in seq], dtype=np.int32)
    best: tuple[int, int, int, int] | None = None  # (covered eqns, -period, copies, start)
    for p in range(MIN_PERIOD, n // MIN_COPIES + 1):
        eq = np.concatenate(([0], (a[:-p] == a[p:]).astype(np.int8), [0]))
        edges = np.flatnonzero(np.diff(eq))
        if not len(edges):
            continue
        runs = edges[1::2] - edges[::2]
        i = int(np.argmax(runs))
        copies = int(runs[i]) // p + 1
        if copies < MIN_COPIES:
            continue
        start = int(edges[2 * i])
        if not any(seq[j].startswith(COMPUTE) for j in range(start, start + p)):
            continue  # no matmul in the unit: a tree_map over same-shaped leaves (an optimizer), not a loop body
        cand = (copies * p, -p, copies, start)
        if best is None or cand[:2] > best[:2]:
            best = cand
    if best is None:
        return None
    return {"period": -best[1], "copies": best[2], "start": best[3], "eqns": n}
