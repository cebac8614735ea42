"""What a compiled JAX step's instructions are, from the program's structure rather than from scope names a
model may or may not carry (a user's port has none of twinbench's scopes).

* **The optimizer update**: in a program with a backward pass (instructions whose ``op_name`` says
  ``transpose(jvp(...))``), an executed instruction outside the forward and backward passes that depends on
  the gradient (one of its operands, transitively, is a backward instruction) updates the parameters and the
  optimizer's state; so does one that only such update instructions use (the learning-rate schedule), and
  one whose path names an optimizer library (``optax``, ``apply_gradients``...). The loss and metrics the
  step returns depend on the forward pass only: they stay ``rest``.
* **Attention**: a batched product (a ``dot`` with batch dimensions) into or out of ``[..., T, T]`` scores
  that a softmax exponentiates (``q @ k^T``, ``p @ v`` and their four backward products), and any
  instruction whose result has the scores' elements and ends in their ``T`` (the scale, mask, softmax and
  dropout on the scores, forward and backward), whatever scope names the model uses. torch's SDPA counts the
  same work as attention. Products into square tensors no softmax reads (a recommender's feature
  interactions, ``[B, F, D] @ [B, D, F]``) are not attention.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from twinbench import hlo_text
from twinbench.explain.flops import OpArgs

_OPTIMIZER_PATH = re.compile(r"optax|apply_gradients|apply_updates|(^|/)(adamw?|sgd|lamb|lion|adafactor|"
                             r"optimizer)(/|$)", re.IGNORECASE)
_LHS_BATCH = re.compile(r"lhs_batch_dims=\{\d[\d,]*\}")
_NOT_WORK = {"parameter", "get-tuple-element", "tuple", "constant", "after-all", "partition-id", "replica-id"}


def _phase(op_name: str) -> str:
    if "transpose(" in op_name:
        return "backward"
    if "jvp(" in op_name:
        return "forward"
    return "rest"


def executed(mod: hlo_text.Module) -> dict[str, list[hlo_text.Instr]]:
    """The computations whose instructions run as instructions (not fused into another): the entry, loop
    bodies, called computations; a fusion's computation is part of its fusion instruction."""
    fused = {ins.calls for instrs in mod.computations.values() for ins in instrs
             if ins.opcode == "fusion" and ins.calls}
    return {c: instrs for c, instrs in mod.computations.items() if c not in fused}


_CALLED = re.compile(r"\b(?:body|condition|calls|to_apply|true_computation|false_computation)=%?([\w.\-]+)")
_RANK = {"backward": 2, "forward": 1, "rest": 0}


def inherited(mod: hlo_text.Module) -> dict[str, str]:
    """The phase of each executed instruction: its ``op_name``'s, or, for one XLA made without any (a
    transpose feeding a weight gradient's convolution, a loop body's copy), the latest phase among its operands
    (backward over forward over rest), a loop or call body's parameters taking their caller's."""
    comps = executed(mod)
    caller: dict[str, str] = {}
    for instrs in comps.values():
        for ins in instrs:
            for c in _CALLED.findall(ins.attrs):
                if c in comps:
                    caller.setdefault(c, ins.name)
    out: dict[str, str] = {}
    order = sorted(comps, key=lambda c: c not in caller)  # callers' computations (the entry) last
    for comp in reversed(order):  # the entry first, then what it calls
        for ins in comps[comp]:
            if ins.op_name:
                out[ins.name] = _phase(ins.op_name)
                continue
            found = [out[o] for o in ins.operands if o in out]
            if not found and comp in caller:
                found = [out.get(caller[comp], "rest")]
            out[ins.name] = max(found, key=_RANK.__getitem__, default="rest")
    return out


def update(mod: hlo_text.Module) -> set[str]:
    """The names of the executed instructions of the optimizer update (see the module's docstring)."""
    comps = executed(mod)
    every = [ins for instrs in comps.values() for ins in instrs]
    eff = inherited(mod)
    if not any(eff.get(ins.name) == "backward" for ins in every):
        return set()
    users: dict[str, list[hlo_text.Instr]] = {}
    for ins in every:
        for o in ins.operands:
            users.setdefault(o, []).append(ins)
    grad: set[str] = set()  # depends on the gradient (a backward instruction's result)
    out: set[str] = set()
    for instrs in comps.values():
        for ins in instrs:  # HLO text lists an instruction after its operands
            ph = eff.get(ins.name, "rest")
            if ph == "backward" or any(o in grad for o in ins.operands):
                grad.add(ins.name)
            if ph == "rest" and ins.opcode not in _NOT_WORK and not ins.root and (
                    ins.name in grad or _OPTIMIZER_PATH.search(ins.op_name)):
                out.add(ins.name)
    for instrs in comps.values():  # what only the update uses (its learning rate, its step count)
        for ins in reversed(instrs):
            if ins.name in out or eff.get(ins.name) != "rest" or ins.opcode in _NOT_WORK or ins.root:
                continue
            us = users.get(ins.name, [])
            if us and all(u.name in out for u in us):
                out.add(ins.name)
    return out


def _dims(ins: hlo_text.Instr | None) -> tuple[int, ...]:
    return tuple(ins.shapes[0][1]) if ins is not None and ins.shapes and not ins.is_tuple else ()


def _square(dims: tuple[int, ...]) -> int:
    """T when ``dims`` is ``[..., T, T]`` with at least one leading dimension, else 0."""
    return dims[-1] if len(dims) >= 3 and dims[-1] == dims[-2] and dims[-1] > 1 else 0


def _dots(comp: str, mod: hlo_text.Module, depth: int = 0) -> list[tuple[hlo_text.Instr, str]]:
    found = []
    for ins in mod.computations.get(comp, []):
        if ins.opcode == "dot":
            found.append((ins, comp))
        elif ins.opcode == "fusion" and ins.calls and depth < 4:
            found += _dots(ins.calls, mod, depth + 1)
    return found


def _softmax_on(score: tuple[int, int], comps: dict[str, list[hlo_text.Instr]], mod: hlo_text.Module) -> bool:
    """Whether an executed instruction exponentiates a tensor of the scores' size (the softmax's exp)."""
    for instrs in comps.values():
        for ins in instrs:
            dims = _dims(ins)
            if not dims or (math.prod(dims), dims[-1]) != score:
                continue
            ops = {i.opcode for i in mod.computations.get(ins.calls, [])} if ins.opcode == "fusion" else {ins.opcode}
            if "exponential" in ops:
                return True
    return False


def attention(mod: hlo_text.Module) -> set[str]:
    """The names of the executed instructions that are attention by structure (see the module's docstring)."""
    comps = executed(mod)
    tables = {c: {i.name: i for i in instrs} for c, instrs in mod.computations.items()}
    found: set[str] = set()
    scores: set[tuple[int, int]] = set()  # (elements, T) of the [..., T, T] scores
    for instrs in comps.values():
        for ins in instrs:
            dots = [(ins, ins.comp)] if ins.opcode == "dot" else \
                _dots(ins.calls, mod) if ins.opcode == "fusion" and ins.calls else []
            for d, comp in dots:
                if not _LHS_BATCH.search(d.attrs):  # no batch dimensions: not a batched product
                    continue
                table = tables.get(comp, {})
                for dims in (_dims(d), *(_dims(table.get(o)) for o in d.operands[:2])):
                    t = _square(dims)
                    if t:
                        scores.add((math.prod(dims), t))
                        found.add(ins.name)
    scores = {sc for sc in scores if _softmax_on(sc, comps, mod)}  # scores have their softmax (not an
    if not scores:  # interaction layer's [B, F, F] products)
        return set()
    for instrs in comps.values():
        for ins in instrs:
            dims = _dims(ins)
            if ins.opcode not in _NOT_WORK and dims and (math.prod(dims), dims[-1]) in scores:
                found.add(ins.name)
    return found


# ------------------------------------------------------------------------------------------------- torch
_TORCH_BATCHED = re.compile(r"^aten::(bmm|matmul|baddbmm|einsum)$")
_TORCH_SOFTMAX = re.compile(r"^aten::_?(softmax|safe_softmax)$")


def _torch_dims(args: OpArgs | None) -> list[list[int]]:
    dims = args.dims if args is not None else []
    return [d for d in dims if isinstance(d, list) and d and all(isinstance(x, int) for x in d)]


def torch_scores(ops: Iterable[tuple[str, OpArgs | None]]) -> set[tuple[int, int]]:
    """(elements, T) of the ``[..., T, T]`` attention scores a torch trace's batched products make or read
    (``q @ k^T`` into them, ``p @ v`` out of them), from the profiler's recorded input shapes of its cpu_ops
    (``ops``: each op's name and recorded inputs)."""
    ops = list(ops)
    out: set[tuple[int, int]] = set()
    for name, args in ops:
        if not _TORCH_BATCHED.match(name):
            continue
        mats = [d for d in _torch_dims(args) if len(d) >= 3]
        if len(mats) < 2:
            continue
        a, b = mats[-2], mats[-1]
        for dims in (a, b, [*a[:-1], b[-1]]):
            t = _square(tuple(dims))
            if t:
                out.add((math.prod(dims), t))
    softmaxed = {(math.prod(d), d[-1]) for name, args in ops if _TORCH_SOFTMAX.match(name) for d in _torch_dims(args)}
    return out & softmaxed  # scores have their softmax (not an interaction layer's [B, F, F] products)


def torch_on_scores(name: str, args: OpArgs | None, scores: set[tuple[int, int]]) -> bool:
    """Whether a torch op works on the attention scores (a product into or out of them, their scale, mask,
    softmax, dropout, forward or backward): one of its inputs has the scores' elements and ends in their T."""
    if not scores:
        return False
    dims = _torch_dims(args)
    if _TORCH_BATCHED.match(name) and len(dims) >= 2:
        dims = [*dims, [*dims[-2][:-1], dims[-1][-1]]]
    return any((math.prod(d), d[-1]) in scores for d in dims if len(d) >= 2)
