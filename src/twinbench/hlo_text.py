"""HLO module text, read once for every reader: its computations, each instruction's name, opcode, result
shapes (with their layouts), operands and attributes, and which computation is the entry.

The same reader serves the unoptimized HLO a jitted step lowers to (``predict/hlo.py`` fuses it as a TPU or
GPU compiler would) and the compiled HLO a run dumps (``explain/hlo.py`` names what each executed op does,
``explain/flops.py`` counts its FLOPs and bytes). An instruction line reads::

    [ROOT] %name = TYPE opcode(operands), attribute=value, ..., metadata={op_name="..."}

where TYPE is one shape (``f32[8,1024]{1,0}``, a layout after it when compiled) or a tuple of them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

#: bytes per element of each HLO element type (``token``: none); an unknown type counts 4
DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s4": 0.5, "u4": 0.5, "f8e4m3fn": 1, "f8e5m2": 1, "bf16": 2, "f16": 2,
               "s16": 2, "u16": 2, "f32": 4, "s32": 4, "u32": 4, "f64": 8, "s64": 8, "u64": 8, "c64": 8,
               "c128": 16, "token": 0}

_SHAPE = re.compile(r"([a-z]+[0-9]*[a-z0-9]*)\[([0-9,]*)\](?:\{([0-9,]*)([^}]*)\}?)?")
_HEAD = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*(\(.*\))?\s*(->.*)?\{\s*$")
_OPNAME = re.compile(r'op_name="([^"]*)"')
_CALLS = re.compile(r"calls=%?([\w.\-]+)")
_COMMENT = re.compile(r"/\*.*?\*/")
#: the longest ``op_name`` kept (a path of JAX scopes runs to a few hundred characters; a longer one is cut)
MAX_OP_NAME = 4096


@dataclass
class Instr:
    """One instruction: its result's shapes ``(dtype, dims)`` (a tuple's elements, in order) and their layouts
    (minor to major, as HLO prints them; empty when the text has none), operand names, and the text after the
    operands (attributes, metadata)."""

    name: str
    opcode: str
    shapes: list[tuple[str, tuple[int, ...]]]
    operands: list[str]
    attrs: str
    layouts: list[tuple[int, ...]] = field(default_factory=list)
    is_tuple: bool = False  #: the result type is a tuple
    comp: str = ""          #: the computation it belongs to
    root: bool = False
    #: the rest of each element's layout, after its minor-to-major order: a compiled TPU program's tiling and
    #: memory space (``:T(8,128)(2,1)S(1)``); empty when the text has none
    tilings: list[str] = field(default_factory=list)

    @property
    def nbytes(self) -> float:
        """Bytes of the result (every element of a tuple)."""
        return sum(DTYPE_BYTES.get(dt, 4) * math.prod(dims) for dt, dims in self.shapes)

    @property
    def op_name(self) -> str:
        """The ``op_name`` of its metadata: JAX's transformation path and named scopes ("" when none)."""
        m = _OPNAME.search(self.attrs)
        return m.group(1)[:MAX_OP_NAME] if m else ""

    @property
    def calls(self) -> str:
        """The computation a fusion (or call) runs, "" when none."""
        m = _CALLS.search(self.attrs)
        return m.group(1) if m else ""


@dataclass
class Module:
    """The computations of a module, in text order, and the entry's name."""

    computations: dict[str, list[Instr]] = field(default_factory=dict)
    entry: str = ""

    def instructions(self) -> dict[str, Instr]:
        """Every instruction by name (names are unique module-wide; the first one wins otherwise)."""
        out: dict[str, Instr] = {}
        for instrs in self.computations.values():
            for ins in instrs:
                out.setdefault(ins.name, ins)
        return out


def _balanced(s: str, i: int) -> int:
    """Index just past the bracket group opening at ``s[i]``."""
    depth, pairs = 0, {"(": ")", "{": "}", "[": "]"}
    closers = set(pairs.values())
    while i < len(s):
        c = s[i]
        if c in pairs:
            depth += 1
        elif c in closers:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


def _split_top(s: str) -> list[str]:
    """``s`` split at its top-level commas."""
    out, depth, cur = [], 0, []
    for c in s:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    if "".join(cur).strip():
        out.append("".join(cur))
    return out


def parse_instr(line: str, comp: str = "") -> Instr | None:
    """One instruction line; None for anything else."""
    s = line.strip()
    root = s.startswith("ROOT ")
    if root:
        s = s[5:]
    if " = " not in s:
        return None
    name, rest = s.split(" = ", 1)
    rest = rest.lstrip()
    if rest.startswith("("):
        end = _balanced(rest, 0)
    else:
        end = rest.find(" ")
        if end < 0:
            return None
    type_text, rest = rest[:end], rest[end:].lstrip()
    m = re.match(r"([a-z][\w\-]*)\(", rest)
    if not m:
        return None
    close = _balanced(rest, m.end() - 1)
    inside = _COMMENT.sub("", rest[m.end():close - 1])  # ``/*index=5*/`` before every fifth operand
    operands = [o.strip().split(" ")[-1].lstrip("%") for o in _split_top(inside) if o.strip()]
    found = [(dt, dims, lay, tiling) for dt, dims, lay, tiling in _SHAPE.findall(type_text) if dt in DTYPE_BYTES]
    shapes = [(dt, tuple(int(d) for d in dims.split(",") if d)) for dt, dims, _, _ in found]
    layouts = [tuple(int(d) for d in lay.split(",") if d) for _, _, lay, _ in found]
    return Instr(name.strip().lstrip("%"), m.group(1), shapes, operands, rest[close:], layouts,
                 type_text.startswith("("), comp, root, [tiling for _, _, _, tiling in found])


def parse(text: str) -> Module:
    """The computations of an HLO module's text, and which one is the entry (the last one when none says)."""
    mod, current = Module(), None
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith(("//", "HloModule", "#")):
            continue
        if not line.startswith((" ", "\t")) and line.rstrip().endswith("{"):
            m = _HEAD.match(line.strip())
            if m:
                current = m.group(2)
                mod.computations[current] = []
                if m.group(1):
                    mod.entry = current
            continue
        if line.strip() == "}":
            current = None
            continue
        if current is not None:
            ins = parse_instr(line, current)
            if ins is not None:
                mod.computations[current].append(ins)
    if not mod.entry and mod.computations:
        mod.entry = list(mod.computations)[-1]
    return mod


def dumped_module(directory: Path, module: str) -> Path | None:
    """The compiled HLO of ``module`` (e.g. ``jit_train_step``) in an ``--xla_dump_to`` directory: its
    ``*after_optimizations.txt``, the last compile of that module, else the largest module; None when the
    directory holds none."""
    dumps = list(directory.rglob("*after_optimizations.txt"))
    if not dumps:
        return None
    # module_0020.jit_train_step.cpu_after_optimizations.txt: the module, its last compile
    named = sorted(f for f in dumps if module and f.name.split(".")[1:2] == [module])
    return named[-1] if named else max(dumps, key=lambda f: f.stat().st_size)


def _window_dims(attrs: str) -> list[dict[str, tuple[int, ...]]]:
    """A convolution's ``window={size=AxB pad=L_HxL_H stride=.. lhs_dilate=.. rhs_dilate=..}``, per spatial dim."""
    m = re.search(r"window=\{([^}]*)\}", attrs)
    fields = dict(kv.split("=", 1) for kv in m.group(1).split()) if m else {}
    defaults = {"pad": (0, 0), "stride": (1,), "lhs_dilate": (1,), "rhs_dilate": (1,)}
    parts = {k: [tuple(int(v) for v in dim.split("_")) for dim in fields[k].split("x")]
             for k in ("size", *defaults) if k in fields}
    return [{"size": size, **{k: parts[k][d] if k in parts else default for k, default in defaults.items()}}
            for d, size in enumerate(parts.get("size", []))]


def _valid_taps(n: int, out: int, w: dict[str, tuple[int, ...]]) -> int:
    """Over every output position of one spatial dim, the kernel taps that land on an input element (not on
    padding or between dilated inputs): what a convolution multiplies there (XLA's cost analysis counts the same)."""
    (size,), (lo, _hi), (stride,), (ldil,), (rdil,) = w["size"], w["pad"], w["stride"], w["lhs_dilate"], w["rhs_dilate"]
    span = (n - 1) * ldil + 1  # the dilated input's extent
    taps = 0
    for k in range(size):
        # output p reads dilated input index p * stride + offset: valid inside [0, span) and on the dilation's grid
        offset = k * rdil - lo
        first, last = max(0, -(offset // stride)), min(out - 1, (span - 1 - offset) // stride)
        if ldil == 1:
            taps += max(0, last - first + 1)
        else:
            taps += sum(1 for p in range(first, last + 1) if (p * stride + offset) % ldil == 0)
    return taps


def conv_flops(ins: Instr, by: dict[str, Instr]) -> float | None:
    """A ``convolution``'s FLOPs as XLA's cost analysis counts them: 2 x batch x output features x input features
    per group x the valid taps of every spatial dim (padding, and the holes of an input dilation, a transposed
    convolution's, multiply nothing; a product XLA:TPU writes as a convolution, a padded window standing for a
    batch or an outer-product dim, counts what it multiplies, not its window's full size), the dimensions placed
    by its ``dim_labels``; None where its operands or labels cannot be read. ``by``: the module's instructions."""
    lhs = by.get(ins.operands[0]) if ins.operands else None
    rhs = by.get(ins.operands[1]) if len(ins.operands) > 1 else None
    m = re.search(r"dim_labels=([^_]+)_([^-]+)->(\S+?)[,\s]", ins.attrs + " ")
    if lhs is None or rhs is None or not lhs.shapes or not rhs.shapes or not ins.shapes or not m:
        return None
    lhs_l, _rhs_l, out_l = m.group(1), m.group(2), m.group(3).rstrip(",")
    ldims, odims = lhs.shapes[0][1], ins.shapes[0][1]
    if len(lhs_l) != len(ldims) or len(out_l) != len(odims):
        return None
    try:  # a text not spelled as XLA spells it (labels without a batch, a window of other lengths): not read
        return _conv_fma(ins.attrs, lhs_l, out_l, ldims, odims) * 2.0
    except (ValueError, IndexError, ZeroDivisionError):
        return None


def _conv_fma(attrs: str, lhs_l: str, out_l: str, ldims: tuple[int, ...], odims: tuple[int, ...]) -> float:
    groups = re.search(r"feature_group_count=(\d+)", attrs)
    fma = float(odims[out_l.index("b")] * odims[out_l.index("f")] * ldims[lhs_l.index("f")])
    fma /= int(groups.group(1)) if groups else 1
    windows = _window_dims(attrs)
    for d, w in enumerate(windows):
        c = str(d)
        if c not in lhs_l or c not in out_l:
            raise ValueError(f"spatial dimension {c} is not labelled")
        fma *= _valid_taps(ldims[lhs_l.index(c)], odims[out_l.index(c)], w)
    for c in out_l:  # spatial dims the window does not name (none: a 1 x 1 window each)
        if c.isdigit() and int(c) >= len(windows):
            fma *= odims[out_l.index(c)]
    return fma
