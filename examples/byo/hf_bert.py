"""Hugging Face ``transformers``' ``BertForSequenceClassification`` from a small ``BertConfig`` (random
initialisation, nothing downloaded), its own dropout settings left at their defaults (0.1)::

    twinbench compare --model examples/byo/hf_bert.py:build --preset tiny --strategies eager,compile,torchax
    twinbench compare --model examples/byo/hf_bert.py:build_eager_attention --preset tiny --strategies eager,torchax

``build`` uses ``attn_implementation="sdpa"``, ``build_eager_attention`` ``"eager"``. twinbench sets every
dropout probability to 0 (``nn.Dropout`` modules keep their type: BERT's attention reads ``self.dropout.p``).

The loss calls the model as a user does, ``model(input_ids=x)``, with no attention mask: under torchax every
transformers version twinbench accepts runs it (transformers 4.x looks at the token values to warn of padding
unless it is being compiled, and twinbench's torchax step tells it that it is:
``strategies/torchax_compat.traced_as_compiled``).
"""

from __future__ import annotations

import numpy as np
import torch.nn.functional as F

from twinbench.byo import UserConfig, UserModel

CLASSES = 3


def make(cfg: UserConfig, attn_implementation: str) -> UserModel:
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(vocab_size=cfg.vocab, hidden_size=cfg.d_model, num_hidden_layers=cfg.layers,
                        num_attention_heads=cfg.heads, intermediate_size=cfg.d_ff or 4 * cfg.d_model,
                        max_position_embeddings=max(cfg.seq, cfg.context), num_labels=CLASSES)
    config._attn_implementation = attn_implementation
    model = BertForSequenceClassification(config)

    def loss_fn(m, x, y):
        return F.cross_entropy(m(input_ids=x).logits.float(), y.long())

    def batch(i: int) -> tuple[np.ndarray, np.ndarray]:
        """Token sequences whose class is the most frequent of three token ranges (seeded by (seed, i))."""
        rng = np.random.default_rng([cfg.seed, i])
        x = rng.integers(1, cfg.vocab, (cfg.batch, cfg.seq))
        y = np.argmax(np.stack([(x % CLASSES == c).sum(1) for c in range(CLASSES)], 1), 1)
        return x.astype(np.int64), y.astype(np.int64)

    return UserModel(module=model, loss_fn=loss_fn, batch=batch, blocks=list(model.bert.encoder.layer),
                     attention_flops_per_token=6 * cfg.layers * cfg.d_model * cfg.seq,
                     tokens_per_batch=cfg.batch * cfg.seq)


def build(cfg: UserConfig) -> UserModel:
    return make(cfg, "sdpa")


def build_eager_attention(cfg: UserConfig) -> UserModel:
    return make(cfg, "eager")
