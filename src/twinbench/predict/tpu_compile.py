"""The step compiled for a TPU this machine does not have, by the TPU compiler itself: libtpu's deviceless
ahead-of-time compilation (``jax.experimental.topologies``), run on this CPU.

The compiled program's kernels are what the chip runs: which element-wise work XLA:TPU fused into which product
(and recomputes there), what an asynchronous copy placed on the chip ahead, how each array is tiled; predict
--compile costs the step from them (:func:`compiled_ops`) rather than from its own fusion of the unoptimized program.
The compiled program's ``memory_analysis()`` is what a run on the chip reports as its peak (``measure/memory.py``:
arguments + outputs not aliased + temporaries + code; a TPU's allocator leaves the temporaries out), so the
memory ``twinbench predict --compile`` gives is the chip's own figure, not a model of it: the GPT-2 124M,
BERT-base and Llama-300M steps (bf16, splash) compiled so need what the chip reported for the same code
(benchmarks/RESULTS.md, "The fifth sitting"). It needs the ``libtpu``
package matching the installed JAX (``pip install "jax[tpu]==$JAX_VERSION"``, or the libtpu wheel alone); a CPU
is enough, no TPU is touched. The compile is the one the chip's first step would do, as long on a CPU as the
TPU compiler takes for the model.
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import math
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from twinbench.predict.roofline import Op

if TYPE_CHECKING:
    from twinbench.hlo_text import Instr

#: --device name -> the one-chip topology libtpu compiles for (v4 and v5p chips are 3-D slices, v5e and v6e 2-D)
TOPOLOGIES = {"tpu-v4": "v4:1x1x1", "tpu-v5e": "v5e:1x1", "tpu-v5p": "v5p:1x1x1", "tpu-v6e": "v6e:1x1"}


class TpuCompileUnavailable(RuntimeError):
    """No TPU compiler here (libtpu missing, or it refused this JAX): the one-line reason."""


@dataclass(frozen=True)
class CompiledStep:
    """What the TPU compiler says of one step."""

    sizes: dict[str, int]   #: memory_analysis(): argument, output, alias, temp, generated_code bytes
    device_kind: str        #: the compiled-for device ("TPU v5 lite")
    compiler: str           #: "libtpu 0.0.42.1"
    kernels: int = 0        #: Mosaic (Pallas TPU) kernels in the compiled program
    ops: tuple[Op, ...] = ()  #: its other kernels as XLA:TPU built them (:func:`compiled_ops`)

    @property
    def peak_bytes(self) -> int:
        from twinbench.measure.memory import jax_step_estimate

        return jax_step_estimate(self.sizes)


def libtpu_version() -> str | None:
    """The installed libtpu's version, or None where there is none."""
    if importlib.util.find_spec("libtpu") is None:
        return None
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("libtpu")
    except PackageNotFoundError:
        return "unknown"


@functools.cache
def target_device(device: str) -> Any:
    """The first device of ``device``'s one-chip topology, compiled for from here (described once per
    process)."""
    if device not in TOPOLOGIES:
        raise TpuCompileUnavailable(f"no TPU topology for --device {device}")
    if libtpu_version() is None:
        import jax

        raise TpuCompileUnavailable("--compile needs the TPU compiler (libtpu) on this machine: "
                                    f'pip install "jax[tpu]=={jax.__version__}"')
    from jax.experimental import topologies

    _no_tpu_here()
    try:
        topo = topologies.get_topology_desc(topology_name=TOPOLOGIES[device], platform="tpu",
                                            chips_per_host_bounds=(1, 1, 1))
    except Exception as e:  # a libtpu of another JAX release, or one that cannot start here
        raise TpuCompileUnavailable(f"libtpu {libtpu_version()} could not describe a {device} here: "
                                    f"{str(e).splitlines()[0][:200]}") from e
    return topo.devices[0]


def _no_tpu_here() -> None:
    """On a machine without a TPU (no ``/dev/accel*``, no ``/dev/vfio``), libtpu starting up looks for the
    VM's accelerator type and workers and prints an error for each it cannot find: tell it what it is asked
    to compile for, one local chip, and keep JAX's own devices on the CPU (it would try the TPU first)."""
    if glob.glob("/dev/accel*") or os.path.exists("/dev/vfio"):
        return
    os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-1")
    os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
    import jax

    if not jax.config.jax_platforms:
        jax.config.update("jax_platforms", "cpu")


def compile_for(trainer: Any, x: Any, y: Any, device: str, state: Any = None) -> Any:
    """``trainer``'s jitted step compiled for ``device`` (a --device TPU name) by libtpu, for abstract arguments
    of the shapes of its state (``state``: its (params, optimizer state), shapes will do) and one batch (nothing
    is placed on any device): JAX's ``Compiled``."""
    import jax
    from jax.sharding import SingleDeviceSharding

    from twinbench.models.layers_jax import lowering_for

    place = SingleDeviceSharding(target_device(device))

    def abstract(a: Any) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=place)

    params, opt_state = state if state is not None else (trainer.params, trainer.opt_state)
    args = jax.tree.map(abstract, (params, opt_state, x, y))
    with lowering_for("tpu"):  # the Pallas kernels as Mosaic kernels, as on the chip
        return trainer.train_step.lower(*args).compile()


def mosaic_kernels(hlo: str) -> int:
    """The Mosaic (Pallas TPU) kernels a compiled program's text calls."""
    return hlo.count('custom_call_target="tpu_custom_call"')


def compile_step(trainer: Any, x: Any, y: Any, device: str, state: Any = None) -> CompiledStep:
    """What the TPU compiler says of ``trainer``'s step on ``device`` (:func:`compile_for`)."""
    from twinbench.measure.memory import compiled_sizes

    compiled = compile_for(trainer, x, y, device, state)
    text = compiled.as_text()
    return CompiledStep(compiled_sizes(compiled), target_device(device).device_kind, f"libtpu {libtpu_version()}",
                        mosaic_kernels(text), tuple(compiled_ops(text)))


#: top-level ops of a compiled program that move nothing themselves: names, tuples, and the asynchronous copies and
#: slices XLA:TPU overlaps with the kernels around them (their device time hides behind those)
_NOT_KERNELS = {"parameter", "get-tuple-element", "tuple", "bitcast", "constant", "after-all", "opt-barrier",
                "optimization-barrier", "copy-start", "copy-done", "slice-start", "slice-done", "async-start",
                "async-done", "async-update", "partition-id", "replica-id"}


def hbm_bytes(ins: Any) -> float:
    """An instruction's result bytes in the chip's HBM, tiled as the chip stores them (:func:`_tiled`): an element
    whose layout names another memory space (``S(1)``: on-chip memory an asynchronous copy filled ahead) moves
    nothing through HBM."""
    from twinbench.hlo_text import DTYPE_BYTES

    tilings = ins.tilings or [""] * len(ins.shapes)
    layouts = ins.layouts or [()] * len(ins.shapes)
    return float(sum(DTYPE_BYTES.get(dt, 4) * _tiled(dims, order, tiling)
                     for (dt, dims), order, tiling in zip(ins.shapes, layouts, tilings, strict=False)
                     if "S(" not in tiling))


def _tiled(shape: tuple[int, ...], order: tuple[int, ...], tiling: str) -> int:
    """Elements an array takes in memory with its layout's tiling (``:T(8,128)`` after the minor-to-major
    ``order``: its two most minor dims padded to multiples of 8 and 128), as the chip stores it: a ``[..., 128, 1]``
    array takes 128 times its size."""
    m = re.match(r":T\(([0-9,]+)\)", tiling)
    if not m or not shape:
        return math.prod(shape)
    padded = list(shape)
    for t, d in zip(reversed([int(t) for t in m.group(1).split(",")]), order, strict=False):
        padded[d] = -(-padded[d] // t) * t  # the tile's last size pads the most minor dim
    return math.prod(padded)


def _called(ins: Instr, computations: dict[str, list[Instr]]) -> list[Instr]:
    """The instructions of the computation a fusion calls."""
    from twinbench.predict import hlo

    return computations.get(hlo._attr(ins.attrs, "calls") or "", [])


def _work(fusion: Instr, by: dict[str, Instr], computations: dict[str, list[Instr]], depth: int = 0) -> tuple[
        float, float, str]:
    """(FLOPs of its products, its element-wise ops, its first product's operand dtype or "") of a fusion, through the
    fusions nested in it (XLA:TPU fuses a loop fusion into a product's as a fusion of its own)."""
    from twinbench.predict import hlo

    inner = _called(fusion, computations)
    inner_by = {i.name: i for i in inner}
    flops = vector = 0.0
    dtype = ""
    for i in inner:
        if i.opcode == "fusion" and depth < 8:
            f, v, d = _work(i, inner_by, computations, depth + 1)
            flops, vector, dtype = flops + f, vector + v, dtype or d
        elif i.opcode in hlo.MATMUL:
            flops += hlo._dot_flops(i, inner_by)
            if not dtype and i.operands and i.operands[0] in inner_by and inner_by[i.operands[0]].shapes:
                dtype = inner_by[i.operands[0]].shapes[0][0]
        else:
            vector += hlo._vector_ops(i, inner_by)
    return flops, vector, dtype


_SLICING = {"dynamic-slice", "slice"}


def _param_read(inner: list[Any], param: str, computations: dict[str, list[Any]], depth: int = 0) -> float | None:
    """Bytes a fused computation reads of its parameter ``param`` when it only slices it or updates it in place
    (through the fusions nested in it), or None: it reads the whole array."""
    from twinbench.predict import hlo

    total = 0.0
    uses = [i for i in inner if param in i.operands]
    if not uses:
        return None
    for u in uses:
        if u.opcode in _SLICING and u.operands[0] == param:
            total += u.nbytes
        elif u.opcode == "dynamic-update-slice" and u.operands[0] == param and param not in u.operands[1:]:
            continue  # updated in place: the array is not read
        elif u.opcode == "fusion" and depth < 8:
            nested = _called(u, computations)
            names = {hlo._literal(i): i.name for i in nested if i.opcode == "parameter"}
            parts = [_param_read(nested, names.get(j, ""), computations, depth + 1)
                     for j, o in enumerate(u.operands) if o == param]
            if any(x is None for x in parts):
                return None
            total += sum(x for x in parts if x is not None)
        else:
            return None
    return total


def _moved(ins: Instr, by: dict[str, Instr], computations: dict[str, list[Instr]], in_hbm: Any) -> float:
    """HBM bytes a kernel reads and writes: its operands and results, except that an operand it only slices (a
    layer's weights from the stacked array a loop body indexes) costs the slices it takes, and a result it updates
    in place (``dynamic-update-slice``: a layer's gradient into the stacked array) costs the update, neither the
    whole array."""
    from twinbench.predict import hlo

    if ins.opcode in _SLICING:
        return 2.0 * ins.nbytes
    if ins.opcode == "dynamic-update-slice" and len(ins.operands) > 1 and ins.operands[1] in by:
        return 2.0 * by[ins.operands[1]].nbytes
    if ins.opcode != "fusion":
        return sum(in_hbm(o) for o in ins.operands if o in by) + in_hbm(ins.name)
    inner = _called(ins, computations)
    inner_by = {i.name: i for i in inner}
    params = {hlo._literal(i): i.name for i in inner if i.opcode == "parameter"}
    root = next((i for i in inner if i.root), None)
    outs = [inner_by[o] for o in root.operands if o in inner_by] if root is not None and root.opcode == "tuple" else (
        [root] if root is not None else [])
    read = 0.0
    for k, operand in enumerate(ins.operands):
        if operand not in by:
            continue
        part = _param_read(inner, params.get(k, ""), computations) if k in params else None
        read += in_hbm(operand) if part is None else part
    if not any(o.opcode == "dynamic-update-slice" for o in outs):
        return read + in_hbm(ins.name)
    written = sum(inner_by[o.operands[1]].nbytes if o.opcode == "dynamic-update-slice" and len(o.operands) > 1
                  and o.operands[1] in inner_by else o.nbytes for o in outs)
    return read + written


def compiled_ops(text: str) -> list[Op]:
    """The kernels of a program compiled for a TPU (its optimized HLO text), each costed by what XLA:TPU put in it:
    a fusion's products (FLOPs), the element-wise work fused with them (``Op.vector_ops``) and its operands and
    results in HBM (bytes: what an asynchronous copy placed on the chip ahead is not read from HBM again). The Mosaic kernels (``tpu_custom_call``: splash attention) are left out: the caller costs them
    (``attention.py``). A loop's body counts its trip count (``hlo.flatten``); what it reads of a stacked array
    through a slice, and writes into one in place, is the slice's bytes (:func:`_moved`)."""
    from twinbench.hlo_text import parse
    from twinbench.predict import hlo

    mod = parse(text)
    flat = hlo.flatten(mod)
    by = {i.name: i for i in flat.instrs}

    def in_hbm(name: str) -> float:
        return hbm_bytes(by[name]) if name in by else 0.0

    ops: list[Op] = []
    for ins in flat.instrs:
        if ins.opcode in _NOT_KERNELS or (ins.opcode == "custom-call" and "tpu_custom_call" in ins.attrs):
            continue
        if ins.opcode == "custom-call" and ("ConcatBitcast" in ins.attrs or "AllocateBuffer" in ins.attrs):
            continue  # a view of its operands laid side by side, or a buffer reserved: no data moved
        flops, vector, dtype = _work(ins, by, mod.computations) if ins.opcode == "fusion" else (
            0.0, hlo._vector_ops(ins, by), "")
        moved = _moved(ins, by, mod.computations, in_hbm)
        ops.append(Op(ins.name, "matmul" if flops else "fused", flops, moved, dtype or "f32", 1, flat.counts.get(ins.name, 1),
                      f"{'fusion with a product' if flops else ins.opcode} {hlo._shape_text(ins)[:80]}",
                      vector_ops=vector))
    return ops
