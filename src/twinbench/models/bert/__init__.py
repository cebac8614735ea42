"""The BERT family: BERT encoder twins (``model_torch.py`` / ``model_jax.py``), sequence classification.

Token + position + segment embeddings, post-LayerNorm blocks, bidirectional attention with a key padding mask,
erf GELU, tanh pooler and a linear classifier; Hugging Face ``bert`` checkpoints in and out (``hf.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from twinbench.config import ModelConfig, TrainConfig
from twinbench.models.bert.hf import FORMAT
from twinbench.models.family import OPTIONS, TWIN_OPTIONS, Family, jax_model_of, lazy
from twinbench.models.weights import Canonical

BERT_FLOPS = ("FLOPs/token = 6*(matmul weights of the encoder) + 12*L*d*T (T the padded length) + pooler and "
              "classifier once per sequence; embedding lookups and remat not counted")


def bert_flops_per_token(cfg: Any, seq: int) -> int:
    """Matmul parameters only: per token ``6 * L * (4 d^2 + 2 d ff)`` (Q, K, V, output, MLP) plus the attention
    scores and values ``12 L d T`` on the padded length T; the pooler and classifier run once per sequence,
    so their ``6 (d^2 + d * labels)`` is shared by its T tokens. The word, position and segment embeddings are
    lookups, not matmuls: not counted (counting them, as 6N does, overstates MFU by 11-25%)."""
    d, ff, L = cfg.d_model, cfg.ff, cfg.layers
    per_token = 6 * L * (4 * d * d + 2 * d * ff) + 12 * L * d * seq
    per_sequence = 6 * (d * d + d * cfg.num_labels)
    return per_token + per_sequence // seq


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


#: Tokens a classification batch needs besides the 256 byte values (see ``data/classify.py``).
MIN_VOCAB = 260

PRESETS: dict[str, tuple[ModelConfig, TrainConfig]] = {
    # BERT fine-tuning on the embedded classification task; vocab 260 = 4 special tokens + 256 bytes.
    "bert-tiny": (ModelConfig(family="bert", layers=2, d_model=128, heads=2, vocab=260, context=128),
                  TrainConfig(batch=16, seq=128, steps=40, warmup=5, lr=2e-3, weight_decay=0.01,
                              task="classify")),
    "bert-base": (ModelConfig(family="bert", layers=12, d_model=768, heads=12, vocab=30522, context=512),
                  TrainConfig(batch=32, seq=512, steps=30, warmup=5, lr=5e-5, weight_decay=0.01,
                              task="classify")),
}

FAMILY = Family(
    name="bert", task="classify", supports=frozenset(OPTIONS),
    torch_model=lazy("twinbench.models.bert.model_torch:BERT"),
    torch_loss=lazy("twinbench.models.bert.model_torch:loss_fn"),
    torch_optimizer=lazy("twinbench.models.bert.model_torch:make_optimizer"),
    torch_blocks=lambda m: list(m.encoder.layer),
    jax_model=jax_model_of("twinbench.models.bert.model_jax:BERT"),
    jax_loss=lazy("twinbench.models.bert.model_jax:loss_fn"),
    jax_optimizer=lazy("twinbench.models.bert.model_jax:make_optimizer"),
    init_weights=init_bert, flops_per_token=bert_flops_per_token, flops_convention=BERT_FLOPS,
    native_options=TWIN_OPTIONS, unsupported={}, hf_model_type="bert",
    presets=PRESETS, min_vocab=MIN_VOCAB, causal=False, masked=True,
    linear_suffixes=("query.weight", "key.weight", "value.weight", "dense.weight", "classifier.weight"),
    layer_list=("encoder", "layer"), hf=FORMAT,
    # a default compare of a BERT preset adds the variable-length cases
    default_cells=(("torch", "eager+dynamic"), ("jax", "jit+bucket")),
)
