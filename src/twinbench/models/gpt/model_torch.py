"""GPT-2 in PyTorch. Twin of ``model_jax.py``: same classes, same attribute names, same maths.

Learned position embeddings, pre-LayerNorm blocks, causal self-attention through
``F.scaled_dot_product_attention``, tanh-GELU MLP, LM head tied to the token embedding, GPT-2 init.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import record_function
from torch.utils.checkpoint import checkpoint

from twinbench.config import ModelConfig
from twinbench.models.layers_torch import clip_grads, make_optimizer
from twinbench.models.options import ModelOptions

__all__ = ["GPT", "clip_grads", "loss_fn", "make_optimizer"]


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.heads = cfg.heads
        self.c_attn = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.c_proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.d_model, cfg.ff)
        self.c_proj = nn.Linear(cfg.ff, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model, eps=1e-5)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.d_model, eps=1e-5)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with record_function("attn"):  # profiler scopes (twinbench explain), as the JAX twin's named_scope
            x = x + self.attn(self.ln_1(x))
        with record_function("mlp"):
            return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg: ModelConfig, opts: ModelOptions = ModelOptions()):
        super().__init__()
        if opts.scan_layers or opts.remat not in ("none", "full"):
            raise ValueError(f"torch GPT: unsupported options {opts} (no layer scan; remat 'full' only)")
        self.cfg = cfg
        self.opts = opts
        self.wte = nn.Embedding(cfg.vocab, cfg.d_model)
        self.wpe = nn.Embedding(cfg.context, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.d_model, eps=1e-5)
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # GPT-2: residual projections scaled by 1/sqrt(2L)
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.layers))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear):
            nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits of shape [batch, seq, vocab]; the LM head is the token embedding (tied)."""
        # bf16: autocast runs matmuls and attention in bf16; parameters and LayerNorm stay fp32.
        with torch.autocast(idx.device.type, torch.bfloat16, enabled=self.opts.compute_dtype == "bf16"):
            with record_function("embed"):
                pos = torch.arange(idx.shape[1], device=idx.device)
                x = self.wte(idx) + self.wpe(pos)
            for i, block in enumerate(self.blocks):
                with record_function(f"block{i}"):
                    x = checkpoint(block, x, use_reentrant=False) if self.opts.remat != "none" else block(x)
            with record_function("head"):
                return self.ln_f(x) @ self.wte.weight.T


def loss_fn(model: nn.Module, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy, computed in float32. The logits are flattened before they are converted:
    the same values, and under torchax (``+fused-loss``) XLA then fuses the gradient's conversion back to bf16
    into the head's product; converted first, it wrote a copy of the logits' gradient, ``[8192, 50257]`` for GPT-2
    124M at 8 x 1024 (more memory and a longer step by XLA's estimate: benchmarks/RESULTS.md, "The fifth sitting")."""
    logits = model(idx)
    with record_function("loss"):
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.reshape(-1).long())
