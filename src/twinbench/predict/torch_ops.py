"""A torch step's kernels: one step traced on fake tensors (no maths runs, nothing is allocated), each aten
op recorded with its FLOPs (``torch.utils.flop_counter``'s formulas) and bytes (its tensors in and out).

Eager runs every aten op as its own kernel. ``torch.compile`` (Inductor) fuses the element-wise ops and
reductions between two matmuls into one kernel: a run of such ops reads its inputs from outside once and
writes what is used after it (:func:`fuse_runs`). SDPA is a fused attention kernel (``attention.py``).
Views cost nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from twinbench.predict.roofline import Op
from twinbench.spec import RunSpec

MATMULS = {"mm", "bmm", "addmm", "matmul", "linear", "convolution", "convolution_backward", "baddbmm", "addbmm"}
VIEWS = {"view", "_unsafe_view", "t", "transpose", "permute", "expand", "as_strided", "detach", "alias", "slice",
         "select", "unsqueeze", "squeeze", "split", "split_with_sizes", "unbind", "reshape", "_reshape_alias",
         "empty", "empty_like", "empty_strided", "lift_fresh", "_to_copy_view", "unflatten", "flatten",
         "is_same_size", "_local_scalar_dense", "new_empty", "new_empty_strided", "device",
         "_record_function_enter_new", "_record_function_exit", "sym_size", "sym_stride", "sym_numel"}


@dataclass
class Recorded:
    name: str
    flops: float
    inputs: list[tuple[int, float]]   #: (tensor id, bytes)
    outputs: list[tuple[int, float]]
    dtype: str
    scope: str = ""
    shape: str = ""


@dataclass
class Trace:
    ops: list[Recorded] = field(default_factory=list)
    keep: list[Any] = field(default_factory=list)  #: keeps the tensors alive: ids stay unique


def _tensors(tree: Any) -> list[Any]:
    import torch
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(tree) if isinstance(t, torch.Tensor)]


def _dtype(t: Any) -> str:
    import torch

    return "bf16" if t.dtype in (torch.bfloat16, torch.float16) else "f32"


def trace_step(spec: RunSpec) -> tuple[Trace, Any]:
    """Every aten op of one training step of ``spec``'s torch trainer, on fake tensors."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry

    from twinbench.predict.program import trainer_and_batch

    trainer, x, y = trainer_and_batch(spec)
    trace = Trace()

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            packet = func._overloadpacket
            name = packet.__name__.rstrip("_")
            ins, outs = _tensors((args, kwargs)), _tensors(out)
            trace.keep += ins + outs
            flops = 0.0
            if packet in flop_registry and "scaled_dot_product" not in name:
                flops = float(flop_registry[packet](*args, **kwargs, out_val=out))
            shape = "x".join(str(list(t.shape)) for t in ins[:2])
            trace.ops.append(Recorded(name, flops, [(id(t), t.numel() * t.element_size()) for t in ins],
                                      [(id(t), t.numel() * t.element_size()) for t in outs],
                                      _dtype(ins[0]) if ins else "f32", shape=shape))
            return out

    with FakeTensorMode(allow_non_fake_inputs=True), Recorder():
        trainer.step(x, y)
    return trace, trainer


def _attention(r: Recorded, spec: RunSpec) -> Op:
    from twinbench.models import family
    from twinbench.predict.attention import attention_op

    m = spec.model
    op = attention_op(layers=1, batch=spec.train.batch, heads=m.heads, seq=spec.train.seq,
                      head_dim=m.d_model // m.heads, causal=family.get(spec).causal, backward=False)
    if "backward" in r.name:
        op.flops *= 2.5
    op.bytes = sum(b for _, b in r.inputs) + sum(b for _, b in r.outputs)
    op.label = f"fused attention (SDPA {'bwd' if 'backward' in r.name else 'fwd'})"
    return op


def eager_ops(trace: Trace, spec: RunSpec) -> list[Op]:
    """Every non-view aten op as its own kernel."""
    ops = []
    for r in trace.ops:
        if r.name in VIEWS:
            continue
        if "scaled_dot_product" in r.name:
            ops.append(_attention(r, spec))
            continue
        nbytes = sum(b for _, b in r.inputs) + sum(b for _, b in r.outputs)
        kind = "matmul" if r.name in MATMULS or r.flops else "fused"
        ops.append(Op(r.name, kind, r.flops, nbytes, r.dtype, 1, 1, f"{r.name} {r.shape}"))
    return ops


def fuse_runs(trace: Trace, spec: RunSpec) -> list[Op]:
    """Inductor's fusion, approximately: each run of element-wise/reduction ops between matmuls is one
    kernel reading its outside inputs once and writing what is used after the run. The optimizer stays
    eager (the twins compile model + loss): its ``_foreach`` kernels are each their own."""
    later: dict[int, int] = {}
    for n, r in enumerate(trace.ops):
        for tid, _ in r.inputs:
            later[tid] = n
    ops: list[Op] = []
    run: list[tuple[int, Recorded]] = []

    def close() -> None:
        if not run:
            return
        made = {tid for _, r in run for tid, _ in r.outputs}
        reads = {tid: b for _, r in run for tid, b in r.inputs if tid not in made}
        last = run[-1][0]
        writes = {tid: b for _, r in run for tid, b in r.outputs if later.get(tid, math.inf) > last}
        ops.append(Op(run[0][1].name, "fused", 0.0, sum(reads.values()) + sum(writes.values()), "", 1, 1,
                      f"fused {'+'.join(sorted({r.name for _, r in run}))[:60]}"))
        run.clear()

    for n, r in enumerate(trace.ops):
        if r.name in VIEWS:
            continue
        if "scaled_dot_product" in r.name or r.name in MATMULS or r.flops or r.name.startswith("_foreach"):
            close()  # a matmul, attention, or the eager optimizer's multi-tensor kernels: each its own
            ops.extend(eager_ops(Trace([r]), spec))
        else:
            run.append((n, r))
    close()
    return ops


def torch_program(spec: RunSpec):
    """The torch step's kernels (eager: every aten op; compile strategies: fused runs) and its memory."""
    from twinbench.predict.program import Program

    trace, trainer = trace_step(spec)
    compiled = spec.strategy.base.startswith("compile")
    ops = fuse_runs(trace, spec) if compiled else eager_ops(trace, spec)
    n_params = sum(p.numel() for p in trainer.model.parameters())
    memory = _peak_live(trace) + 16.0 * n_params  # fp32 params, grads, Adam's two moments
    source = ("one step traced on fake tensors, " + ("element-wise runs fused as Inductor would"
                                                     if compiled else "every aten op a kernel (eager)"))
    return Program(ops, (memory, memory), 4.0 * n_params, int(n_params), spec.train.batch * spec.train.seq, source)


def _peak_live(trace: Trace) -> float:
    """Peak bytes of the step's intermediate tensors alive at once (from their producer to their last use)."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    size: dict[int, float] = {}
    for n, r in enumerate(trace.ops):
        if r.name in VIEWS:
            continue
        for tid, b in r.outputs:
            first.setdefault(tid, n)
            size[tid] = b
        for tid, _ in r.inputs:
            last[tid] = n
    delta = [0.0] * (len(trace.ops) + 2)
    for tid, n in first.items():
        delta[n] += size[tid]
        delta[last.get(tid, n) + 1] -= size[tid]
    live = peak = 0.0
    for d in delta:
        live += d
        peak = max(peak, live)
    return peak
