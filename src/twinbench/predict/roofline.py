"""The roofline of a step: each op's time is the longer of its math at the peak and its bytes at the memory
bandwidth, plus a per-op overhead; the step is their sum (one device runs one op at a time).

An :class:`Op` is one kernel as a TPU/GPU compiler would run it (``hlo.py`` and ``torch_ops.py`` make them):
a matmul (``kind="matmul"``: compute-bound at the dtype's peak times ``Efficiency.matmul``; ``"attention"``: a fused
attention kernel, at ``Efficiency.attention``), or memory-bound
work (``"fused"``: a fusible chain of element-wise ops and reductions, ``"other"``: gathers, scatters,
custom calls), whose bytes move at the bandwidth times ``Efficiency.memory``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from twinbench.predict.datasheets import Datasheet


@dataclass
class Op:
    """One kernel of the step: what it computes and what it moves."""

    name: str
    kind: str            #: matmul, attention, fused, other, or dispatch (the host's, its fixed time only)
    flops: float = 0.0
    bytes: float = 0.0
    dtype: str = "bf16"  #: the matmul's operand dtype (its peak)
    kernels: int = 1     #: launches it stands for (a fused chain of several reductions: several)
    count: int = 1       #: how many times it runs per step (a loop body's ops: the trip count)
    label: str = ""      #: where it comes from (the model's scope), for the table of dominant ops
    scores: bool = False  #: it reads or writes the einsum attention's scores (a fused attention replaces it)
    fixed_us: float = 0.0  #: time per run beyond its math and bytes (a Pallas kernel's grid steps)
    vector_ops: float = 0.0  #: element-wise ops it computes on the vector unit (a product: those fused into it)


@dataclass(frozen=True)
class Efficiency:
    """What fraction of the datasheet an op reaches: matmuls of the peak, memory-bound ops of the bandwidth."""

    matmul: float = 0.85
    memory: float = 0.85
    overhead_us: float = 1.0
    attention: float = 0.3  #: a fused attention kernel's fraction of the peak (``attention.py``)
    vector_overlap: float = 0.2  #: the share of a product's time the vector work fused into it hides in


@dataclass
class OpTime:
    op: Op
    ms: float
    bound: str  #: compute, memory or overhead


@dataclass
class Roofline:
    """The predicted step: its ops' times, summed."""

    times: list[OpTime] = field(default_factory=list)

    @property
    def step_ms(self) -> float:
        return sum(t.ms for t in self.times)

    @property
    def flops(self) -> float:
        return sum(t.op.flops * t.op.count for t in self.times)

    @property
    def bytes(self) -> float:
        return sum(t.op.bytes * t.op.count for t in self.times)

    def by_kind(self) -> dict[str, float]:
        """ms per op kind (matmul, fused, other)."""
        out: dict[str, float] = {}
        for t in self.times:
            out[t.op.kind] = out.get(t.op.kind, 0.0) + t.ms
        return out

    def dominant(self, n: int = 8) -> list[tuple[str, str, float, str]]:
        """The ``n`` labels that take the most time: (label, kind, ms, bound), grouped by label and kind."""
        groups: dict[tuple[str, str], list[OpTime]] = {}
        for t in self.times:
            groups.setdefault((t.op.label or t.op.name, t.op.kind), []).append(t)
        rows = [(label, kind, sum(t.ms for t in ts), max(ts, key=lambda t: t.ms).bound)
                for (label, kind), ts in groups.items()]
        return sorted(rows, key=lambda r: -r[2])[:n]


def op_ms(op: Op, sheet: Datasheet, eff: Efficiency) -> OpTime:
    """One op's time on ``sheet``: max(math, bytes) at the efficiencies, plus its fixed time (``Op.fixed_us``)
    and the launch overhead per kernel. Vector work (``Op.vector_ops`` at the sheet's vector rate) bounds a fused
    kernel as its bytes do; inside a product it runs after the matrix unit's work but for ``vector_overlap`` of it
    (the chip's product with an element-wise producer fused in: ``benchmarks/tpu_vector_rates.py``)."""
    compute = 0.0
    if op.kind in ("matmul", "attention"):
        compute = op.flops / (sheet.peak(op.dtype) * (eff.matmul if op.kind == "matmul" else eff.attention))
    memory = op.bytes / (sheet.hbm_gbps * 1e9 * eff.memory)
    vector = op.vector_ops / sheet.vector_ops_per_s
    overhead = op.kernels * eff.overhead_us * 1e-6
    if op.kind == "matmul":
        body = max(compute, memory) + max(0.0, vector - eff.vector_overlap * compute)
    else:
        body = max(compute, memory, vector)
    body += op.fixed_us * 1e-6
    bound = "compute" if compute >= memory else "memory"
    if op.kind != "matmul" and vector > max(compute, memory):
        bound = "vector"
    if op.kind == "dispatch":
        bound = "host"
    if overhead > body:
        bound = "overhead"
    return OpTime(op, (body + overhead) * 1e3 * op.count, bound)


def roofline(ops: list[Op], sheet: Datasheet, eff: Efficiency) -> Roofline:
    """Every op's time on ``sheet``; the step is their sum."""
    return Roofline([op_ms(op, sheet, eff) for op in ops])
