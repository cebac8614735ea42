"""GPT-2 checkpoints (``model_type: gpt2``) <-> the GPT twin's ModelConfig and canonical weights.

Hugging Face's ``Conv1D`` weights are already ``[in, out]`` (canonical); the names differ only by the
``transformer.`` prefix and ``h.`` -> ``blocks.``. The causal-mask buffers of old checkpoints
(``attn.bias``, ``attn.masked_bias``) are ignored; ``lm_head.weight`` must be tied to ``wte`` (the twin
ties them). ``gelu_new`` is the tanh GELU of the twin; ``layer_norm_epsilon`` must be 1e-5 (the twin's).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from twinbench.config import ModelConfig, SpecError
from twinbench.models.hf import CONFIG, SHAPE_FIELDS, HFFormat
from twinbench.models.weights import Canonical

GPT2_ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")  # all the tanh approximation of GELU
GPT2_EPS = 1e-5

def _gpt2_config(hf: dict[str, Any], where: str) -> ModelConfig:
    try:
        d, n_inner = int(hf["n_embd"]), hf.get("n_inner")
        cfg = ModelConfig(family="gpt", layers=int(hf["n_layer"]), d_model=d, heads=int(hf["n_head"]),
                          d_ff=0 if n_inner in (None, 4 * d) else int(n_inner), vocab=int(hf["vocab_size"]),
                          context=int(hf.get("n_positions", hf.get("n_ctx", 0))))
    except (KeyError, TypeError, ValueError) as e:
        raise SpecError(f"{where}: {CONFIG} lacks a valid GPT-2 field {e}") from None
    act = hf.get("activation_function", "gelu_new")
    if act not in GPT2_ACTIVATIONS:
        raise SpecError(f"{where}: activation_function {act!r} is not supported; allowed: {', '.join(GPT2_ACTIVATIONS)}")
    eps = float(hf.get("layer_norm_epsilon", GPT2_EPS))
    if abs(eps - GPT2_EPS) > 1e-12:
        raise SpecError(f"{where}: layer_norm_epsilon {eps:g} is not supported; the twin GPT uses {GPT2_EPS:g}")
    for key, want in (("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False),
                      ("reorder_and_upcast_attn", False), ("add_cross_attention", False)):
        if bool(hf.get(key, want)) != want:
            raise SpecError(f"{where}: {key}={hf[key]} is not supported by the twin GPT (needs {want})")
    if cfg.context <= 0 or cfg.d_model % cfg.heads:
        raise SpecError(f"{where}: inconsistent GPT-2 config (n_positions {cfg.context}, n_embd {d}, "
                        f"n_head {cfg.heads})")
    return cfg


_GPT2_IGNORED = re.compile(r"^h\.\d+\.attn\.(bias|masked_bias)$")  # causal-mask buffers, not weights


def _gpt2_name(name: str, ndim: int) -> tuple[str, bool] | None:
    """The canonical name of a checkpoint's tensor (Conv1D weights are already ``[in, out]``: never transposed);
    ``lm_head.weight`` is the tied head, ``wte.weight``'s shape; None for a causal-mask buffer."""
    if name == "lm_head.weight":
        return "wte.weight", False
    short = name.removeprefix("transformer.")
    return None if _GPT2_IGNORED.match(short) else (re.sub(r"^h\.", "blocks.", short), False)


def _gpt2_to_canonical(tensors: dict[str, np.ndarray], cfg: ModelConfig, where: str) -> Canonical:
    out: Canonical = {}
    lm_head = None
    for name, a in tensors.items():
        if name == "lm_head.weight":
            lm_head = a
            continue
        canonical = _gpt2_name(name, a.ndim)
        if canonical is not None:
            out[canonical[0]] = a
    if lm_head is not None and "wte.weight" in out and not np.array_equal(lm_head, out["wte.weight"]):
        raise SpecError(f"{where}: lm_head.weight is not tied to wte.weight; the twin GPT ties them")
    if "wte.weight" not in out and lm_head is not None:
        out["wte.weight"] = lm_head
    return out


def _gpt2_to_hf(cfg: ModelConfig, weights: Canonical) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    hf_cfg = {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": cfg.layers,
        "n_embd": cfg.d_model, "n_head": cfg.heads, "n_inner": cfg.d_ff or None, "n_positions": cfg.context,
        "n_ctx": cfg.context, "vocab_size": cfg.vocab, "activation_function": "gelu_new",
        "layer_norm_epsilon": GPT2_EPS, "tie_word_embeddings": True, "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
        # the twin has no dropout: an exported model trains and evaluates the way it was measured
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "summary_first_dropout": 0.0,
        "bos_token_id": None, "eos_token_id": None, "torch_dtype": "float32",
        "initializer_range": 0.02, "use_cache": True, "exported_by": "twinbench",
    }
    tensors = {"transformer." + re.sub(r"^blocks\.", "h.", k): v for k, v in weights.items()}
    return hf_cfg, tensors  # lm_head.weight is tied: transformers re-ties it on load


def _gpt_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    d, ff = cfg.d_model, cfg.ff
    shapes: dict[str, tuple[int, ...]] = {"wte.weight": (cfg.vocab, d), "wpe.weight": (cfg.context, d),
                                          "ln_f.weight": (d,), "ln_f.bias": (d,)}
    per_block = {"ln_1.weight": (d,), "ln_1.bias": (d,), "ln_2.weight": (d,), "ln_2.bias": (d,),
                 "attn.c_attn.weight": (d, 3 * d), "attn.c_attn.bias": (3 * d,),
                 "attn.c_proj.weight": (d, d), "attn.c_proj.bias": (d,),
                 "mlp.c_fc.weight": (d, ff), "mlp.c_fc.bias": (ff,),
                 "mlp.c_proj.weight": (ff, d), "mlp.c_proj.bias": (d,)}
    for i in range(cfg.layers):
        shapes.update({f"blocks.{i}.{k}": v for k, v in per_block.items()})
    return shapes


FORMAT = HFFormat(model_type="gpt2", architecture="GPT2", fields=SHAPE_FIELDS, config=_gpt2_config,
                  to_canonical=_gpt2_to_canonical, to_hf=_gpt2_to_hf, shapes=_gpt_shapes, name=_gpt2_name)
