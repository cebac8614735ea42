"""GPT-2 checkpoints (``model_type: gpt2``) <-> the GPT twin's ModelConfig and canonical weights.

Hugging Face's ``Conv1D`` weights are already ``[in, out]`` (canonical); the names differ only by the
``transformer.`` prefix and ``h.`` -> ``blocks.``. The causal-mask buffers of old checkpoints
(``attn.bias``, ``attn.masked_bias``) are ignored; ``lm_head.weight`` must be tied to ``wte`` (the twin
ties them). ``gelu_new`` is the tanh GELU of the twin; ``layer_norm_epsilon`` must be 1e-5 (the twin's).
"""

from __future__ import annotations

import re

import msgspec
import numpy as np

from twinbench.config import ModelConfig, SpecError
from twinbench.models.hf import SHAPE_FIELDS, ConfigFields, HFFormat, RawConfig, decode
from twinbench.models.weights import Canonical

GPT2_ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")  # all the tanh approximation of GELU
GPT2_EPS = 1e-5

class GPT2Config(ConfigFields, kw_only=True, frozen=True):
    """The fields of a GPT-2 ``config.json`` the twin reads (with transformers' defaults) and writes."""

    n_layer: int
    n_embd: int
    n_head: int
    vocab_size: int
    n_inner: int | None = None  # None: 4 * n_embd
    n_positions: int | None = None
    n_ctx: int | None = None  # the older name of n_positions
    activation_function: str = "gelu_new"
    layer_norm_epsilon: float = GPT2_EPS
    scale_attn_weights: bool = True
    scale_attn_by_inverse_layer_idx: bool = False
    reorder_and_upcast_attn: bool = False
    add_cross_attention: bool = False
    tie_word_embeddings: bool = True
    # written on export only (read back as they are): the twin has no dropout, so an exported model trains and
    # evaluates the way it was measured
    resid_pdrop: float | None = None
    embd_pdrop: float | None = None
    attn_pdrop: float | None = None
    summary_first_dropout: float | None = None
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    torch_dtype: str | None = None
    initializer_range: float | None = None
    use_cache: bool | None = None
    exported_by: str | None = None


def _gpt2_config(raw: RawConfig, where: str) -> ModelConfig:
    hf = decode(raw, GPT2Config, "GPT-2", where)
    d = hf.n_embd
    cfg = ModelConfig(family="gpt", layers=hf.n_layer, d_model=d, heads=hf.n_head,
                      d_ff=0 if hf.n_inner in (None, 4 * d) else hf.n_inner or 0, vocab=hf.vocab_size,
                      context=hf.n_positions if hf.n_positions is not None else hf.n_ctx or 0)
    if hf.activation_function not in GPT2_ACTIVATIONS:
        raise SpecError(f"{where}: activation_function {hf.activation_function!r} is not supported; allowed: "
                        f"{', '.join(GPT2_ACTIVATIONS)}")
    if abs(hf.layer_norm_epsilon - GPT2_EPS) > 1e-12:
        raise SpecError(f"{where}: layer_norm_epsilon {hf.layer_norm_epsilon:g} is not supported; the twin GPT uses "
                        f"{GPT2_EPS:g}")
    for key, got, want in (("scale_attn_weights", hf.scale_attn_weights, True),
                           ("scale_attn_by_inverse_layer_idx", hf.scale_attn_by_inverse_layer_idx, False),
                           ("reorder_and_upcast_attn", hf.reorder_and_upcast_attn, False),
                           ("add_cross_attention", hf.add_cross_attention, False)):
        if got != want:
            raise SpecError(f"{where}: {key}={got} is not supported by the twin GPT (needs {want})")
    if cfg.context <= 0 or cfg.heads <= 0 or cfg.d_model % cfg.heads:
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


def _gpt2_to_hf(cfg: ModelConfig, weights: Canonical) -> tuple[msgspec.Struct, dict[str, np.ndarray]]:
    hf_cfg = GPT2Config(
        architectures=["GPT2LMHeadModel"], model_type="gpt2", n_layer=cfg.layers, n_embd=cfg.d_model,
        n_head=cfg.heads, n_inner=cfg.d_ff or None, n_positions=cfg.context, n_ctx=cfg.context, vocab_size=cfg.vocab,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, summary_first_dropout=0.0, torch_dtype="float32",
        initializer_range=0.02, use_cache=True, exported_by="twinbench")
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
