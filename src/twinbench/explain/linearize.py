"""JAX's forward pass computes pieces of the derivative: which forward instructions only the backward needs.

Under ``jax.grad`` the forward pass is *linearized*: besides the loss it computes residuals that exist only for
the backward pass (the GELU's derivative ``exp(-x^2)`` next to ``erf(x)``, a softmax's saved terms). Their
``op_name`` says ``jvp(...)`` (forward), yet torch computes the same pieces inside its backward, and the
timing method (the forward jitted alone, without ``grad``) never computes them. Counted as forward, they make
the trace's forward longer than the timing's and put backward work in the forward row of the gap table.

From the compiled step's data flow: a forward instruction is *primal* when the step's result (its ROOT) or a
primal forward (or unscoped) instruction uses it; a forward instruction none of whose uses is primal feeds
only the backward pass (and the update): it is linearization, attributed to backward.

A step that returns only its new state (``state.apply_gradients(grads=grads)``, the usual ``TrainState``
step) has no forward result in its ROOT: XLA removes the unused loss, and every forward result is used by
the backward pass only, so by that rule the whole forward pass would read as linearization. There, the
forward's end stands for the loss: the forward instruction at the end of the longest chain of forward
instructions (the network's last layer), primal with every forward instruction it is computed from.
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
    if _returns_forward(by_comp, table):
        return _walk(by_comp, users, {})
    return _walk(by_comp, users, dict.fromkeys(forward_chain(by_comp, table), True))  # the loss is not returned


def _returns_forward(by_comp: dict[str, list[HloInstr]], table: dict[str, HloInstr]) -> bool:
    """Whether the entry's ROOT (the last computation of HLO text) is computed from a forward instruction other
    than through the backward pass (the loss or a metric returned), or the program has no forward pass."""
    seen: set[str] = set()
    entry = list(by_comp.values())[-1] if by_comp else []
    todo = [i.name for i in entry if i.root]
    any_forward = False
    for instrs in by_comp.values():
        any_forward = any_forward or any(hlo.phase(i.op_name) == "forward" for i in instrs)
    while todo:
        name = todo.pop()
        if name in seen or name not in table:
            continue
        seen.add(name)
        ph = hlo.phase(table[name].op_name)
        if ph == "forward":
            return True
        if ph == "rest":
            todo += table[name].operands
    return not any_forward


def _walk(by_comp: dict[str, list[HloInstr]], users: dict[str, list[HloInstr]],
          primal: dict[str, bool]) -> tuple[set[str], set[str]]:
    """(linearization, shared) with the instructions of ``primal`` primal from the start."""
    out: set[str] = set()
    shared: set[str] = set()
    for instrs in by_comp.values():
        for ins in reversed(instrs):  # HLO text lists an instruction after its operands: users come later
            ph = hlo.phase(ins.op_name)
            if ins.root or ins.opcode in ("while", "call", "conditional") or primal.get(ins.name):
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


def forward_chain(by_comp: dict[str, list[HloInstr]], table: dict[str, HloInstr]) -> set[str]:
    """The forward's end (the forward instruction ending the longest chain of forward instructions; unscoped
    ones pass a chain on) and the forward instructions it is computed from."""
    depth: dict[str, int] = {}
    end, best = "", 0
    for instrs in by_comp.values():
        for ins in instrs:  # operands are listed before their users
            ph = hlo.phase(ins.op_name) if ins.op_name else "rest"
            if ph in ("backward", "optimizer"):
                continue
            d = max((depth[o] for o in ins.operands if o in depth), default=0) + (ph == "forward")
            depth[ins.name] = d
            if ph == "forward" and d > best:
                end, best = ins.name, d
    out: set[str] = set()
    todo = [end] if end else []
    while todo:
        name = todo.pop()
        if name in out or name not in depth:
            continue
        ins = table[name]
        if ins.op_name and hlo.phase(ins.op_name) == "forward":
            out.add(name)
        todo += [o for o in ins.operands if o in depth]
    return out
