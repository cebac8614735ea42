"""Hugging Face checkpoints (``config.json`` + ``model.safetensors``) <-> ModelConfig and canonical weights.

``load_hf(path)`` reads a local checkpoint of a family's ``model_type`` into twinbench's :class:`ModelConfig`
and canonical layout; ``save_hf(cfg, weights, path)`` writes the canonical weights back as a checkpoint that
``transformers`` loads offline (``from_pretrained(path)``). This module is the format-independent part; each
family's mapping (names, layouts, the config fields it accepts) is an :class:`HFFormat` in its folder
(``models/gpt/hf.py``, ``models/bert/hf.py``, ...), reached through ``Family.hf``.

Only ``json`` and ``safetensors.numpy`` are used here: no torch, JAX or transformers import, so the parent
process can read a checkpoint's shape without loading a framework.

Checkpoints may be sharded (``model.safetensors.index.json``) and fp16/bf16 (read as float32). Exported
configs set dropout to 0: the twins have none, so the exported model behaves as it was measured.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import numpy as np

from twinbench.config import ModelConfig, SpecError
from twinbench.folder_io import MAX_SETTINGS, open_file, read_file, terminal
from twinbench.models.family import FAMILIES, Family
from twinbench.models.weights import Canonical

CONFIG = "config.json"
SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
FLAG = "--init-from"



@dataclass(frozen=True)
class HFFormat:
    """One family's Hugging Face mapping (``Family.hf``)."""

    model_type: str  # config.json's model_type
    architecture: str  # a word of ``architectures`` that names it when model_type is missing (old configs)
    fields: tuple[str, ...]  # the ModelConfig fields a checkpoint determines
    config: Callable[[RawConfig, str], ModelConfig]  # (config.json, where) -> ModelConfig (decoded with decode())
    to_canonical: Callable[[dict[str, np.ndarray], ModelConfig, str], Canonical]  # (tensors, cfg, where)
    to_hf: Callable[[ModelConfig, Canonical], tuple[msgspec.Struct, dict[str, np.ndarray]]]  # -> config, tensors
    shapes: Callable[[ModelConfig], dict[str, tuple[int, ...]]]  # canonical name -> shape
    #: (a checkpoint's tensor name, its number of dimensions) -> (its canonical name, whether it is a linear weight
    #: that ``to_canonical`` transposes), or None for a tensor ``to_canonical`` leaves out (a buffer, another head):
    #: what ``to_canonical`` does to a name, so that a checkpoint's header is checked without its tensors
    name: Callable[[str, int], tuple[str, bool] | None]
    #: modules ``to_canonical`` initialises itself when a checkpoint has none of their weights (BERT's head)
    fresh: tuple[str, ...] = ()


#: A checkpoint's ``config.json`` as read: a user's file, of whatever fields its library wrote; each family decodes
#: the fields it knows into its own struct (:func:`decode`), the rest is never read.
RawConfig = dict[str, object]
S = TypeVar("S", bound=msgspec.Struct)


class ConfigFields(msgspec.Struct, kw_only=True, frozen=True):
    """The fields every family's ``config.json`` struct has: what names the family."""

    architectures: list[str] | None = None
    model_type: str | None = None


def decode(raw: RawConfig, cls: type[S], what: str, where: str) -> S:
    """The fields of ``config.json`` the family ``what`` reads, typed (a number written as a string is read as
    one, as ``int()`` would); a missing or mistyped one is one SpecError line naming it."""
    try:
        return msgspec.convert(raw, cls, strict=False)
    except msgspec.ValidationError as e:
        raise SpecError(f"{where}: {CONFIG} lacks a valid {what} field ({terminal(e, 120)})") from None


#: The ModelConfig fields every checkpoint determines (a family's ``fields`` starts with them).
SHAPE_FIELDS = ("family", "layers", "d_model", "heads", "d_ff", "vocab", "context")


def _formats() -> dict[str, tuple[Family, HFFormat]]:
    return {f.hf.model_type: (f, f.hf) for f in FAMILIES.values() if f.hf is not None}


# ---------------------------------------------------------------------------------------------- reading
def read_config(path: str | Path, flag_name: str = FLAG) -> RawConfig:
    """The checkpoint's ``config.json`` as a dict; a one-line :class:`SpecError` if it is not there."""
    p = Path(path)
    if not p.is_dir():
        raise SpecError(f"{flag_name} {path}: no such directory (give a Hugging Face checkpoint directory)")
    cfg_path = p / CONFIG
    if not cfg_path.is_file():
        raise SpecError(f"{flag_name} {path}: no {CONFIG} there")
    try:
        cfg = json.loads(read_file(cfg_path.resolve(), MAX_SETTINGS))
    except (ValueError, UnicodeDecodeError) as e:
        raise SpecError(f"{flag_name} {path}: {CONFIG} is not valid JSON ({terminal(e, 120)})") from None
    except RecursionError:
        raise SpecError(f"{flag_name} {path}: {CONFIG} is JSON nested too deeply for a model's config") from None
    except OSError as e:
        raise SpecError(f"{flag_name} {path}: {CONFIG}: {e.strerror or e}") from None
    if not isinstance(cfg, dict):
        raise SpecError(f"{flag_name} {path}: {CONFIG} is not a JSON object")
    for k, v in cfg.items():  # a size no model has (n_embd 1e308, NaN): one short line, not 309 digits later
        if isinstance(v, (int, float)) and not isinstance(v, bool) and not abs(v) <= 1e12:  # NaN, inf too
            shown = f"{v:.3g}" if isinstance(v, float) else f"~1e{len(str(abs(v))) - 1}"
            raise SpecError(f"{flag_name} {path}: {CONFIG}'s {terminal(k, 40)} is {shown}, not a value a model's "
                            "config holds")
    return cfg


def model_type(hf: RawConfig) -> str:
    """The checkpoint's ``model_type``, else the family one of its ``architectures`` names (old configs)."""
    try:
        named = msgspec.convert(hf, ConfigFields)
    except msgspec.ValidationError:  # neither of the shape transformers writes: no family of ours
        return ""
    if named.model_type:
        return named.model_type
    archs = " ".join(named.architectures or [])
    return next((t for t, (_, fmt) in _formats().items() if fmt.architecture in archs), "")


def config_from_hf(path: str | Path, flag_name: str = FLAG) -> ModelConfig:
    """The twin's ModelConfig for the checkpoint at ``path`` (reads ``config.json`` only)."""
    hf = read_config(path, flag_name)
    mt = model_type(hf)
    formats = _formats()
    if mt not in formats:
        raise SpecError(f"{flag_name} {path}: model_type {mt or '(none)'!r} is not supported; "
                        f"allowed: {', '.join(formats)}")
    return formats[mt][1].config(hf, f"{flag_name} {path}")


def read_tensors(path: str | Path, flag_name: str = FLAG) -> dict[str, np.ndarray]:
    """Every tensor of ``model.safetensors`` (or of the shards its index names), as float32 NumPy."""
    from safetensors.numpy import load_file

    files = weight_files(path, flag_name)
    out: dict[str, np.ndarray] = {}
    for f in files:
        try:
            tensors = load_file(str(f))
        except TypeError:  # bfloat16, which NumPy lacks: widen it to float32 ourselves
            tensors = _read_widening_bf16(f, f"{flag_name} {path}")
        except Exception as e:  # a truncated or foreign file: one line, not a traceback
            raise SpecError(f"{flag_name} {path}: cannot read {f.name}: {type(e).__name__}: {e}") from None
        for k, v in tensors.items():
            out[k] = np.asarray(v, dtype=np.float32) if v.dtype != np.float32 else v
    return out


def weight_files(path: str | Path, flag_name: str = FLAG) -> list[Path]:
    """The safetensors files of a checkpoint directory: ``model.safetensors``, or the shards its index names."""
    p = Path(path)
    if (p / SAFETENSORS).is_file():
        return [p / SAFETENSORS]
    if (p / SAFETENSORS_INDEX).is_file():
        try:
            index = msgspec.json.decode(read_file((p / SAFETENSORS_INDEX).resolve(), MAX_SETTINGS * 16), type=_Index)
            files = [p / f for f in sorted(set(index.weight_map.values()))]
            if any(len(Path(f.name).parts) != 1 or f.parent != p for f in files):
                raise ValueError("a shard outside the checkpoint's folder")
        except (OSError, ValueError, RecursionError) as e:  # msgspec's DecodeError is a ValueError
            raise SpecError(f"{flag_name} {path}: {SAFETENSORS_INDEX} is not readable JSON ({type(e).__name__})") from None
        missing = [f.name for f in files if not f.is_file()]
        if missing or not files:
            raise SpecError(f"{flag_name} {path}: shard files missing: {', '.join(missing) or '(index is empty)'}")
        return files
    bins = [f.name for f in p.glob("*.bin")] + [f.name for f in p.glob("*.h5")]
    hint = f" (found {', '.join(bins)}: re-save it with save_pretrained(safe_serialization=True))" if bins else ""
    raise SpecError(f"{flag_name} {path}: no {SAFETENSORS} there{hint}")


class _Index(msgspec.Struct, frozen=True):
    """What a sharded checkpoint's index says: which file holds each tensor."""

    weight_map: dict[str, str] = {}


#: the most a safetensors header may hold (the safetensors library refuses a larger one)
MAX_HEADER = 100_000_000
#: the tensor types ``read_tensors`` reads as float32 weights, and the bytes of one element of each
FLOAT_DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2}


def check_weights(path: str | Path, flag_name: str = FLAG) -> None:
    """Every safetensors file of the checkpoint whole, from its header alone (the documented layout: a u64
    header size, the JSON header, then the data every tensor's ``data_offsets`` points into), and every tensor
    it names of the name, shape and type the model of its ``config.json`` needs: a truncated, empty or foreign
    file, or one of another shape, is one SpecError line before any run starts, not a failure of every run.
    No tensor is read."""
    tensors: dict[str, tuple[str, Tensor]] = {}
    for f in weight_files(path, flag_name):
        tensors.update((k, (f.name, t)) for k, t in _header(f, f"{flag_name} {path}: {f.name}").items())
    check_header_shapes(path, tensors, flag_name)


@dataclass(frozen=True)
class Tensor:
    """One tensor of a safetensors header, as :func:`check_layout` found it."""

    dtype: str  # a safetensors type (ST_ITEMSIZE)
    shape: tuple[int, ...]
    data_offsets: tuple[int, int]  # its bytes in the file's data, holding exactly that shape


def _header(f: Path, where: str) -> dict[str, Tensor]:
    """The tensors of the safetensors file ``f``'s header, its data offsets checked against the file's size."""
    try:
        with open_file(f.resolve(), "rb") as fh:  # the one opener: a FIFO or device is refused, never waited on
            size = os.fstat(fh.fileno()).st_size
            n = int.from_bytes(fh.read(8), "little")
            if size < 8 or n <= 0 or 8 + n > size:
                raise SpecError(f"{where} is not a safetensors file (or is truncated): its header does not fit "
                                f"its {size} bytes")
            if n > MAX_HEADER:
                raise SpecError(f"{where} is not a safetensors file: its header would be {n} bytes, over the "
                                f"{MAX_HEADER} a safetensors header may hold")
            header = json.loads(fh.read(n))
    except SpecError:
        raise
    except OSError as e:
        raise SpecError(f"{where}: cannot read it ({e.strerror or e})") from None
    except (ValueError, UnicodeDecodeError):
        raise SpecError(f"{where} is not a safetensors file: its header is not JSON") from None
    except RecursionError:
        raise SpecError(f"{where} is not a safetensors file: its header is JSON nested too deeply") from None
    if not isinstance(header, dict):
        raise SpecError(f"{where} is not a safetensors file: its header is not a JSON object")
    return check_layout(header, size - 8 - n, where)


#: the bytes of one element of every type a safetensors file may hold (its format's list)
ST_ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8,
               "U32": 4, "U16": 2, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


def check_layout(header: dict[str, Any], data: int, where: str) -> dict[str, Tensor]:
    """Every tensor of a safetensors header (each one, not only those a model maps) as the format defines it: a
    known type, a shape of non-negative integers, ``data_offsets`` within the file's ``data`` bytes holding
    exactly that shape, no two tensors' bytes overlapping; ``__metadata__`` a string-to-string object. A file
    that breaks one is one SpecError line here, not a failure inside a framework's loader. Returns its tensors.
    ``header``: the raw JSON object of the file (the format's own, read field by field to name what is wrong)."""
    spans, out = [], {}
    for name, info in header.items():
        shown = terminal(name, 80)
        if name == "__metadata__":
            if not isinstance(info, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                     for k, v in info.items()):
                raise SpecError(f"{where}: its __metadata__ is not an object of strings")
            continue
        if not isinstance(info, dict):
            raise SpecError(f"{where}: tensor {shown} is described by a JSON {type(info).__name__}, not an object")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if dtype not in ST_ITEMSIZE:
            raise SpecError(f"{where}: tensor {shown} is of type {terminal(str(dtype), 20)}, not a safetensors type")
        if not isinstance(shape, list) or not all(type(x) is int and x >= 0 for x in shape):
            raise SpecError(f"{where}: tensor {shown} has no valid shape ({terminal(str(shape), 60)})")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)
                and 0 <= offsets[0] <= offsets[1]):
            raise SpecError(f"{where}: tensor {shown} has no valid data_offsets ({terminal(str(offsets), 60)})")
        if offsets[1] > data:
            raise SpecError(f"{where} is truncated: tensor {shown} needs {offsets[1]} bytes of data, the file "
                            f"holds {data}")
        if offsets[1] - offsets[0] != math.prod(shape) * ST_ITEMSIZE[dtype]:
            raise SpecError(f"{where}: tensor {shown}: its data_offsets {offsets} do not hold a {dtype} tensor of "
                            f"shape {shape}")
        spans.append((offsets[0], offsets[1], shown))
        out[name] = Tensor(dtype, tuple(shape), (offsets[0], offsets[1]))
    spans.sort()
    for (_, end, a), (start, _, b) in itertools.pairwise(spans):
        if start < end:
            raise SpecError(f"{where}: tensors {a} and {b} overlap in the file's data")
    return out


def check_header_shapes(path: str | Path, tensors: dict[str, tuple[str, Tensor]], flag_name: str = FLAG) -> None:
    """The tensors a checkpoint's headers name (name -> (its file, its entry: :func:`check_layout`'s)) against the
    canonical layout of the model its ``config.json`` describes, through the family's own naming (``HFFormat.name``):
    each weight there, of that shape (``[out, in]`` where the family transposes it), of a float type; one
    SpecError line naming the first tensor that is not, with the shape expected and the shape found."""
    hf = read_config(path, flag_name)
    cfg = config_from_hf(path, flag_name)
    fmt = _formats()[model_type(hf)][1]
    want = fmt.shapes(cfg)
    seen: set[str] = set()
    for name, (file, info) in tensors.items():
        where = f"{flag_name} {path}: {file}: tensor {name}"
        shape = info.shape
        mapped = fmt.name(name, len(shape))
        if mapped is None:
            continue
        canonical, transposed = mapped
        if canonical not in want:
            raise SpecError(f"{where} is not a weight of the {cfg.family} model its {CONFIG} describes")
        expected = want[canonical][::-1] if transposed else want[canonical]
        if tuple(shape) != tuple(expected):
            raise SpecError(f"{where} has shape {list(shape)}; the model its {CONFIG} describes needs "
                            f"{list(expected)}")
        if info.dtype not in FLOAT_DTYPES:  # its bytes were checked against its shape by check_layout
            raise SpecError(f"{where} is of type {info.dtype[:20]}, not a weight's ({', '.join(FLOAT_DTYPES)})")
        seen.add(canonical)
    fresh = {m for m in fmt.fresh if not any(n.startswith(m + ".") for n in seen)}
    missing = [n for n in want if n not in seen and n.rsplit(".", 1)[0] not in fresh]
    if missing:
        raise SpecError(f"{flag_name} {path}: no tensor for the weight {missing[0]} (the model its {CONFIG} "
                        f"describes has it{f', and {len(missing) - 1} more missing' if len(missing) > 1 else ''})")


_ST_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
              "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def _read_widening_bf16(f: Path, where: str) -> dict[str, np.ndarray]:
    """Read a safetensors file by its documented layout (u64 header size, JSON header, raw little-endian
    data), turning BF16 tensors into float32 exactly (bf16 is the top half of a float32)."""
    try:
        with open_file(f.resolve(), "rb") as fh:
            raw = fh.read()
        n = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8:8 + n])
        data = memoryview(raw)[8 + n:]
        out = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            start, end = info["data_offsets"]
            if info["dtype"] == "BF16":
                bits = np.frombuffer(data[start:end], dtype="<u2").astype(np.uint32) << 16
                a = bits.view(np.float32)
            else:
                a = np.frombuffer(data[start:end], dtype=np.dtype(_ST_DTYPES[info["dtype"]]).newbyteorder("<"))
            out[name] = a.reshape(info["shape"])
        return out
    except Exception as e:  # a dtype we do not know (e.g. FP8) or a damaged file
        raise SpecError(f"{where}: cannot read {f.name}: {type(e).__name__}: {e}") from None


def load_hf(path: str | Path, flag_name: str = FLAG) -> tuple[ModelConfig, Canonical]:
    """A local Hugging Face checkpoint (of a family's ``model_type``) as (ModelConfig, canonical weights)."""
    cfg = config_from_hf(path, flag_name)
    hf = read_config(path, flag_name)
    tensors = read_tensors(path, flag_name)
    weights = _formats()[model_type(hf)][1].to_canonical(tensors, cfg, f"{flag_name} {path}")
    check_shapes(weights, expected_shapes(cfg), f"{flag_name} {path}")
    return cfg, weights


# ---------------------------------------------------------------------------------------------- writing
def save_hf(cfg: ModelConfig, weights: Canonical, path: str | Path) -> Path:
    """Write ``weights`` (canonical layout of ``cfg``) as a Hugging Face checkpoint directory."""
    from safetensors.numpy import save_file

    family = _family_of(cfg)
    check_shapes(weights, expected_shapes(cfg), "weights")
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    hf_cfg, tensors = family.to_hf(cfg, weights)
    (out / CONFIG).write_text(json.dumps(msgspec.to_builtins(hf_cfg), indent=2, sort_keys=True) + "\n")
    save_file({k: np.ascontiguousarray(v, dtype=np.float32) for k, v in tensors.items()}, str(out / SAFETENSORS),
              metadata={"format": "pt"})  # transformers refuses safetensors files without this tag
    return out


# ------------------------------------------------------------------------------------------ shapes
def checkpoint_fields(cfg: ModelConfig) -> dict[str, int | str]:
    """The ModelConfig fields a checkpoint determines (the others, e.g. ``mask_impl``, stay the run's)."""
    return {name: getattr(cfg, name) for name in _family_of(cfg).fields}


def expected_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every canonical weight of ``cfg`` (the twin models' parameter set)."""
    return _family_of(cfg).shapes(cfg)


def check_shapes(weights: Canonical, shapes: dict[str, tuple[int, ...]], where: str) -> None:
    missing, extra = sorted(set(shapes) - set(weights)), sorted(set(weights) - set(shapes))
    if missing or extra:
        raise SpecError(f"{where}: weights do not fit the model: missing {missing[:4]}, unexpected {extra[:4]}")
    for name, shape in shapes.items():
        if tuple(weights[name].shape) != shape:
            raise SpecError(f"{where}: {name} has shape {list(weights[name].shape)}, the model needs {list(shape)}")


def _family_of(cfg: ModelConfig) -> HFFormat:
    fam = FAMILIES.get(cfg.family)
    if fam is None or fam.hf is None:
        raise SpecError(f"--family {cfg.family}: no Hugging Face format for it; allowed: "
                        f"{', '.join(f.name for f in FAMILIES.values() if f.hf is not None)}")
    return fam.hf
