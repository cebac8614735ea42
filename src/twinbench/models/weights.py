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

_LINEAR_SUFFIXES = ("c_attn.weight", "c_proj.weight", "c_fc.weight",  # gpt
                    "query.weight", "key.weight", "value.weight", "dense.weight", "classifier.weight")  # bert
_FLAX_TO_CANON = {"kernel": "weight", "scale": "weight", "embedding": "weight"}


def _is_linear(name: str) -> bool:
    return name.endswith(_LINEAR_SUFFIXES)


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


#: Where each family keeps its layers: GPT ``blocks.{i}``, BERT ``encoder.layer.{i}``.
_LAYER_LISTS = (("blocks",), ("encoder", "layer"))


def _stack_prefix(path: tuple) -> tuple[str, ...] | None:
    """The layer-list prefix of a parameter of layers stacked on a leading axis (``scan_layers``):
    ``blocks.attn...`` or ``encoder.layer.attention...``, with no layer index after the prefix."""
    names = tuple(str(p) for p in path)
    for prefix in _LAYER_LISTS:
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


def init_gpt(cfg: Any, seed: int) -> Canonical:
    """GPT-2 initialisation in the canonical layout, from a NumPy seed, so both twins start identical.

    Normal(0, 0.02) for embeddings and linear weights, residual projections (``c_proj``) scaled by
    1/sqrt(2 * layers), zero biases, LayerNorm weight 1 and bias 0: what ``GPT.__init__`` does natively.
    """
    rng = np.random.default_rng(seed)
    d, ff, proj_std = cfg.d_model, cfg.ff, 0.02 / np.sqrt(2 * cfg.layers)

    def normal(shape: tuple[int, ...], std: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    w: Canonical = {"wte.weight": normal((cfg.vocab, d)), "wpe.weight": normal((cfg.context, d))}
    linears = {"attn.c_attn": (d, 3 * d, 0.02), "attn.c_proj": (d, d, proj_std),
               "mlp.c_fc": (d, ff, 0.02), "mlp.c_proj": (ff, d, proj_std)}
    for i in range(cfg.layers):
        for ln in ("ln_1", "ln_2"):
            w[f"blocks.{i}.{ln}.weight"] = np.ones(d, np.float32)
            w[f"blocks.{i}.{ln}.bias"] = np.zeros(d, np.float32)
        for name, (n_in, n_out, std) in linears.items():
            w[f"blocks.{i}.{name}.weight"] = normal((n_in, n_out), std)
            w[f"blocks.{i}.{name}.bias"] = np.zeros(n_out, np.float32)
    w["ln_f.weight"] = np.ones(d, np.float32)
    w["ln_f.bias"] = np.zeros(d, np.float32)
    return w


def init_bert(cfg: Any, seed: int) -> Canonical:
    """BERT initialisation in the canonical layout, from a NumPy seed, so both twins start identical.

    Normal(0, 0.02) for embeddings and linear weights, zero biases, LayerNorm weight 1 and bias 0: what
    ``BERT.__init__`` does natively. Names mirror Hugging Face's BERT modules (without the ``bert.`` prefix).
    """
    rng = np.random.default_rng(seed)
    d, ff = cfg.d_model, cfg.ff

    def normal(shape: tuple[int, ...]) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    def linear(name: str, n_in: int, n_out: int) -> None:
        w[f"{name}.weight"] = normal((n_in, n_out))
        w[f"{name}.bias"] = np.zeros(n_out, np.float32)

    def layer_norm(name: str) -> None:
        w[f"{name}.weight"] = np.ones(d, np.float32)
        w[f"{name}.bias"] = np.zeros(d, np.float32)

    w: Canonical = {"embeddings.word_embeddings.weight": normal((cfg.vocab, d)),
                    "embeddings.position_embeddings.weight": normal((cfg.context, d)),
                    "embeddings.token_type_embeddings.weight": normal((2, d))}
    layer_norm("embeddings.LayerNorm")
    for i in range(cfg.layers):
        p = f"encoder.layer.{i}"
        for name in ("query", "key", "value"):
            linear(f"{p}.attention.self.{name}", d, d)
        linear(f"{p}.attention.output.dense", d, d)
        layer_norm(f"{p}.attention.output.LayerNorm")
        linear(f"{p}.intermediate.dense", d, ff)
        linear(f"{p}.output.dense", ff, d)
        layer_norm(f"{p}.output.LayerNorm")
    linear("pooler.dense", d, d)
    linear("classifier", d, cfg.num_labels)
    return w


def init_weights(cfg: Any, seed: int) -> Canonical:
    """The canonical initial weights of ``cfg.family`` (``gpt`` or ``bert``)."""
    return init_bert(cfg, seed) if cfg.family == "bert" else init_gpt(cfg, seed)
