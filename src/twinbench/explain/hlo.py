"""The compiled HLO text of a jitted step: each instruction's opcode, ``op_name`` and fused instructions (the
text read by ``twinbench.hlo_text``).

``op_name`` metadata carries JAX's transformation path: ``jvp(...)`` is the forward pass,
``transpose(jvp(...))`` the backward pass, and ``jax.named_scope`` names appear as path segments
(``.../optimizer/...``, ``.../block0.attn/...``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from twinbench import hlo_text
from twinbench.explain import structure, taxonomy

_LOSS = re.compile(r"loss|log_softmax|cross_entropy|logsumexp")
_KIND = re.compile(r'"kind":"([\w$]+)"')
_TARGET = re.compile(r'custom_call_target="([^"]*)"')


@dataclass
class Instr:
    name: str
    opcode: str
    op_name: str = ""
    calls: str = ""
    kind: str = ""
    target: str = ""  # a custom call's ``custom_call_target``
    contains: list[str] = field(default_factory=list)  # categories of the fused instructions
    opcodes: list[str] = field(default_factory=list)  # their opcodes
    update: bool = False  # part of the optimizer update, found by the program's data flow (:mod:`.structure`)
    attention: bool = False  # an attention product or an op on the scores, by shape (:mod:`.structure`)
    inherited: str = ""  # the phase of an instruction without op_name, from its operands (:mod:`.structure`)


def parse(text: str) -> dict[str, Instr]:
    """Every instruction of every computation by name; a fusion lists the categories it contains."""
    mod = hlo_text.parse(text)
    comps = {name: [_instr(i) for i in instrs] for name, instrs in mod.computations.items()}
    out: dict[str, Instr] = {}
    for instrs in comps.values():
        for ins in instrs:
            out.setdefault(ins.name, ins)
    for ins in out.values():
        if ins.calls in comps:
            found = _flatten(ins.calls, comps, 0)
            ins.contains = [c for _, c in found]
            ins.opcodes = [o for o, _ in found]
    for name, ph in structure.inherited(mod).items():
        if name in out and not out[name].op_name:
            out[name].inherited = ph
    for name in structure.update(mod):
        out[name].update = True
    for name in structure.attention(mod):
        out[name].attention = True
    return out


def _instr(ins: hlo_text.Instr) -> Instr:
    kind, target = _KIND.search(ins.attrs), _TARGET.search(ins.attrs)
    return Instr(ins.name, ins.opcode, ins.op_name, ins.calls, kind.group(1) if kind else "",
                 target.group(1) if target else "")


def by_kernel_name(instrs: dict[str, Instr]) -> dict[str, Instr]:
    """The same instructions keyed as XLA:GPU names their kernels: ``fusion.949`` runs as ``fusion_949``."""
    return {_KERNEL_NAME.sub("_", k): v for k, v in instrs.items()}


_KERNEL_NAME = re.compile(r"[.\-]")


#: layout glue inside a fusion: it counts for data movement only when a fusion holds nothing else
GLUE = {"broadcast", "reshape", "bitcast", "iota", "slice", "transpose", "convert"}


def _flatten(comp: str, comps: dict[str, list[Instr]], depth: int) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for ins in comps.get(comp, []):
        if ins.calls in comps and depth < 4:
            found += _flatten(ins.calls, comps, depth + 1)
        elif taxonomy.timed_opcode(ins.opcode):
            found.append((ins.opcode, _one(ins)))
    return found


def category(ins: Instr) -> str:
    """The taxonomy category of one executed instruction (a fusion: its dominant contained category)."""
    if ins.attention and "collectives" not in ins.contains and ins.opcode not in taxonomy.COLLECTIVE_OPCODES:
        return "attention"  # by structure: a product into or out of [.., T, T] scores, or an op on them
    if ins.contains:
        if "exponential" in ins.opcodes and "reductions" in ins.contains and not _LOSS.search(ins.op_name):
            return "attention"  # max/exp/sum: a softmax (the loss's log-softmax excepted)
        work = [c for o, c in zip(ins.opcodes, ins.contains, strict=True) if o not in GLUE]
        by_scope = taxonomy.hlo_op("", ins.op_name)  # a softmax/layer-norm scope names what the fusion does
        cats = work or ins.contains
        return taxonomy.dominant([*cats, by_scope] if by_scope != "other" else cats)
    if ins.opcode not in taxonomy.COLLECTIVE_OPCODES and taxonomy.attention_product(ins.op_name):
        return "attention"  # an attention product (its dot, or a oneDNN/YNN call) follows the model's op
    if "ynn" in ins.kind or "dot" in ins.name or "gemm" in ins.kind:
        return "matmul"
    if ins.opcode in ("while", "call", "conditional"):  # control flow: its own time is its loop's glue, named
        return taxonomy.jax_op_name(ins.op_name) if ins.op_name else "data movement"  # by what it loops for
    return _one(ins)


def _one(ins: Instr) -> str:
    """One instruction, not a fusion: a custom call by its target (cuBLAS, cuDNN, TE...), else its opcode."""
    if ins.opcode == "custom-call":
        cat = taxonomy.custom_call(ins.target)
        return cat if cat != "other" else taxonomy.hlo_op(ins.opcode, ins.op_name)
    return taxonomy.hlo_op(ins.opcode, ins.op_name)


def phase_of(ins: Instr) -> str:
    """The phase of one instruction: the optimizer update when the program's data flow says so, else its path."""
    return "optimizer" if ins.update else phase(ins.op_name) if ins.op_name else ins.inherited or "rest"


def phase(op_name: str) -> str:
    """forward / backward / optimizer / rest from an ``op_name`` path."""
    if "/optimizer" in op_name or op_name.startswith("optimizer"):
        return "optimizer"
    if "transpose(" in op_name:
        return "backward"
    if "jvp(" in op_name:
        return "forward"
    return "rest"


def where(op_name: str, parts: int = 4) -> str:
    """What the model called an instruction: the tail of its ``op_name`` path, its first ``;``-joined name
    (``.../h_2/mlp/c_fc/dot_general``), "" when it has none."""
    path = op_name.split(";")[0]
    segs = [s for s in path.split("/") if s]
    return ("…/" if len(segs) > parts else "") + "/".join(segs[-parts:])


_BLOCK = re.compile(r"(?<![\w.])(block\d*)\)*[./](attn|mlp)(?!\w)")
_NAMED = re.compile(r"(?<![\w.])(embed|head|loss)(?!\w)")


def scope(op_name: str) -> str:
    """The twinbench scope an ``op_name`` path names ("" when none): nested ``jvp(block0)/attn`` and
    ``block0.attn`` both read ``block0.attn``; else ``embed``, ``head`` or ``loss``."""
    found = _BLOCK.findall(op_name)
    if found:
        return ".".join(found[-1])
    named = _NAMED.findall(op_name)
    return named[-1] if named else ""
