"""A small BERT-style classifier in PyTorch, the model its Flax ports sit beside (``--model``).

A post-LayerNorm encoder (BERT's block: attention, residual, LayerNorm; GELU MLP, residual, LayerNorm) over token
and position embeddings, classifying each sequence from its first token. ``model_nnx.py`` ports it to Flax NNX,
``model_linen.py`` to Flax linen with a ``TrainState`` training step; twinbench checks each port against this
module (loss and gradients on batch 0, then 10 AdamW steps) and measures both from the same initial weights on
the same batches::

    twinbench compare --model examples/flax_port/model_torch.py:build \\
        --jax-model examples/flax_port/model_nnx.py:build_jax --preset tiny --strategies eager,compile,port
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from twinbench.byo import UserConfig, UserModel

LABELS = 2  # the classes of the toy task below; the ports say the same


class Block(nn.Module):
    def __init__(self, d: int, heads: int, d_ff: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln1 = nn.LayerNorm(d)  # eps 1e-5: a port must say so (Flax's default is 1e-6)
        self.fc1 = nn.Linear(d, d_ff)
        self.fc2 = nn.Linear(d_ff, d)
        self.ln2 = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)  # 3 x [B, H, T, hd]
        a = F.scaled_dot_product_attention(q, k, v)  # bidirectional, as an encoder's
        x = self.ln1(x + self.proj(a.transpose(1, 2).reshape(B, T, C)))
        return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))  # exact (erf) GELU: Flax's default is the tanh one


class Classifier(nn.Module):
    def __init__(self, cfg: UserConfig) -> None:
        super().__init__()
        d, d_ff = cfg.d_model, cfg.d_ff or 4 * cfg.d_model
        self.tok = nn.Embedding(cfg.vocab, d)
        self.pos = nn.Embedding(cfg.context, d)
        self.ln = nn.LayerNorm(d)
        self.blocks = nn.ModuleList([Block(d, cfg.heads, d_ff) for _ in range(cfg.layers)])
        self.head = nn.Linear(d, LABELS)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.ln(self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device)))
        for block in self.blocks:
            x = block(x)
        return self.head(x[:, 0])  # the first token's state classifies the sequence, as BERT's [CLS]


def batches(cfg: UserConfig):
    """Batch ``i``: random tokens, labelled by whether the second token is in the lower half of the vocabulary
    (a rule the model can learn); a pure function of ``i`` and the seed."""

    def batch(i: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng([cfg.seed, i])
        x = rng.integers(0, cfg.vocab, (cfg.batch, cfg.seq), dtype=np.int64)
        return x, (x[:, 1] < cfg.vocab // 2).astype(np.int64)

    return batch


def build(cfg: UserConfig) -> UserModel:
    model = Classifier(cfg)
    return UserModel(module=model, loss_fn=lambda m, x, y: F.cross_entropy(m(x), y), batch=batches(cfg),
                     blocks=list(model.blocks),
                     attention_flops_per_token=12 * cfg.layers * cfg.d_model * cfg.seq)  # q @ k^T and p @ v, x3
