"""What the step's program says about itself: a Python loop unrolled into it (repeated identical runs of
equations in its jaxpr), and how it computes attention (its compiled HLO text).

Pure functions over a jaxpr and over HLO text, so the findings can be tested on synthetic input (a GPU's
HLO on a CPU machine).
"""

from __future__ import annotations

import re
from typing import Any

from twinbench.doctor.observed import Attention

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


# -- attention ---------------------------------------------------------------------------------------------
FUSED = re.compile(r'custom_call_target="(__cudnn\$fmha[^"]*|__cudnn\$flash[^"]*)"')
HLO_DOT = re.compile(r"=\s*(\w+)\[([\d,]*)\][^=]*?\bdot\((.*)$")
EXP = re.compile(r"=\s*\w+\[([\d,]*)\][^=]*?\bexponential\(")
DPA_NAME = ("BTNH,BSNH->BNTS", "dot_product_attention")  # jax.nn.dot_product_attention's XLA implementation
DTYPE_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "f64": 8, "f8e4m3fn": 1, "f8e5m2": 1}


def attention(hlo: str) -> Attention | None:
    """How the compiled program computes attention, from its HLO text: ``fused`` (a cuDNN fused attention
    custom call), ``unfused`` (a softmax, i.e. an exponential, between batched dots over [..., q, k]: the
    score matrix is written to memory and read back), or None when it has no attention. For ``unfused``,
    the largest score tensor (shape, bytes) and whether it came from jax.nn.dot_product_attention."""
    fused = FUSED.findall(hlo)
    if fused:
        return Attention(kind="fused", calls=len(fused), target=fused[0])
    if "exponential(" not in hlo:
        return None
    batched = []
    for line in hlo.splitlines():
        m = HLO_DOT.search(line)
        if not m or "lhs_batch_dims={" not in line or "lhs_batch_dims={}" in line:
            continue
        dims = [int(d) for d in m.group(2).split(",") if d]
        if len(dims) >= 3 and "transpose(" not in line:  # the forward pass's dots, not their gradients
            batched.append((m.group(1), dims, line))
    if len(batched) < 2:  # attention is two: scores = q k^T, then softmax(scores) v
        return None
    # the scores: the dot whose output the softmax exponentiates (the same shape as an exponential's)
    exp_shapes = {tuple(int(d) for d in m.split(",") if d) for m in EXP.findall(hlo)}
    scores = [b for b in batched if tuple(b[1]) in exp_shapes] or batched
    dt, dims, line = max(scores, key=lambda s: _size(s[1]) * DTYPE_BYTES.get(s[0], 4))
    return Attention(kind="unfused", scores_shape=dims, dtype=dt,
                     scores_bytes=_size(dims) * DTYPE_BYTES.get(dt, 4),
                     # any of the program's batched dots named by jax.nn.dot_product_attention (the largest scores
                     # may be another one's, or a fusion's line whose name is the fusion's): the script calls it
                     dot_product_attention=any(n in b[2] for b in batched for n in DPA_NAME),
                     causal=_causal(hlo, dims[-2], dims[-1]))


def _causal(hlo: str, q: int, k: int) -> bool:
    """Whether the program masks its scores causally: a [.., q, k] boolean compared from positions (an ``iota``),
    as ``jnp.tril``, a ``where(i >= j, ...)`` or ``is_causal=True`` lower to. A padding mask compares token ids
    ([batch, k]), not positions over [q, k]."""
    shape = re.compile(rf"=\s*pred\[(?:[\d,]*,)?{q},{k}\][^=]*\bcompare\(")
    return "iota(" in hlo and any(shape.search(line) for line in hlo.splitlines())


def _size(dims: list[int]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n

