"""JAX's forward pass computes pieces of the derivative: which forward instructions only the backward needs.

Under ``jax.grad`` the forward pass is *linearized*: besides the loss it computes residuals that exist only for
the backward pass (the GELU's derivative ``exp(-x^2)`` next to ``erf(x)``, a softmax's saved terms). Their
``op_name`` says ``jvp(...)`` (forward), yet torch computes the same pieces inside its backward, and the
timing method (the forward jitted alone, without ``grad``) never computes them. Counted as forward, they make
the trace's forward longer than the timing's and put backward work in the forward row of the gap table.

From the compiled step's data flow: a forward instruction is *primal* when the step's result (its ROOT) or a
primal forward (or unscoped) instruction uses it; a forward instruction none of whose uses is primal feeds
only the backward pass (and the update): it is linearization, attributed to backward.
"""

from __future__ import annotations

from twinbench.explain import hlo
from twinbench.explain.flops import HloInstr, parse_hlo


def linearization(text: str) -> set[str]:
    """Names of the forward-phase instructions of the executed computations whose results only the
    backward pass uses (fused computations are not looked into: a fusion is one executed instruction)."""
    return classify(text)[0]


def classify(text: str) -> tuple[set[str], set[str]]:
    """(linearization, shared): forward instructions only the backward uses, and primal forward instructions
    the backward uses too (kept as buffers of their own for it: the forward compiled alone may fuse them
    away, so they make the trace's forward longer than the timing's without being backward work)."""
    table = parse_hlo(text)
    fused = {ins.calls for ins in table.values() if ins.opcode == "fusion" and ins.calls}
    users: dict[str, list[HloInstr]] = {}
    by_comp: dict[str, list[HloInstr]] = {}
    for ins in table.values():
        if ins.comp in fused:
            continue
        by_comp.setdefault(ins.comp, []).append(ins)
        for o in ins.operands:
            users.setdefault(o, []).append(ins)
    primal: dict[str, bool] = {}
    out: set[str] = set()
    shared: set[str] = set()
    for instrs in by_comp.values():
        for ins in reversed(instrs):  # HLO text lists an instruction after its operands: users come later
            ph = hlo.phase(ins.op_name)
            if ins.root or ins.opcode in ("while", "call", "conditional"):
                primal[ins.name] = True
                continue
            if ph in ("backward", "optimizer"):
                primal[ins.name] = False
                continue
            uses = users.get(ins.name, [])
            is_primal = not uses or any(primal.get(u.name, True) for u in uses)
            primal[ins.name] = is_primal
            if ph == "forward" and not is_primal:
                out.add(ins.name)
            elif ph == "forward" and any(hlo.phase(u.op_name) == "backward" for u in uses):
                shared.add(ins.name)
    return out, shared
