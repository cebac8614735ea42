"""BERT checkpoints (``model_type: bert``) <-> the BERT twin's ModelConfig and canonical weights.

The canonical names are Hugging Face's without the ``bert.`` prefix; ``nn.Linear`` weights are
transposed (``[out, in]`` -> ``[in, out]``). ``hidden_act`` must be ``gelu`` (erf), ``layer_norm_eps`` 1e-12,
two segment types, absolute positions. TF-converted ``gamma``/``beta`` names, the ``position_ids`` buffer
and pre-training heads (``cls.*``) are handled; an encoder-only checkpoint gets a fresh pooler/classifier.
Exports are ``BertForSequenceClassification`` checkpoints.
"""

from __future__ import annotations

import re

import msgspec
import numpy as np

from twinbench.config import ModelConfig, SpecError
from twinbench.models.hf import SHAPE_FIELDS, ConfigFields, HFFormat, RawConfig, decode
from twinbench.models.weights import Canonical

BERT_EPS = 1e-12
BERT_TYPE_VOCAB = 2  # the twin's segment ids (first / second text of a pair)
BERT_ACTIVATIONS = ("gelu",)  # the exact (erf) GELU of the twin


class BertConfig(ConfigFields, kw_only=True, frozen=True):
    """The fields of a BERT ``config.json`` the twin reads (with transformers' defaults) and writes."""

    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    num_labels: int | None = None  # else as many as id2label names, else 2
    id2label: dict[str, str] | None = None
    label2id: dict[str, int] | None = None
    hidden_act: str = "gelu"
    layer_norm_eps: float = BERT_EPS
    type_vocab_size: int = BERT_TYPE_VOCAB
    position_embedding_type: str = "absolute"
    is_decoder: bool = False
    add_cross_attention: bool = False
    # written on export only (read back as they are): the twin has no dropout, so an exported model trains and
    # evaluates the way it was measured
    pad_token_id: int | None = None
    hidden_dropout_prob: float | None = None
    attention_probs_dropout_prob: float | None = None
    torch_dtype: str | None = None
    initializer_range: float | None = None
    exported_by: str | None = None


def _bert_config(raw: RawConfig, where: str) -> ModelConfig:
    hf = decode(raw, BertConfig, "BERT", where)
    d, ff = hf.hidden_size, hf.intermediate_size
    cfg = ModelConfig(family="bert", layers=hf.num_hidden_layers, d_model=d, heads=hf.num_attention_heads,
                      d_ff=0 if ff == 4 * d else ff, vocab=hf.vocab_size, context=hf.max_position_embeddings,
                      num_labels=hf.num_labels or len(hf.id2label or {}) or 2)
    if hf.hidden_act not in BERT_ACTIVATIONS:
        raise SpecError(f"{where}: hidden_act {hf.hidden_act!r} is not supported; allowed: "
                        f"{', '.join(BERT_ACTIVATIONS)}")
    if abs(hf.layer_norm_eps - BERT_EPS) > 1e-15:
        raise SpecError(f"{where}: layer_norm_eps {hf.layer_norm_eps:g} is not supported; the twin BERT uses "
                        f"{BERT_EPS:g}")
    for key, got, want in (("type_vocab_size", hf.type_vocab_size, BERT_TYPE_VOCAB),
                           ("position_embedding_type", hf.position_embedding_type, "absolute"),
                           ("is_decoder", hf.is_decoder, False), ("add_cross_attention", hf.add_cross_attention, False)):
        if got != want:
            raise SpecError(f"{where}: {key}={got!r} is not supported by the twin BERT (needs {want!r})")
    if cfg.context <= 0 or cfg.heads <= 0 or cfg.d_model % cfg.heads:
        raise SpecError(f"{where}: inconsistent BERT config (max_position_embeddings {cfg.context}, "
                        f"hidden_size {d}, num_attention_heads {cfg.heads})")
    return cfg


_BERT_IGNORED = re.compile(r"^(embeddings\.position_ids|cls\..*)$")  # a buffer; pre-training heads
_BERT_OLD_NAMES = {"gamma": "weight", "beta": "bias"}  # LayerNorm names of TF-converted checkpoints


def _bert_is_linear(name: str, a: np.ndarray) -> bool:
    return a.ndim == 2 and "embeddings." not in name


def _bert_name(name: str, ndim: int) -> tuple[str, bool] | None:
    """The canonical name of a checkpoint's tensor of ``ndim`` dimensions and whether it is a linear weight
    (transposed); None for what is not a weight of the twin (a buffer, a pre-training head)."""
    short = name.removeprefix("bert.")
    if _BERT_IGNORED.match(short):
        return None
    head, _, leaf = short.rpartition(".")
    short = f"{head}.{_BERT_OLD_NAMES.get(leaf, leaf)}"
    return short, ndim == 2 and "embeddings." not in short


def _bert_to_canonical(tensors: dict[str, np.ndarray], cfg: ModelConfig, where: str) -> Canonical:
    """HF ``nn.Linear`` weights are ``[out, in]``: transposed to canonical ``[in, out]``.

    A checkpoint without the sequence-classification head (``BertModel``, ``BertForMaskedLM``) gets the
    missing ``pooler``/``classifier`` freshly initialised (Normal(0, 0.02), zero bias, seed 0), as
    transformers does when fine-tuning starts from a pre-trained encoder; both twins get the same arrays.
    """
    out: Canonical = {}
    for name, a in tensors.items():
        canonical = _bert_name(name, a.ndim)
        if canonical is not None:
            short, linear = canonical
            out[short] = np.ascontiguousarray(a.T) if linear else a
    rng = np.random.default_rng(0)
    for name, (n_in, n_out) in (("pooler.dense", (cfg.d_model, cfg.d_model)),
                                ("classifier", (cfg.d_model, cfg.num_labels))):
        if f"{name}.weight" not in out and f"{name}.bias" not in out:
            out[f"{name}.weight"] = (rng.standard_normal((n_in, n_out)) * 0.02).astype(np.float32)
            out[f"{name}.bias"] = np.zeros(n_out, np.float32)
    return out


def _bert_to_hf(cfg: ModelConfig, weights: Canonical) -> tuple[msgspec.Struct, dict[str, np.ndarray]]:
    hf_cfg = BertConfig(
        architectures=["BertForSequenceClassification"], model_type="bert", num_hidden_layers=cfg.layers,
        hidden_size=cfg.d_model, num_attention_heads=cfg.heads, intermediate_size=cfg.ff, vocab_size=cfg.vocab,
        max_position_embeddings=cfg.context, pad_token_id=0, num_labels=cfg.num_labels,
        id2label={str(i): f"LABEL_{i}" for i in range(cfg.num_labels)},
        label2id={f"LABEL_{i}": i for i in range(cfg.num_labels)},
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, torch_dtype="float32", initializer_range=0.02,
        exported_by="twinbench")
    tensors = {}
    for k, v in weights.items():
        hf_name = k if k.startswith("classifier.") else "bert." + k
        tensors[hf_name] = v.T if _bert_is_linear(k, v) else v
    return hf_cfg, tensors


def _bert_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    d, ff = cfg.d_model, cfg.ff
    shapes: dict[str, tuple[int, ...]] = {
        "embeddings.word_embeddings.weight": (cfg.vocab, d), "embeddings.position_embeddings.weight": (cfg.context, d),
        "embeddings.token_type_embeddings.weight": (BERT_TYPE_VOCAB, d),
        "embeddings.LayerNorm.weight": (d,), "embeddings.LayerNorm.bias": (d,),
        "pooler.dense.weight": (d, d), "pooler.dense.bias": (d,),
        "classifier.weight": (d, cfg.num_labels), "classifier.bias": (cfg.num_labels,)}
    per_layer = {"attention.self.query": (d, d), "attention.self.key": (d, d), "attention.self.value": (d, d),
                 "attention.output.dense": (d, d), "intermediate.dense": (d, ff), "output.dense": (ff, d)}
    for i in range(cfg.layers):
        p = f"encoder.layer.{i}"
        for name, (n_in, n_out) in per_layer.items():
            shapes[f"{p}.{name}.weight"] = (n_in, n_out)
            shapes[f"{p}.{name}.bias"] = (n_out,)
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes[f"{p}.{ln}.weight"] = (d,)
            shapes[f"{p}.{ln}.bias"] = (d,)
    return shapes


FORMAT = HFFormat(model_type="bert", architecture="Bert", fields=(*SHAPE_FIELDS, "num_labels"), config=_bert_config,
                  to_canonical=_bert_to_canonical, to_hf=_bert_to_hf, shapes=_bert_shapes, name=_bert_name,
                  fresh=("pooler.dense", "classifier"))
