"""Llama checkpoints (``model_type: llama``, ``LlamaForCausalLM``) <-> the Llama twin's ModelConfig and weights.

The canonical names are Hugging Face's without the ``model.`` prefix; ``nn.Linear`` weights (all bias-free,
``lm_head`` included) are transposed (``[out, in]`` -> ``[in, out]``). The twin supports what it computes:
``hidden_act`` silu, ``rms_norm_eps`` 1e-6, default RoPE with theta 10000, no attention/MLP biases, an untied
head, ``num_key_value_heads`` = heads / 2 (heads even) or heads (see ``shape.KV_GROUP``).
"""

from __future__ import annotations

import msgspec
import numpy as np

from twinbench.config import ModelConfig, SpecError
from twinbench.models.hf import SHAPE_FIELDS, ConfigFields, HFFormat, RawConfig, decode
from twinbench.models.llama.shape import EPS, ROPE_THETA, kv_heads
from twinbench.models.weights import Canonical

_IGNORED = ("rotary_emb.inv_freq",)  # buffers of old checkpoints, not weights


class Rope(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """A Llama config's RoPE parameters (``rope_parameters``; ``rope_scaling`` in older transformers)."""

    rope_type: str | None = None
    type: str | None = None  # the older name of rope_type
    rope_theta: float | None = None  # else the config's own rope_theta


class LlamaConfig(ConfigFields, kw_only=True, frozen=True):
    """The fields of a Llama ``config.json`` the twin reads (with transformers' defaults) and writes."""

    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    num_key_value_heads: int | None = None  # None: as many as the heads
    head_dim: int | None = None  # None: hidden_size / heads
    hidden_act: str = "silu"
    rms_norm_eps: float = EPS
    rope_theta: float = ROPE_THETA
    rope_parameters: Rope | None = None
    rope_scaling: Rope | None = None
    attention_bias: bool = False
    mlp_bias: bool = False
    tie_word_embeddings: bool = False
    # written on export only (read back as they are)
    attention_dropout: float | None = None
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = None
    torch_dtype: str | None = None
    initializer_range: float | None = None
    use_cache: bool | None = None
    exported_by: str | None = None


def _config(raw: RawConfig, where: str) -> ModelConfig:
    hf = decode(raw, LlamaConfig, "Llama", where)
    d, ff = hf.hidden_size, hf.intermediate_size
    cfg = ModelConfig(family="llama", layers=hf.num_hidden_layers, d_model=d, heads=hf.num_attention_heads,
                      d_ff=0 if ff == 4 * d else ff, vocab=hf.vocab_size, context=hf.max_position_embeddings)
    if cfg.context <= 0 or cfg.heads <= 0 or cfg.d_model % cfg.heads:
        raise SpecError(f"{where}: inconsistent Llama config (hidden_size {d}, num_attention_heads {cfg.heads})")
    rope = hf.rope_parameters or hf.rope_scaling or Rope()
    theta = rope.rope_theta if rope.rope_theta is not None else hf.rope_theta
    kv = hf.num_key_value_heads or cfg.heads
    checks = (("hidden_act", hf.hidden_act, "silu"),
              ("rms_norm_eps", hf.rms_norm_eps, EPS),
              ("rope_theta", theta, ROPE_THETA),
              ("rope_type", rope.rope_type or rope.type or "default", "default"),
              ("attention_bias", hf.attention_bias, False),
              ("mlp_bias", hf.mlp_bias, False),
              ("tie_word_embeddings", hf.tie_word_embeddings, False),
              ("head_dim", hf.head_dim or d // cfg.heads, d // cfg.heads),
              ("num_key_value_heads", kv, kv_heads(cfg)))
    for key, got, want in checks:
        if got != want:
            raise SpecError(f"{where}: {key}={got!r} is not supported by the twin Llama (needs {want!r})")
    return cfg


def _is_linear(name: str, a: np.ndarray) -> bool:
    return a.ndim == 2 and name != "embed_tokens.weight"


def _name(name: str, ndim: int) -> tuple[str, bool] | None:
    """The canonical name of a checkpoint's tensor of ``ndim`` dimensions and whether it is a linear weight
    (transposed); None for a buffer."""
    short = name.removeprefix("model.")
    return None if short.endswith(_IGNORED) else (short, ndim == 2 and short != "embed_tokens.weight")


def _to_canonical(tensors: dict[str, np.ndarray], cfg: ModelConfig, where: str) -> Canonical:
    out: Canonical = {}
    for name, a in tensors.items():
        canonical = _name(name, a.ndim)
        if canonical is not None:
            short, linear = canonical
            out[short] = np.ascontiguousarray(a.T) if linear else a
    if "lm_head.weight" not in out:
        raise SpecError(f"{where}: no lm_head.weight (a tied head); the twin Llama's head is untied")
    return out


def _to_hf(cfg: ModelConfig, weights: Canonical) -> tuple[msgspec.Struct, dict[str, np.ndarray]]:
    hf_cfg = LlamaConfig(
        architectures=["LlamaForCausalLM"], model_type="llama", num_hidden_layers=cfg.layers,
        hidden_size=cfg.d_model, num_attention_heads=cfg.heads, num_key_value_heads=kv_heads(cfg),
        head_dim=cfg.d_model // cfg.heads, intermediate_size=cfg.ff, vocab_size=cfg.vocab,
        max_position_embeddings=cfg.context, rope_parameters=Rope(rope_type="default", rope_theta=ROPE_THETA),
        attention_dropout=0.0, torch_dtype="float32", initializer_range=0.02, use_cache=True,
        exported_by="twinbench")
    tensors = {}
    for k, v in weights.items():
        hf_name = k if k == "lm_head.weight" else "model." + k
        tensors[hf_name] = v.T if _is_linear(k, v) else v
    return hf_cfg, tensors


def shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Canonical name -> shape of every weight of the Llama twin of ``cfg``."""
    d, ff, kv = cfg.d_model, cfg.ff, kv_heads(cfg) * (cfg.d_model // cfg.heads)
    out: dict[str, tuple[int, ...]] = {"embed_tokens.weight": (cfg.vocab, d), "norm.weight": (d,),
                                       "lm_head.weight": (d, cfg.vocab)}
    per_layer = {"self_attn.q_proj.weight": (d, d), "self_attn.k_proj.weight": (d, kv),
                 "self_attn.v_proj.weight": (d, kv), "self_attn.o_proj.weight": (d, d),
                 "mlp.gate_proj.weight": (d, ff), "mlp.up_proj.weight": (d, ff), "mlp.down_proj.weight": (ff, d),
                 "input_layernorm.weight": (d,), "post_attention_layernorm.weight": (d,)}
    for i in range(cfg.layers):
        out.update({f"layers.{i}.{k}": v for k, v in per_layer.items()})
    return out


FORMAT = HFFormat(model_type="llama", architecture="Llama", fields=SHAPE_FIELDS, config=_config,
                  to_canonical=_to_canonical, to_hf=_to_hf, shapes=shapes, name=_name)
