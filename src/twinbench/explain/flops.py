"""FLOPs, bytes and matmul shapes of single ops: torch ops from the profiler's recorded input shapes and
strides (``record_shapes``), HLO instructions from the shapes in the compiled step's HLO text.

A matmul is described the same way in both frameworks, so the two runs' matmuls can be matched: ``batch``
(product of the batch dimensions), ``m``, ``k``, ``n`` (the non-contracted dimensions collapsed) and the
operands' layout in BLAS terms: ``N`` when an operand is read row-major as ``[m, k]`` / ``[k, n]``, ``T`` when
it is read transposed (its contracted dimension is not where a row-major ``[m, k] @ [k, n]`` has it).
FLOPs of a matmul: ``2 * batch * m * k * n``. Attention kernels (torch's SDPA) count their two (forward) or
four (backward) matmuls, dense (a causal mask is not subtracted: JAX's written-out attention computes them all).
Bytes, for memory-bound rows: what an op reads and writes (torch: its inputs, and an output the size of its
largest input unless it works in place; HLO: its operands and its result).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from twinbench import hlo_text

#: bytes per element of the torch profiler's ``Input type`` names (an HLO type's: ``hlo_text.DTYPE_BYTES``)
_DTYPE_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "int": 4,
                "bool": 1, "unsigned char": 1, "signed char": 1, "short int": 2}


@dataclass
class OpShape:
    """What one execution of an op computes: FLOPs, bytes, and (a matmul) its dimensions and layout."""

    flops: float = 0.0
    bytes: float = 0.0
    batch: int = 0  # 0: not a matmul
    m: int = 0
    k: int = 0
    n: int = 0
    trans: str = ""  # "NN", "TN", "NT", "TT"
    parts: list[OpShape] = field(default_factory=list)  # an HLO fusion's dots, each

    def key(self) -> tuple[int, int, int, int] | None:
        """The matmul's identity across frameworks: ``x @ w`` and ``(x @ w).T`` computed as ``w.T @ x.T``
        are the same work, so m and n are sorted."""
        if not self.batch:
            return None
        lo, hi = sorted((self.m, self.n))
        return (self.batch, lo, self.k, hi)

    def text(self) -> str:
        if not self.batch:
            return ""
        b = f"{self.batch}x" if self.batch > 1 else ""
        return f"{b}[{self.m},{self.k}]x[{self.k},{self.n}] {self.trans}".strip()


class _RawArgs(msgspec.Struct):
    """The keys of a torch profiler op's ``args`` that shapes are read from (``record_shapes``), as the trace
    spells them; each value still as parsed (a hand-edited trace may hold anything)."""

    dims: object = msgspec.field(default=None, name="Input Dims")
    strides: object = msgspec.field(default=None, name="Input Strides")
    types: object = msgspec.field(default=None, name="Input type")
    concrete: object = msgspec.field(default=None, name="Concrete Inputs")


@dataclass(frozen=True)
class OpArgs:
    """What a torch op's recorded inputs say (``record_shapes``): one entry per input, each as the profiler
    wrote it (a shape is a list of ints; a non-tensor input's is ``[]``). Kept once per distinct set by the
    trace's reader (:class:`.torch_trace.Events`); FLOPs, bytes and the attention scores are read from it."""

    dims: list[Any] = field(default_factory=list)  # Input Dims
    strides: list[Any] = field(default_factory=list)  # Input Strides
    types: list[Any] = field(default_factory=list)  # Input type: "float", "c10::BFloat16"...
    concrete: list[Any] = field(default_factory=list)  # Concrete Inputs: scalars as text ("[1, 1]", "True")

    @classmethod
    def of(cls, args: Mapping[str, object]) -> OpArgs:
        """The shapes of a raw event's ``args`` (a mapping whose keys vary by producer and version: only the
        shape keys are read); a value that is no list counts as none."""
        raw = msgspec.convert(args, _RawArgs)
        return cls(*(v if isinstance(v, list) else [] for v in (raw.dims, raw.strides, raw.types, raw.concrete)))


@dataclass(frozen=True)
class TorchOp:
    """What the op groups read of a torch row (:func:`.ops.groups`): the aten op's recorded inputs and, for a
    device kernel, the op that launched it (None: the row is the op itself, a CPU trace's)."""

    args: OpArgs | None
    op: str | None = None


@dataclass(frozen=True)
class XlaCost:
    """What XLA's profiler says one HLO instruction computes (a TPU profile's event metadata), per execution."""

    flops: float
    bytes: float
    where: str  # the tail of its op_name: what the op is and where in the model
    opaque: bool  # a custom call XLA counts nothing of (a Pallas kernel)


def matmul_flops(batch: int, m: int, k: int, n: int) -> float:
    return 2.0 * batch * m * k * n


# ------------------------------------------------------------------------------------------------- torch
_TORCH_MM = re.compile(r"^aten::(mm|addmm|_addmm_activation|bmm|baddbmm|addbmm|mv|addmv|dot)$")
_TORCH_SDPA = re.compile(r"^aten::_(scaled_dot_product_\w*attention\w*|flash_attention\w*|efficient_attention\w*)$")


def _numel(dims: Any) -> int:
    return math.prod(dims) if isinstance(dims, list) and all(isinstance(d, int) for d in dims) else 0


def _trans_of(dims: list[int], strides: list[int] | None, contracted_last: bool) -> str:
    """``N``/``T`` of a 2-D (or batched) operand from its strides: the lhs ``[m, k]`` is N when k is the
    unit-stride dimension; the rhs ``[k, n]`` is N when n is."""
    if not strides or len(strides) < 2 or len(strides) != len(dims):
        return "N"
    unit = strides[-1] == 1 or dims[-1] == 1
    return "N" if unit else "T"


#: torch ops that return a view of their input: metadata only, no byte of the tensor read or written (counted,
#: a ``select`` of one sample from a whole dataset tensor would "move" the dataset at every call)
_TORCH_VIEW = re.compile(r"^aten::(view|_?reshape_alias|_unsafe_view|select|slice|as_strided|unsqueeze|squeeze|"
                         r"expand|expand_as|t|transpose|permute|detach|alias|narrow|unbind|split|split_with_sizes|"
                         r"chunk|view_as|unfold|diagonal|_indices|_values|lift_fresh|numpy_T|flatten|unflatten)$")


def torch_op(name: str, args: OpArgs | Mapping[str, object] | None) -> OpShape:
    """FLOPs/bytes (and matmul shape) of one torch profiler op from its ``Input Dims`` / ``Input Strides``
    (:class:`OpArgs`, or an event's raw ``args``); a view (:data:`_TORCH_VIEW`) moves no bytes."""
    if args is not None and not isinstance(args, OpArgs):
        args = OpArgs.of(args)
    if args is None or _TORCH_VIEW.match(name):
        return OpShape()
    dims, strides, types = args.dims, args.strides, args.types
    tensors = [(d, types[i] if i < len(types) else "float") for i, d in enumerate(dims) if isinstance(d, list) and d]
    nbytes = [_numel(d) * _DTYPE_BYTES.get(t, 4) for d, t in tensors]
    out_bytes = 0 if name.endswith("_") else max(nbytes, default=0)
    moved = float(sum(nbytes) + out_bytes)
    m = _TORCH_MM.match(name)
    if m:
        op = m.group(1)
        mats = [(i, d) for i, d in enumerate(dims) if isinstance(d, list) and len(d) >= 2]
        if op in ("addmm", "baddbmm", "addbmm", "_addmm_activation"):
            mats = mats[-2:]  # bias/self first
        if len(mats) < 2:
            return OpShape(bytes=moved)
        (ia, a), (ib, b) = mats[0], mats[1]
        sa = strides[ia] if ia < len(strides) else None
        sb = strides[ib] if ib < len(strides) else None
        batch = math.prod(a[:-2]) if len(a) > 2 else 1
        mm, kk, nn = a[-2], a[-1], b[-1]
        trans = _trans_of(a, sa, True) + _trans_of(b, sb, False)
        return OpShape(matmul_flops(batch, mm, kk, nn), moved, batch, mm, kk, nn, trans)
    conv = _torch_conv(name, dims, args.concrete)
    if conv:
        return OpShape(flops=conv, bytes=moved)
    rnn = _torch_rnn(name, dims)
    if rnn:
        return OpShape(flops=rnn, bytes=moved)
    if _TORCH_SDPA.match(name) and dims and isinstance(dims[0], list) and len(dims[0]) == 4:
        q = dims[0]
        kdims = dims[1] if len(dims) > 1 and isinstance(dims[1], list) and len(dims[1]) == 4 else q
        b, h, tq, d = q
        tk = kdims[2]
        per = matmul_flops(b * h, tq, d, tk)  # one of the two (forward) matmuls
        return OpShape(flops=(4 if "backward" in name else 2) * per, bytes=moved)
    return OpShape(bytes=moved)


#: the convolutions that compute (their wrappers, ``aten::convolution``/``conv2d``, only call these): the
#: positions of (stride, padding, dilation) among their inputs, as their schemas give them (None: no dilation,
#: always 1); a test checks them against torch's own schemas
_TORCH_CONV: dict[str, tuple[int, int, int | None]] = {
    "aten::mkldnn_convolution": (4, 3, 5), "aten::cudnn_convolution": (3, 2, 4),
    "aten::miopen_convolution": (4, 3, 5), "aten::miopen_depthwise_convolution": (4, 3, 5),
    "aten::_slow_conv2d_forward": (4, 5, None), "aten::thnn_conv2d": (4, 5, None),
    "aten::slow_conv3d_forward": (4, 5, None), "aten::_nnpack_spatial_convolution": (4, 3, None),
    "aten::slow_conv_dilated2d": (4, 5, 6), "aten::slow_conv_dilated3d": (4, 5, 6),
    "aten::_conv_depthwise2d": (4, 5, 6)}


#: a fused recurrent layer: one op runs the layer over every time step (oneDNN's RNN primitive behind
#: ``nn.LSTM``/``nn.GRU``/``nn.RNN`` on the CPU); its first inputs are the sequence ``[T, B, I]`` and the weights
#: ``[G*H, I]`` (input to gates) and ``[G*H, H]`` (hidden to gates)
_TORCH_RNN = re.compile(r"^aten::mkldnn_rnn_layer(_backward)?$")


def _torch_rnn(name: str, dims: list[Any]) -> float:
    """FLOPs of a fused recurrent layer: the gate products of every step, ``2 T B G H (I + H)``; its backward
    computes the input's and the weights' gradients, twice that."""
    if not _TORCH_RNN.match(name) or len(dims) < 3:
        return 0.0
    x, w_ih, w_hh = dims[0], dims[1], dims[2]
    if not (isinstance(x, list) and len(x) == 3 and all(isinstance(w, list) and len(w) == 2 for w in (w_ih, w_hh))
            and w_ih[0] == w_hh[0]):
        return 0.0
    once = 2.0 * x[0] * x[1] * w_ih[0] * (w_ih[1] + w_hh[1])
    return 2 * once if name.endswith("_backward") else once


def _ints(text: Any) -> list[int]:
    try:
        return [int(x) for x in str(text).strip("[]").split(",") if x.strip()]
    except ValueError:
        return []


def _torch_conv(name: str, dims: list[Any], concrete: list[Any]) -> float:
    """FLOPs of one convolution kernel op: ``2 N O prod(out) (C/g) prod(k)``, the output's size from the
    input's, the stride, the padding and the dilation; a ``convolution_backward`` does that once for each
    gradient it computes (input's, weight's: its output mask). A transposed convolution (weight ``[C, O/g, k..]``)
    multiplies every *input* element by ``O/g prod(k)`` weights: ``2 N C prod(in) (O/g) prod(k)``. On a CPU its
    forward runs inside ``aten::_convolution`` itself (no kernel op below it), so it is counted there."""
    if name == "aten::convolution_backward" and len(dims) >= 3 and all(isinstance(d, list) and len(d) >= 3 for d in dims[:3]):
        out, w = dims[0], dims[2]
        transposed = len(concrete) > 7 and str(concrete[7]) == "True"
        mask = str(concrete[10]) if len(concrete) > 10 else "[True, True, True]"
        products = [v.strip() for v in mask.strip("[]").split(",")][:2].count("True")
        return 2.0 * math.prod(dims[1] if transposed else out) * math.prod(w[1:]) * max(products, 1)
    if name == "aten::_convolution":  # only where it computes itself: a transposed convolution
        transposed = len(concrete) > 6 and str(concrete[6]) == "True"
        if not transposed or len(dims) < 2 or not all(isinstance(d, list) and len(d) >= 3 for d in dims[:2]):
            return 0.0
        return 2.0 * math.prod(dims[0]) * math.prod(dims[1][1:])
    where = _TORCH_CONV.get(name)
    if where is None or len(dims) < 2 or not all(isinstance(d, list) and len(d) >= 3 for d in dims[:2]):
        return 0.0
    x, w = dims[0], dims[1]
    k = w[2:]

    def ints(at: int | None, default: int) -> list[int]:
        got = _ints(concrete[at]) if at is not None and len(concrete) > at else []
        return got if len(got) == len(k) else [default] * len(k)

    stride, pad, dil = ints(where[0], 1), ints(where[1], 0), ints(where[2], 1)
    out = [(h + 2 * p - d * (kk - 1) - 1) // st + 1 for h, p, kk, st, d in zip(x[2:], pad, k, stride, dil, strict=True)]
    return 2.0 * x[0] * w[0] * math.prod(out) * math.prod(w[1:])


# --------------------------------------------------------------------------------------------------- HLO
@dataclass(frozen=True)
class DotDims:
    """A ``dot``'s dimension numbers (``lhs_contracting_dims={1}``...): which of each operand's dimensions it
    contracts and which are batch dimensions ([] where the instruction names none)."""

    lhs_contracting: list[int] = field(default_factory=list)
    rhs_contracting: list[int] = field(default_factory=list)
    lhs_batch: list[int] = field(default_factory=list)
    rhs_batch: list[int] = field(default_factory=list)


@dataclass
class HloInstr:
    name: str
    opcode: str
    dtype: str
    dims: list[int]
    layout: list[int]  # minor-to-major, as HLO prints it
    operands: list[str]
    dot: DotDims  # a dot's dimension numbers (empty for any other instruction)
    calls: str
    comp: str
    root: bool
    op_name: str
    out_bytes: int
    conv_flops: float = 0.0  # a convolution's (hlo_text.conv_flops)


_DIMS = re.compile(r"(lhs_contracting_dims|rhs_contracting_dims|lhs_batch_dims|rhs_batch_dims)=\{([\d,]*)\}")


def parse_hlo(text: str) -> dict[str, HloInstr]:
    """Every instruction of the module (names are unique module-wide) with its shape, operands, dims."""
    out: dict[str, HloInstr] = {}
    instrs = hlo_text.parse(text).instructions()
    for ins in instrs.values():
        dtype, dims, layout = ("tuple", [], []) if ins.is_tuple or not ins.shapes else (
            ins.shapes[0][0], list(ins.shapes[0][1]), list(ins.layouts[0]))
        found = {k: [int(x) for x in v.split(",") if x] for k, v in _DIMS.findall(ins.attrs)}
        dot = DotDims(**{k.removesuffix("_dims"): v for k, v in found.items()})
        operands = [o for o in ins.operands if o in instrs]  # not a parameter's number or a constant's value
        conv = (hlo_text.conv_flops(ins, instrs) or 0.0) if ins.opcode == "convolution" else 0.0
        out[ins.name] = HloInstr(ins.name, ins.opcode, dtype, dims, layout, operands, dot, ins.calls,
                                 ins.comp, ins.root, ins.op_name, int(ins.nbytes), conv)
    return out


def _minor(ins: HloInstr | None) -> int | None:
    if ins is None or not ins.dims:
        return None
    return ins.layout[0] if ins.layout else len(ins.dims) - 1


def hlo_dot(ins: HloInstr, table: dict[str, HloInstr]) -> OpShape:
    """A ``dot``: batch, m, k, n from its operands' shapes and its dimension numbers; N/T from the layouts."""
    if len(ins.operands) < 2:
        return OpShape()
    lhs, rhs = table.get(ins.operands[0]), table.get(ins.operands[1])
    if lhs is None or rhs is None or not lhs.dims or not rhs.dims:
        return OpShape()
    lc, rc = ins.dot.lhs_contracting, ins.dot.rhs_contracting
    lb, rb = ins.dot.lhs_batch, ins.dot.rhs_batch
    batch = math.prod(lhs.dims[i] for i in lb)
    k = math.prod(lhs.dims[i] for i in lc)
    m = math.prod(d for i, d in enumerate(lhs.dims) if i not in lc and i not in lb)
    n = math.prod(d for i, d in enumerate(rhs.dims) if i not in rc and i not in rb)
    lm, rm = _minor(lhs), _minor(rhs)
    ta = "N" if (lm in lc or len(lhs.dims) - len(lb) < 2) else "T"
    tb = "T" if (rm in rc and len(rhs.dims) - len(rb) >= 2) else "N"
    return OpShape(matmul_flops(batch, m, k, n), 0.0, max(batch, 1), m, k, n, ta + tb)


def _conv(ins: HloInstr, table: dict[str, HloInstr]) -> OpShape:
    """A convolution: its FLOPs as XLA counts them (``hlo_text.conv_flops``, read when the module was parsed);
    no matmul shape."""
    return OpShape(flops=ins.conv_flops)


class HloShapes:
    """FLOPs/bytes/matmul shapes of the executed instructions of one HLO module (by instruction name)."""

    def __init__(self, text: str) -> None:
        self.table = parse_hlo(text)
        self.by_comp: dict[str, list[HloInstr]] = {}
        for ins in self.table.values():
            self.by_comp.setdefault(ins.comp, []).append(ins)
        self._cache: dict[str, OpShape] = {}

    def _dots(self, comp: str, depth: int) -> list[OpShape]:
        found: list[OpShape] = []
        for ins in self.by_comp.get(comp, []):
            if ins.opcode == "dot":
                found.append(hlo_dot(ins, self.table))
            elif ins.opcode == "convolution":
                found.append(_conv(ins, self.table))
            elif ins.calls and ins.opcode == "fusion" and depth < 4:
                found += self._dots(ins.calls, depth + 1)
        return found

    def op(self, name: str) -> OpShape:
        """What one execution of instruction ``name`` computes (empty when the module does not have it)."""
        if name in self._cache:
            return self._cache[name]
        ins = self.table.get(name)
        shape = OpShape()
        if ins is not None:
            if ins.opcode == "dot":
                parts = [hlo_dot(ins, self.table)]
            elif ins.opcode == "convolution":
                parts = [_conv(ins, self.table)]
            elif ins.opcode == "fusion" and ins.calls:
                parts = self._dots(ins.calls, 0)
            else:
                parts = []
            moved = ins.out_bytes + sum(self.table[o].out_bytes for o in ins.operands if o in self.table)
            mats = [p for p in parts if p.batch]
            shape = OpShape(flops=sum(p.flops for p in parts), bytes=float(moved), parts=mats)
            if len(mats) == 1:  # one dot: the instruction is that matmul
                d = mats[0]
                shape.batch, shape.m, shape.k, shape.n, shape.trans = d.batch, d.m, d.k, d.n, d.trans
        self._cache[name] = shape
        return shape
