"""Llama in PyTorch. Twin of ``model_jax.py``: same classes, same attribute names (Hugging Face's
``LlamaForCausalLM`` without its ``model.`` prefix), same maths.

Rotary position embeddings (RoPE, the two halves of each head rotated), RMSNorm (eps 1e-6), pre-norm blocks,
grouped-query causal attention (``kv_heads`` key/value heads shared by groups of query heads), SwiGLU MLP,
no biases, an untied LM head, Normal(0, 0.02) initialisation.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import record_function
from torch.utils.checkpoint import checkpoint

from twinbench.config import ModelConfig
from twinbench.models.layers_torch import clip_grads, make_optimizer
from twinbench.models.llama.shape import EPS, inv_freq, kv_heads
from twinbench.models.options import ModelOptions

__all__ = ["Llama", "clip_grads", "loss_fn", "make_optimizer"]


class RMSNorm(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)
        return self.weight * h.to(x.dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on ``[B, H, T, hd]``: the pairs (x1, x2) are the two halves of the head dimension."""
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.heads, self.kv_heads = cfg.heads, kv_heads(cfg)
        hd = cfg.d_model // cfg.heads
        self.q_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.k_proj = nn.Linear(cfg.d_model, self.kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(cfg.d_model, self.kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        hd = C // self.heads
        q = self.q_proj(x).view(B, T, self.heads, hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.kv_heads, hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.kv_heads, hd).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        # grouped-query: each key/value head serves `heads // kv_heads` consecutive query heads
        # (repeat_interleave's order), which SDPA's kernels take without the heads repeated
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv_heads != self.heads)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.d_model, cfg.ff, bias=False)
        self.up_proj = nn.Linear(cfg.d_model, cfg.ff, bias=False)
        self.down_proj = nn.Linear(cfg.ff, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.d_model)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        with record_function("attn"):
            x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        with record_function("mlp"):
            return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, cfg: ModelConfig, opts: ModelOptions = ModelOptions()):
        super().__init__()
        if opts.scan_layers or opts.remat not in ("none", "full"):
            raise ValueError(f"torch Llama: unsupported options {opts} (no layer scan; remat 'full' only)")
        self.cfg = cfg
        self.opts = opts
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.d_model)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        self.register_buffer("inv_freq", torch.from_numpy(inv_freq(cfg)), persistent=False)  # derived, not a weight
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits of shape [batch, seq, vocab]."""
        with torch.autocast(idx.device.type, torch.bfloat16, enabled=self.opts.compute_dtype == "bf16"):
            with record_function("embed"):
                angles = torch.arange(idx.shape[1], device=idx.device, dtype=torch.float32)[:, None] * self.inv_freq[None]
                cos, sin = angles.cos(), angles.sin()
                x = self.embed_tokens(idx)
            for i, block in enumerate(self.layers):
                with record_function(f"block{i}"):
                    if self.opts.remat != "none":
                        x = checkpoint(block, x, cos, sin, use_reentrant=False)
                    else:
                        x = block(x, cos, sin)
            with record_function("head"):
                return self.lm_head(self.norm(x))


def loss_fn(model: nn.Module, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy, computed in float32. The logits are flattened before they are converted:
    the same values, and under torchax (``+fused-loss``) XLA then fuses the gradient's conversion back to bf16
    into the head's product; converted first, it wrote a copy of the logits' gradient, ``[8192, 50257]`` for GPT-2
    124M at 8 x 1024 (more memory and a longer step by XLA's estimate: benchmarks/RESULTS.md, "The fifth sitting")."""
    logits = model(idx)
    with record_function("loss"):
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.reshape(-1).long())
