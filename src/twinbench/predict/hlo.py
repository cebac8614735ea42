"""A step's ops from its HLO *before* optimization, fused the way a TPU/GPU compiler would fuse them.

Why before optimization: the program compiled here (XLA:CPU) is fused for a CPU, not for the target, so its
fusions are not the target's. The unoptimized HLO (``jax.jit(f).lower(...).as_text(dialect="hlo")``) is the
same on every backend; this module fuses it with the rules XLA:TPU and XLA:GPU share:

- a ``dot``/``convolution`` is its own kernel (matmul): FLOPs = 2 x output elements x contracted size, bytes =
  operands + result;
- element-wise ops, converts, transposes, slices and the like join their element-wise producers into one
  fused kernel; a ``reduce`` takes its producers in and ends its kernel (its result is materialized);
  broadcasts, constants and iotas are re-computed inside each consumer (never materialized);
- a fused kernel's bytes are its distinct inputs from outside (each once) plus its results used outside
  (each once); gathers, scatters, sorts and custom calls are their own kernel (operands + result).

Each kernel also carries its vector work (``Op.vector_ops``: one per element of every arithmetic op, a reduction's
per input element). XLA:TPU does not write an element-wise result that only products read: it recomputes it inside
every product that reads it (an exact GELU's polynomial, once in the forward product and once in the weight
gradient's), so with the large fusions a product carries the vector work of its operands' element-wise producers,
back to the nearest written tensor (a product's, a reduction's, or one a reduction's input is computed from), and
the fused kernel the rest. A branchy producer (an erf's polynomial has a ``compare``) is the exception where its
leading dimension is longer than XLA:TPU can keep the branch outcomes as bits (:data:`PACKED_ROWS`): BERT's GELU at
batch 64 is computed once, by the kernel that makes it, and written. With the acyclic fusions each kernel's result is written once and read by its consumers: it carries its own.

``call`` ops are inlined; a ``while`` body's ops run ``trip count`` times (the condition's compare constant).
The result is an estimate: XLA sometimes splits a chain (softmax: a max pass, then an exp-sum-normalize pass,
modelled here) or duplicates a cheap producer into two consumers (modelled as one read).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from twinbench.hlo_text import Instr, Module, conv_flops, parse
from twinbench.predict.roofline import Op

MATMUL = {"dot", "convolution"}
#: re-computed in every consumer, never a kernel or a materialized tensor of their own
GENERATORS = {"constant", "iota", "broadcast"}
#: no data moved: names, tuples, the program's inputs
FREE = {"parameter", "get-tuple-element", "tuple", "bitcast", "after-all", "partition-id", "replica-id",
        "opt-barrier", "optimization-barrier"}
REDUCE = {"reduce", "reduce-window"}
#: read only the part they take of their first operand (a layer's weights from a stacked [layers, ...] array)
SLICES = {"slice", "dynamic-slice"}
#: XLA:TPU recomputes a branchy element-wise cone (one with a ``compare``: an exact GELU's erf polynomial) inside
#: every product that reads it only where it can keep the branch outcomes as bits along the leading dimension, one
#: 32-bit word per column (a ``reduce`` with ``or`` into ``u16``/``u32``): at most this many rows. With more, it
#: computes the cone once and writes it (read from the steps libtpu compiles for a v5e: docs/predict.md)
PACKED_ROWS = 32
#: their own kernel, bytes = operands + result
OPAQUE = {"gather", "scatter", "sort", "custom-call", "rng", "rng-bit-generator", "rng-get-and-update-state",
          "select-and-scatter", "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
          "fft", "cholesky", "triangular-solve", "infeed", "outfeed", "send", "recv", "dynamic-update-slice",
          "conditional", "top-k"}


def _attr(attrs: str, key: str) -> str | None:
    m = re.search(rf"\b{key}=%?([\w.\-]+)", attrs)
    return m.group(1) if m else None


def _literal(ins: Instr) -> int | None:
    """The integer in ``parameter(N)`` / a scalar ``constant(N)``."""
    try:
        return int(ins.operands[0]) if ins.operands else None
    except ValueError:
        return None


def _while_trips(mod: Module, cond: str | None, attrs: str) -> int:
    """A loop's trip count: XLA's ``known_trip_count``, else the largest integer constant of its condition."""
    m = re.search(r'known_trip_count[^0-9]*([0-9]+)', attrs)
    if m:
        return int(m.group(1))
    values = [_literal(i) for i in mod.computations.get(cond or "", []) if i.opcode == "constant"]
    return max((v for v in values if v is not None), default=1)


@dataclass
class Flat:
    """The entry's instructions with ``call`` inlined, names unique, and a run count per instruction."""

    instrs: list[Instr] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    outputs: set[str] = field(default_factory=set)

    @functools.cached_property
    def stage(self) -> dict[str, int]:
        """Each op's stage (:func:`stages`), computed once: both fusions and both memory bounds read it."""
        return stages(self)


def flatten(mod: Module) -> Flat:
    """Inline the entry's calls (and loop bodies, each op counted ``trip count`` times)."""
    flat = Flat()

    def walk(comp: str, prefix: str, args: list[str] | None, count: int) -> str:
        alias: dict[str, str] = {}
        root = ""
        for ins in mod.computations[comp]:
            ops = [alias.get(o, prefix + o) for o in ins.operands]
            if ins.opcode == "parameter" and args is not None:
                idx = _literal(ins) or 0
                alias[ins.name] = root = args[idx] if idx < len(args) else prefix + ins.name
                continue
            callee = _attr(ins.attrs, "to_apply")
            if ins.opcode == "call" and callee in mod.computations:
                alias[ins.name] = root = walk(callee, f"{prefix}{ins.name}/", ops, count)
                continue
            if ins.opcode == "while":
                body, cond = _attr(ins.attrs, "body"), _attr(ins.attrs, "condition")
                if body in mod.computations:
                    walk(body, f"{prefix}{ins.name}/", ops[:1], count * _while_trips(mod, cond, ins.attrs))
                new = replace(ins, name=prefix + ins.name, opcode="tuple", shapes=[], operands=ops, attrs="",
                              layouts=[])  # its state: the body's results
            else:
                new = replace(ins, name=prefix + ins.name, operands=ops)
            flat.instrs.append(new)
            flat.counts[new.name] = count
            root = new.name
        return root

    root = walk(mod.entry, "", None, 1)
    top = next((i for i in flat.instrs if i.name == root), None)
    flat.outputs = set(top.operands) if top is not None and top.opcode == "tuple" else {root}
    return flat


def _shape_text(ins: Instr) -> str:
    return ",".join(f"{dt}[{','.join(map(str, dims))}]" for dt, dims in ins.shapes)


def _dot_flops(ins: Instr, by: dict[str, Instr]) -> float:
    """2 x result elements x contracted size (``dot``), or x kernel elements per output feature (convolution)."""
    out = math.prod(ins.shapes[0][1]) if ins.shapes else 0
    lhs = by.get(ins.operands[0]) if ins.operands else None
    if ins.opcode == "dot":
        m = re.search(r"lhs_contracting_dims=\{([0-9,]*)\}", ins.attrs)
        dims = [int(d) for d in m.group(1).split(",") if d] if m else []
        k = math.prod(lhs.shapes[0][1][d] for d in dims) if lhs is not None and lhs.shapes else 1
        return 2.0 * out * k
    flops = conv_flops(ins, by)
    return 2.0 * out if flops is None else flops


def _source_bytes(name: str, by: dict[str, Instr]) -> float:
    """Bytes a consumer reads for operand ``name``: a broadcast/constant/iota is re-computed in the consumer,
    so it costs its own source's bytes (a constant or iota: none)."""
    seen = 0
    while name in by and by[name].opcode in GENERATORS and seen < 64:
        ins = by[name]
        if ins.opcode != "broadcast" or not ins.operands:
            return 0.0
        name, seen = ins.operands[0], seen + 1
    return by[name].nbytes if name in by else 0.0


#: the opcodes that name a fused kernel in the table of dominant ops (data movement names it otherwise)
_TELLING = ("reduce", "exponential", "log", "tanh", "rsqrt", "sqrt", "divide", "select", "compare", "maximum",
            "multiply", "add", "subtract", "convert", "transpose")


def _what(members: list[Instr]) -> str:
    """A fused kernel's name: its telling opcodes (reductions and transcendentals first), at most four."""
    present = {m.opcode for m in members}
    named = [op for op in _TELLING if op in present][:4]
    return "+".join(named) or members[0].opcode


#: element-wise arithmetic: vector work, one op an element (a transcendental too: it runs on its own unit, beside)
VECTOR = {"add", "subtract", "multiply", "divide", "maximum", "minimum", "compare", "select", "and", "or", "xor",
          "not", "negate", "abs", "exponential", "exponential-minus-one", "log", "log-plus-one", "logistic", "tanh",
          "rsqrt", "sqrt", "cbrt", "power", "convert", "clamp", "sign", "floor", "ceil", "round-nearest-even",
          "round-nearest-afz", "erf", "atan2", "remainder", "is-finite", "cosine", "sine", "shift-left",
          "shift-right-logical", "shift-right-arithmetic", "popcnt", "reduce", "reduce-window"}


def _vector_ops(ins: Instr, by: dict[str, Instr]) -> float:
    """An op's vector work: its result's elements (a reduction: its input's), if it computes (``VECTOR``)."""
    if ins.opcode not in VECTOR:
        return 0.0
    source = by.get(ins.operands[0]) if ins.opcode in REDUCE and ins.operands else ins
    return float(math.prod(source.shapes[0][1])) if source is not None and source.shapes else 0.0


def _fusible(ins: Instr) -> bool:
    return ins.opcode not in MATMUL | FREE | OPAQUE | {"while", "call"}


def stages(flat: Flat) -> dict[str, int]:
    """Each op's stage: the products, reductions and opaque ops on its longest path from the program's inputs
    (ops of one stage lie between the same kernels that must write their results)."""
    by = {i.name: i for i in flat.instrs}
    stage: dict[str, int] = {}
    for ins in flat.instrs:
        stage[ins.name] = max((stage.get(o, 0) + (0 if _fusible(by[o]) and by[o].opcode not in REDUCE else 1)
                               for o in ins.operands if o in by), default=0)
    return stage


def regions(flat: Flat, acyclic: bool = False) -> dict[str, str]:
    """Each fusible op's kernel (a representative op's name), by the rules in the module's docstring.

    ``acyclic``: XLA:GPU's smaller fusions: two ops fuse only if no matmul, reduction or opaque op lies between
    them on any path (a kernel with a path through another kernel would be a cycle), so a softmax is three
    kernels and a forward op never shares a kernel with the backward op that reuses its input. Without it
    (XLA:TPU's larger multi-output fusions, producers duplicated into their consumers), element-wise ops
    join every element-wise neighbour."""
    by = {i.name: i for i in flat.instrs}
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.get(x, x) != x:
            parent[x] = parent.get(parent[x], parent[x])
            x = parent[x]
        return x

    stage = flat.stage
    # join every element-wise op (or reduction) with its element-wise producers (of its stage if acyclic);
    # generators stay out
    for ins in flat.instrs:
        if not _fusible(ins) or ins.opcode in GENERATORS:
            continue
        parent.setdefault(ins.name, ins.name)
        for o in ins.operands:
            p = by.get(o)
            if p is not None and _fusible(p) and p.opcode not in GENERATORS | REDUCE and (
                    not acyclic or stage[p.name] == stage[ins.name]):
                parent.setdefault(p.name, p.name)
                x, y = find(ins.name), find(p.name)
                if x != y:
                    parent[x] = y
    return {name: find(name) for name in parent}


def fused_ops(flat: Flat, acyclic: bool = False, on_chip: Callable[[Instr], bool] | None = None) -> list[Op]:
    """The step's kernels as a TPU (or with ``acyclic``, a GPU) compiler would fuse them (:func:`regions`);
    ``on_chip`` (as in :func:`materialized_peak`) marks the kernels that read or write such a tensor
    (``Op.scores``), whatever their own shapes: a softmax's row sums read the scores and write ``[b, h, t]``."""
    by = {i.name: i for i in flat.instrs}
    touches = on_chip or (lambda ins: False)

    def scores(names: list[str]) -> bool:
        return any(n in by and touches(by[n]) for n in names)

    users: dict[str, list[str]] = {}
    for ins in flat.instrs:
        for o in ins.operands:
            users.setdefault(o, []).append(ins.name)
    stage = flat.stage
    region = regions(flat, acyclic)
    groups: dict[str, list[Instr]] = {}
    for ins in flat.instrs:
        if ins.name in region:
            groups.setdefault(region[ins.name], []).append(ins)
    # a reduction's operand is written (its kernel writes it beside its result: a gradient its bias sums)
    read_by_reduce = {o for ins in flat.instrs if ins.opcode in REDUCE for o in ins.operands}

    def cone(starts: list[str], into: set[str], within: dict[str, str] | set[str], same_stage: bool) -> None:
        """Add to ``into`` the element-wise ops of ``within`` computed to produce ``starts``. A product's
        (``same_stage``) recomputes back to the nearest written tensor: one a product, reduction or other kernel
        between made (a residual stream, a gradient summed over layers), or one a reduction reads."""
        todo = [n for n in starts if n in within and by[n].opcode not in GENERATORS]
        while todo:
            n = todo.pop()
            if n in into:
                continue
            into.add(n)
            if same_stage and by[n].opcode in REDUCE:
                continue
            todo += [o for o in by[n].operands if o in within and by[o].opcode not in GENERATORS and (
                not same_stage or (stage[o] == stage[n] and o not in read_by_reduce and by[o].opcode not in REDUCE))]

    def work(names: set[str]) -> float:
        return sum(_vector_ops(by[n], by) for n in names)

    ops: list[Op] = []
    stored: set[str] = set()  # products' operands written by their fused kernel, not recomputed (PACKED_ROWS)
    for ins in flat.instrs:
        count = flat.counts.get(ins.name, 1)
        if ins.opcode in MATMUL:
            dt = by[ins.operands[0]].shapes[0][0] if ins.operands and ins.operands[0] in by and \
                by[ins.operands[0]].shapes else "f32"
            reads = sum(_source_bytes(o, by) for o in ins.operands)
            shapes = "x".join(_shape_text(by[o]) for o in ins.operands if o in by)
            recomputed: set[str] = set()
            for o in ins.operands if not acyclic else ():  # its operands' element-wise producers, recomputed inside it
                if o in read_by_reduce:
                    continue
                mine: set[str] = set()
                cone([o], mine, region, same_stage=True)
                if _branch_stored(mine, by):
                    stored.add(o)  # computed once by the kernel that makes it, and read
                else:
                    recomputed |= mine
            ops.append(Op(ins.name, "matmul", _dot_flops(ins, by), reads + ins.nbytes, dt, 1, count,
                          f"matmul {shapes} -> {_shape_text(ins)}", scores([ins.name, *ins.operands]),
                          vector_ops=work(recomputed)))
        elif ins.opcode in OPAQUE:
            reads = sum(_source_bytes(o, by) for o in ins.operands)
            if ins.opcode == "dynamic-update-slice" and len(ins.operands) > 1:  # in place: the update only
                reads = 2 * _source_bytes(ins.operands[1], by)
                ops.append(Op(ins.name, "other", 0.0, reads, "", 1, count, f"{ins.opcode} {_shape_text(ins)}",
                              scores([ins.name, *ins.operands])))
                continue
            ops.append(Op(ins.name, "other", 0.0, reads + ins.nbytes, "", 1, count,
                          f"{ins.opcode} {_shape_text(ins)}", scores([ins.name, *ins.operands])))
    for members in groups.values():
        if all(m.opcode == "reshape" for m in members):
            continue  # a reshape alone is a bitcast: no kernel, no bytes moved
        inside = {m.name for m in members}
        read: dict[str, float] = {}  # each outside input once; a slice reads only what it takes
        for m in members:
            for n, o in enumerate(m.operands):
                if o not in inside:
                    part = m.nbytes if m.opcode in SLICES and n == 0 else _source_bytes(o, by)
                    read[o] = max(read.get(o, 0.0), part)
        reads = sum(read.values())
        writes = sum(m.nbytes for m in members
                     if m.name in flat.outputs or any(u not in inside for u in users.get(m.name, [])))
        reductions = sum(1 for m in members if m.opcode in REDUCE)
        biggest = max(members, key=lambda m: m.nbytes)
        label = f"fused {_what(members)} {_shape_text(biggest)}"
        if acyclic:
            vector = work(inside)
        else:  # what it writes (its reductions, what they read, what an op other than a product reads) and their inputs
            computed: set[str] = set()
            cone([m.name for m in members if m.opcode in REDUCE or m.name in read_by_reduce
                  or m.name in flat.outputs or m.name in stored
                  or any(u not in inside and by[u].opcode not in MATMUL for u in users.get(m.name, []))], computed,
                 inside, same_stage=False)
            vector = work(computed)
        ops.append(Op(members[0].name, "fused", 0.0, reads + writes, "", max(1, reductions),
                      flat.counts.get(members[0].name, 1), label, scores([*inside, *read]), vector_ops=vector))
    return ops


def _branch_stored(cone: set[str], by: dict[str, Instr]) -> bool:
    """Whether XLA:TPU writes a product's operand rather than recompute its element-wise ``cone`` in the product: a
    cone with a branch (``compare``) whose leading dimension is too long to keep its outcomes as bits
    (:data:`PACKED_ROWS`)."""
    return any(by[n].opcode == "compare" and by[n].shapes and by[n].shapes[0][1]
               and by[n].shapes[0][1][0] > PACKED_ROWS for n in cone)


#: element-wise ops XLA duplicates into each consumer rather than write out (not among its "expensive" ops:
#: divides and transcendentals are); ``reshape`` is a bitcast
CHEAP = {"convert", "select", "compare", "add", "subtract", "multiply", "negate", "maximum", "minimum", "and", "or",
         "not", "abs", "clamp", "copy", "reshape", "bitcast-convert"}


def materialized_peak(flat: Flat, acyclic: bool, on_chip: Callable[[Instr], bool] | None = None) -> float:
    """Peak bytes live at once in program order: the inputs throughout, and each materialized tensor (a
    matmul's, a reduction's, an opaque op's, or an element-wise result used outside its kernel) from its
    producer to its last use. With the large kernels (not ``acyclic``) few tensors are materialized: a lower
    bound. With the acyclic ones every tensor the backward pass reuses is kept, except what a cheap
    element-wise op (``CHEAP``) makes: XLA recomputes that in its consumers, so its inputs are kept until then
    instead (the loss's fp32 copy of the logits is recomputed from the bf16 logits): the upper bound.
    ``on_chip``: the tensors a fused kernel the target runs in their place keeps in on-chip memory (a fused
    attention's scores), never materialized."""
    region = regions(flat, acyclic)
    order = {i.name: n for n, i in enumerate(flat.instrs)}
    by = {i.name: i for i in flat.instrs}
    last: dict[str, int] = {}
    crosses: set[str] = set()
    for ins in flat.instrs:
        for o in ins.operands:
            last[o] = order[ins.name]
            if region.get(o) is None or region.get(o) != region.get(ins.name):
                crosses.add(o)
    for o in flat.outputs:
        last[o] = len(flat.instrs)
    recomputed: set[str] = set()
    if acyclic:  # consumers first: a recomputed op's cheap producers are recomputed as far as it is
        for ins in reversed(flat.instrs):
            if ins.opcode in CHEAP and ins.name in crosses and ins.name not in flat.outputs and ins.name in last:
                recomputed.add(ins.name)
                for o in ins.operands:
                    if o in by:
                        last[o] = max(last.get(o, 0), last[ins.name])
                        crosses.add(o)
    inputs = sum(i.nbytes for i in flat.instrs if i.opcode == "parameter")
    delta = [0.0] * (len(flat.instrs) + 2)
    for ins in flat.instrs:
        if ins.opcode in FREE | GENERATORS or ins.name not in last or ins.name in recomputed or (
                on_chip is not None and on_chip(ins)):
            continue
        if ins.name in region and ins.name not in crosses and ins.name not in flat.outputs:
            continue  # inside one kernel: never in memory
        delta[order[ins.name]] += ins.nbytes
        delta[last[ins.name] + 1] -= ins.nbytes
    live, peak = 0.0, 0.0
    for d in delta:
        live += d
        peak = max(peak, live)
    return inputs + peak


def step_ops(hlo_text: str, on_chip: Callable[[Instr], bool] | None = None) -> tuple[
        list[Op], list[Op], tuple[float, float]]:
    """(the kernels fused as on a TPU, as on a GPU, (lower, upper) bound of the peak bytes live) of an
    unoptimized HLO module's text; ``on_chip`` as in :func:`materialized_peak`."""
    flat = flatten(parse(hlo_text))
    memory = (materialized_peak(flat, acyclic=False, on_chip=on_chip),
              materialized_peak(flat, acyclic=True, on_chip=on_chip))
    return fused_ops(flat, on_chip=on_chip), fused_ops(flat, acyclic=True, on_chip=on_chip), memory
