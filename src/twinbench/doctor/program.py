"""What the step's program says about itself: a Python loop unrolled into it (repeated identical runs of
equations in its jaxpr), and how it computes attention (its compiled HLO text).

Pure functions over a jaxpr and over HLO text, so the findings can be tested on synthetic input (a GPU's
HLO on a CPU machine).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from twinbench.config import SpecError
from twinbench.doctor.observed import Attention, Float64, Float64Arg
from twinbench.folder_io import open_file

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


# -- float64 ---------------------------------------------------------------------------------------------------
F64 = ("f64", "c128")
HLO_HEAD = re.compile(r"^\S.*\{\s*$")  # a computation's first line: its instructions' names are its own
HLO_DEF = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*\(?(\w+)\[([\d,]*)\]")
HLO_OPERAND = re.compile(r"(?:(\w+)\[([\d,]*)\](?:\{[^}]*\})?\s+)?%([\w.\-]+)")
HLO_PRODUCT = re.compile(r"\s(dot|convolution)\(([^)]*)\)")
GEMM_CALL = re.compile(r'custom-call\(([^)]*)\).*custom_call_target="([^"]*(?:gemm|matmul|conv)[^"]*)"', re.I)
OP_NAME = re.compile(r'op_name="([^"]*)"')


def float64(hlo: str) -> Float64 | None:
    """The step's products (dots, convolutions, a GPU's gemm/convolution calls) that compute in float64, from its
    compiled HLO text: how many of all, and their share of the products' FLOPs (a dot: 2 x its output x its
    contracted size; a convolution: 2 x its output x the kernel's size over its output features). None when
    none does. An operand's type is read where it is defined in the same computation (compiled HLO names
    operands without their types)."""
    types: dict[str, tuple[str, list[int]]] = {}
    found = Float64()
    best = -1.0
    for line in hlo.splitlines():
        if HLO_HEAD.match(line):
            types = {}
            continue
        d = HLO_DEF.match(line)
        if not d:
            continue
        dt, out = d.group(2), [int(x) for x in d.group(3).split(",") if x]
        types[d.group(1)] = (dt, out)
        m = HLO_PRODUCT.search(line)
        gemm = None if m else GEMM_CALL.search(line)
        if not (m or gemm):
            continue
        called = m.group(2) if m else gemm.group(1)  # type: ignore[union-attr]
        operands = [(t, [int(x) for x in s.split(",") if x]) if t else types.get(n, ("", []))
                    for t, s, n in HLO_OPERAND.findall(called)]
        flops = _flops(m.group(1), line, out, operands) if m else 0.0
        found.all_dots += 1
        found.all_flops += flops
        if dt in F64 or any(t in F64 for t, _ in operands):
            found.dots += 1
            found.flops += flops
            if flops > best:
                best = flops
                name = OP_NAME.search(line)
                found.largest = (f"{dt}[{','.join(map(str, out))}] {m.group(1) if m else gemm.group(2)}"
                                 + (f" ({name.group(1)})" if name else ""))
    return found if found.dots else None


def float64_jaxpr(jaxpr: Any) -> Float64 | None:
    """As :func:`float64`, from the step's jaxpr (when its compiled HLO is not read): its ``dot_general`` and
    ``conv_general_dilated`` equations, those of every sub-jaxpr included (a loop body counted once)."""
    found = Float64()
    best = -1.0

    def walk(j: Any) -> None:
        nonlocal best
        for eqn in j.eqns:
            for sub in _sub_jaxprs(eqn):
                walk(sub)
            name = eqn.primitive.name
            if name not in ("dot_general", "conv_general_dilated"):
                continue
            ins = [v.aval for v in eqn.invars[:2]]
            out = eqn.outvars[0].aval
            flops = _jaxpr_flops(name, eqn.params, ins, out)
            found.all_dots += 1
            found.all_flops += flops
            if any(str(getattr(a, "dtype", "")) in ("float64", "complex128") for a in (*ins, out)):
                found.dots += 1
                found.flops += flops
                if flops > best:
                    best = flops
                    scope = str(getattr(eqn.source_info, "name_stack", "") or "")
                    found.largest = f"{out.str_short()} {name}" + (f" ({scope})" if scope else "")

    walk(getattr(jaxpr, "jaxpr", jaxpr))
    return found if found.dots else None


def _jaxpr_flops(name: str, params: dict[str, Any], ins: list[Any], out: Any) -> float:
    try:
        if name == "dot_general":
            (lhs_c, _), _ = params["dimension_numbers"]
            return 2.0 * _size(list(out.shape)) * _size([ins[0].shape[i] for i in lhs_c])
        rhs = list(ins[1].shape)
        o = params["dimension_numbers"].rhs_spec[0]  # the kernel's output-feature dimension
        return 2.0 * _size(list(out.shape)) * _size(rhs) / max(rhs[o], 1)
    except (KeyError, AttributeError, IndexError, TypeError, ValueError):
        return 0.0


def _flops(op: str, line: str, out: list[int], operands: list[tuple[str, list[int]]]) -> float:
    """A product's FLOPs from its shapes, 0 where its operands' shapes are not known."""
    if len(operands) < 2 or not operands[0][1] or not operands[1][1]:
        return 0.0
    if op == "dot":
        c = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", line)
        lhs = operands[0][1]
        k = _size([lhs[int(i)] for i in c.group(1).split(",") if i]) if c else 1
        return 2.0 * _size(out) * k
    labels = re.search(r"dim_labels=\w+_(\w+)->", line)
    rhs = operands[1][1]
    if not labels or "o" not in labels.group(1) or len(labels.group(1)) != len(rhs):
        return 0.0
    return 2.0 * _size(out) * _size(rhs) / max(rhs[labels.group(1).index("o")], 1)


def float64_sources(found: Float64, jax: Any, fun: Any, specs: tuple[tuple, dict], step_key: str | None) -> None:
    """Where the step's float64 comes from, added to ``found``: 64-bit mode (on or not, and the line of the user's
    code that turns it on) and the step's arguments holding float64 arrays (a parameter initialised from a numpy
    array, float64 by numpy's default, is the common accident)."""
    import inspect
    import math
    import os
    import sys

    found.x64 = bool(jax.config.jax_enable_x64)
    files = [":".join(step_key.split(":")[1:-2])] if step_key and step_key.count(":") >= 3 else []
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    found.x64_line = x64_line([*files, *([main] if main else [])])
    if not found.x64_line and os.environ.get("JAX_ENABLE_X64", "").lower() in ("1", "true", "yes", "on"):
        found.x64_line = "JAX_ENABLE_X64 in the environment"
    try:
        params = inspect.signature(fun).parameters.values()
        names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        names = []
    args, kwargs = specs
    named = [(names[i] if i < len(names) else f"args[{i}]", a) for i, a in enumerate(args)] + list(kwargs.items())
    for name, tree in named:
        leaves = [(jax.tree_util.keystr(path), x) for path, x in jax.tree_util.tree_flatten_with_path(tree)[0]
                  if str(getattr(x, "dtype", "")) in ("float64", "complex128")]
        if not leaves:
            continue
        sizes = [math.prod(getattr(x, "shape", ())) * x.dtype.itemsize for _, x in leaves]
        path, x = leaves[sizes.index(max(sizes))]
        found.args.append(Float64Arg(name=name, leaves=len(leaves), bytes=int(sum(sizes)),
                                     largest=f"{path} f64[{','.join(map(str, x.shape))}]"))


X64_ON = re.compile(r"""^[^#]*(jax_enable_x64["']\s*,\s*(?!\s|False)|enable_x64\(\s*(True)?\s*\)|jax_enable_x64\s*=\s*True)""")
#: a torch script's lines that make its parameters float64, the likeliest first
TORCH_F64 = (re.compile(r"^[^#]*(\.double\(\)|set_default_dtype\(\s*torch\.(float64|double)|torch\.(float64|double)\b)"),
             re.compile(r"^[^#]*\bfrom_numpy\("))


def x64_line(files: list[str]) -> str:
    """``file:line`` of the first line in ``files`` that turns 64-bit mode on (``jax.config.update("jax_enable_x64",
    True)`` or any value but ``False``, ``jax.experimental.enable_x64()``, ``config.jax_enable_x64 = True``), or ""."""
    return first_line(files, (X64_ON,))


def first_line(files: list[str], patterns: tuple[re.Pattern[str], ...]) -> str:
    """``file:line`` of the first line of ``files`` that a pattern matches (the patterns in order), or ""."""
    texts = []
    for f in dict.fromkeys(files):
        try:  # through the one opener: a FIFO or device named as a source file is skipped, never waited on
            with open_file(Path(f).resolve(), "r") as fh:
                texts.append((f, fh.read().splitlines()))
        except (OSError, SpecError):
            continue
    for pattern in patterns:
        for f, lines in texts:
            for n, line in enumerate(lines, 1):
                if pattern.search(line):
                    return f"{f}:{n}"
    return ""
