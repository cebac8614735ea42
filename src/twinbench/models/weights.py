"""The canonical weight layout: a flat dict of named float32 NumPy arrays, shared by both twins.

Names follow the PyTorch module tree (``blocks.0.attn.c_attn.weight``). Linear weights are stored as
``[in, out]`` (the Flax ``kernel`` layout and Hugging Face GPT-2's ``Conv1D`` layout); PyTorch's
``nn.Linear`` and the JAX twins' ``Linear`` keep ``[out, in]``, so both twins' converters transpose. Flax's
``kernel``, ``scale`` and ``embedding`` are all called ``weight``. Both directions are exact copies (no arithmetic), so a round trip
torch -> canonical -> JAX -> canonical -> torch is bit-exact.

Imports of torch and jax are local to their functions: a process only ever loads one framework.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

Canonical = dict[str, np.ndarray]

_FLAX_TO_CANON = {"kernel": "weight", "scale": "weight", "embedding": "weight"}


#: the layouts of the registered families, told by ``family.register`` (:func:`add_layout`): the suffixes of
#: their linear weights (``Family.linear_suffixes``) and where their layers live (``Family.layer_list``). Kept
#: here, not read from the registry, so that this module imports nothing of twinbench: ``family.py`` uses its
#: converters and no import circle goes through the family registry.
_LINEAR_SUFFIXES: list[str] = []
_LAYER_LISTS: list[tuple[str, ...]] = []


def add_layout(linear_suffixes: tuple[str, ...], layer_list: tuple[str, ...]) -> None:
    """Add a family's layout: the canonical names of its linear weights end in one of ``linear_suffixes``
    (stored ``[in, out]``, transposed for the twins), its repeated layers are ``{layer_list}.{i}``."""
    _LINEAR_SUFFIXES.extend(s for s in linear_suffixes if s not in _LINEAR_SUFFIXES)
    if tuple(layer_list) not in _LAYER_LISTS:
        _LAYER_LISTS.append(tuple(layer_list))


def _linear_suffixes() -> tuple[str, ...]:
    return tuple(_LINEAR_SUFFIXES)


def _is_linear(name: str) -> bool:
    return name.endswith(_linear_suffixes())


# ----------------------------------------------------------------------------------------------- torch
def torch_to_canonical(model: Any) -> Canonical:
    out = {}
    for name, t in model.state_dict().items():
        a = t.detach().cpu().float().numpy()
        out[name] = np.ascontiguousarray(a.T if _is_linear(name) else a)
    return out


def canonical_to_torch(model: Any, weights: Canonical) -> None:
    """Copy canonical weights into a torch model in place; names and shapes must match exactly."""
    import torch

    sd = model.state_dict()
    _check_names(set(sd), set(weights))
    with torch.no_grad():
        for name, t in sd.items():
            a = weights[name].T if _is_linear(name) else weights[name]
            if tuple(a.shape) != tuple(t.shape):
                raise ValueError(f"weight {name}: shape {tuple(a.shape)} does not fit {tuple(t.shape)}")
            t.copy_(torch.from_numpy(np.array(a, copy=True)))


# ------------------------------------------------------------------------------------------------- jax
def _flax_name(path: tuple) -> str:
    *head, leaf = (str(p) for p in path)
    return ".".join([*head, _FLAX_TO_CANON.get(leaf, leaf)])


def _layer_lists() -> list[tuple[str, ...]]:
    """Where each family keeps its layers (``Family.layer_list``): ``blocks.{i}``, ``encoder.layer.{i}``..."""
    return list(_LAYER_LISTS)


def _stack_prefix(path: tuple) -> tuple[str, ...] | None:
    """The layer-list prefix of a parameter of layers stacked on a leading axis (``scan_layers``):
    ``blocks.attn...`` or ``encoder.layer.attention...``, with no layer index after the prefix."""
    names = tuple(str(p) for p in path)
    for prefix in _layer_lists():
        n = len(prefix)
        if len(names) > n and names[:n] == prefix and not names[n].isdigit():
            return prefix
    return None


def _stacked(path: tuple) -> bool:
    return _stack_prefix(path) is not None


def _layer_names(path: tuple, layers: int) -> list[str]:
    """Canonical per-layer names of one stacked parameter: ``blocks.{i}.attn.c_attn.weight``."""
    prefix = _stack_prefix(path) or ("blocks",)
    rest = _flax_name(path[len(prefix):])
    return [f"{'.'.join(prefix)}.{i}.{rest}" for i in range(layers)]


def _jax_layout(path: tuple, name: str, a: np.ndarray) -> np.ndarray:
    """A linear weight of the JAX twins (``Linear.weight``, ``[out, in]``) in the canonical ``[in, out]``, and
    back (a transpose either way); a Flax ``kernel`` is already ``[in, out]``."""
    return np.ascontiguousarray(a.T) if _is_linear(name) and str(path[-1]) == "weight" else a


def jax_to_canonical(model: Any) -> Canonical:
    """Canonical weights of an NNX model; layers stacked for ``nnx.scan`` are split into per-layer names."""
    from flax import nnx

    out: Canonical = {}
    for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        a = np.asarray(var.get_value(), dtype=np.float32)
        if _stacked(path):
            out.update((n, _jax_layout(path, n, x)) for n, x in zip(_layer_names(path, a.shape[0]), a, strict=True))
        else:
            out[_flax_name(path)] = _jax_layout(path, _flax_name(path), a)
    return out


def canonical_to_jax(model: Any, weights: Canonical) -> None:
    """Copy canonical weights into an NNX model in place; names and shapes must match exactly.

    Stacked layers (``scan_layers``) take ``np.stack`` of the per-layer arrays, so weights stay interchangeable
    between the unrolled and the scanned model (and the torch twin).
    """
    import jax.numpy as jnp
    from flax import nnx

    flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
    names = {p: _layer_names(p, v.get_value().shape[0]) if _stacked(p) else [_flax_name(p)] for p, v in flat}
    _check_names({n for ns in names.values() for n in ns}, set(weights))
    new = []
    for path, var in flat:
        a = np.stack([_jax_layout(path, n, weights[n]) for n in names[path]]) if _stacked(path) \
            else _jax_layout(path, names[path][0], weights[names[path][0]])
        if tuple(a.shape) != tuple(var.get_value().shape):
            raise ValueError(f"weight {_flax_name(path)}: shape {a.shape} does not fit {var.get_value().shape}")
        new.append((path, var.replace(jnp.asarray(a, dtype=var.get_value().dtype))))
    nnx.update(model, nnx.from_flat_state(new))


# ---------------------------------------------------------------------------------------------- files
def save(weights: Canonical, path: str | Path) -> None:
    from safetensors.numpy import save_file

    save_file({k: np.ascontiguousarray(v) for k, v in weights.items()}, str(path))


def load(path: str | Path) -> Canonical:
    from safetensors.numpy import load_file

    return load_file(str(path))


def _check_names(model_names: set[str], given: set[str]) -> None:
    missing, extra = sorted(model_names - given), sorted(given - model_names)
    if missing or extra:
        raise ValueError(f"canonical weights do not fit the model: missing {missing[:5]}, unexpected {extra[:5]}")
