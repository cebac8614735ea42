"""torch's own ``nn.TransformerEncoder`` (dropout 0.1 everywhere) behind a small conv front-end, classifying
float sequences: a bring-your-own-model example whose dropout lives in modules *and* in
``nn.MultiheadAttention``'s own float ``dropout``::

    twinbench compare --model examples/byo/encoder.py:build --preset tiny --strategies eager,torchax

twinbench sets every dropout probability to 0 (the record's warning names each one) and checks, with a probe
forward, that no random draw is left.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from twinbench.byo import UserConfig, UserModel

CHANNELS, CLASSES = 4, 5


class ConvEncoder(nn.Module):
    def __init__(self, cfg: UserConfig, dropout: float = 0.1):
        super().__init__()
        d = cfg.d_model
        self.front = nn.Sequential(nn.Conv1d(CHANNELS, d, 3, padding=1), nn.GELU(), nn.Conv1d(d, d, 3, padding=1))
        layer = nn.TransformerEncoderLayer(d, cfg.heads, cfg.d_ff or 4 * d, dropout=dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, cfg.layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [B, T, CHANNELS]
        h = self.front(x.transpose(1, 2)).transpose(1, 2)
        return self.head(self.encoder(h).mean(1))


def loss_fn(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(x).float(), y.long())


def make_batches(cfg: UserConfig):
    """Batch i: noisy sinusoids whose frequency is the class, a pure function of (seed, i)."""

    def batch(i: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng([cfg.seed, i])
        y = rng.integers(0, CLASSES, cfg.batch)
        t = np.arange(cfg.seq)[None, :, None]
        phase = rng.uniform(0, 2 * np.pi, (cfg.batch, 1, CHANNELS))
        x = np.sin(0.2 * (1 + y)[:, None, None] * t + phase) + 0.1 * rng.standard_normal((cfg.batch, cfg.seq, CHANNELS))
        return x.astype(np.float32), y.astype(np.int64)

    return batch


def build(cfg: UserConfig) -> UserModel:
    model = ConvEncoder(cfg)
    return UserModel(module=model, loss_fn=loss_fn, batch=make_batches(cfg), blocks=list(model.encoder.layers),
                     attention_flops_per_token=6 * cfg.layers * cfg.d_model * cfg.seq,
                     tokens_per_batch=cfg.batch * cfg.seq)
