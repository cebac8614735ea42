"""A Llama-style decoder (RMSNorm, rotary attention, SwiGLU, untied head): bring-your-own-model example.

Not one of twinbench's twins: a user's own PyTorch model, measured like them::

    twinbench compare --model examples/byo/llama.py:build --preset tiny \\
        --strategies eager,compile-regional,torchax
    twinbench compare --model examples/byo/llama.py:build --jax-model examples/byo/llama_jax.py:build_jax \\
        --preset tiny --strategies eager,torchax,port

``build(cfg)`` gets a :class:`twinbench.byo.UserConfig` (the preset's shape, every field overridable by its
flag: ``--layers``, ``--d-model``, ``--heads``, ``--d-ff``, ``--vocab``, ``--batch``, ``--seq``, ``--seed``) and
returns a :class:`twinbench.byo.UserModel`: the module, the loss and the batch maker. twinbench calls it
under ``torch.manual_seed(cfg.seed)`` and switches dropout off (deterministic training).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from twinbench.byo import UserConfig, UserModel


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding on [B, H, T, hd]: pairs (x1, x2) = the two halves of the head dim."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class Attention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.wq = nn.Linear(d, d, bias=False)
        self.wk = nn.Linear(d, d, bias=False)
        self.wv = nn.Linear(d, d, bias=False)
        self.wo = nn.Linear(d, d, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = (w(x).view(B, T, self.heads, C // self.heads).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(B, T, C))


class SwiGLU(nn.Module):
    def __init__(self, d: int, ff: int):
        super().__init__()
        self.w1 = nn.Linear(d, ff, bias=False)
        self.w3 = nn.Linear(d, ff, bias=False)
        self.w2 = nn.Linear(ff, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, d: int, heads: int, ff: int, dropout: float):
        super().__init__()
        self.attn_norm = RMSNorm(d)
        self.attn = Attention(d, heads)
        self.mlp_norm = RMSNorm(d)
        self.mlp = SwiGLU(d, ff)
        self.drop = nn.Dropout(dropout)  # twinbench sets p = 0: deterministic training

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.attn(self.attn_norm(x), cos, sin))
        return x + self.drop(self.mlp(self.mlp_norm(x)))


class Llama(nn.Module):
    def __init__(self, cfg: UserConfig, dropout: float = 0.1):
        super().__init__()
        d, hd = cfg.d_model, cfg.d_model // cfg.heads
        ff = cfg.d_ff or 64 * ((8 * d // 3 + 63) // 64)  # Llama: ~8/3 d, rounded up to a multiple of 64
        self.tok = nn.Embedding(cfg.vocab, d)
        self.blocks = nn.ModuleList(Block(d, cfg.heads, ff, dropout) for _ in range(cfg.layers))
        self.norm = RMSNorm(d)
        self.head = nn.Linear(d, cfg.vocab, bias=False)
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, hd, 2).float() / hd))
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # derived, not a weight
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        angles = torch.arange(idx.shape[1], device=idx.device).float()[:, None] * self.inv_freq[None, :]
        cos, sin = angles.cos(), angles.sin()
        x = self.tok(idx)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.head(self.norm(x))


def loss_fn(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    logits = model(x)
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1).long())


def make_batches(cfg: UserConfig):
    """Batch i: sequences ``(a + b t) mod vocab`` (a learnable rule), a pure function of (seed, i)."""

    def batch(i: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng([cfg.seed, i])
        a = rng.integers(0, cfg.vocab, (cfg.batch, 1))
        b = rng.integers(1, 8, (cfg.batch, 1))
        seq = (a + b * np.arange(cfg.seq + 1)[None, :]) % cfg.vocab
        return seq[:, :-1].astype(np.int64), seq[:, 1:].astype(np.int64)

    return batch


def build(cfg: UserConfig) -> UserModel:
    model = Llama(cfg)
    return UserModel(module=model, loss_fn=loss_fn, batch=make_batches(cfg), blocks=list(model.blocks),
                     attention_flops_per_token=12 * cfg.layers * cfg.d_model * cfg.seq)
