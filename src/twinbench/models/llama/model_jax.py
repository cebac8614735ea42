"""Llama in JAX (Flax NNX). Twin of ``model_torch.py``: same classes, same attribute names (Hugging Face's
``LlamaForCausalLM`` without its ``model.`` prefix), same maths.

Rotary position embeddings (RoPE, the two halves of each head rotated), RMSNorm (eps 1e-6), pre-norm blocks,
grouped-query causal attention (``kv_heads`` key/value heads shared by groups of query heads), SwiGLU MLP,
no biases, an untied LM head, Normal(0, 0.02) initialisation.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from twinbench.config import ModelConfig
from twinbench.models.layers_jax import (
    DTYPES,
    REMAT_POLICIES,
    activation,
    attention,
    cross_entropy,
    make_optimizer,
    normal,
)
from twinbench.models.llama.shape import EPS, inv_freq, kv_heads
from twinbench.models.options import ModelOptions

__all__ = ["Llama", "loss_fn", "make_optimizer"]


class Linear(nnx.Module):
    """``y = x @ weight.T`` with ``weight`` ``[out, in]`` (torch's ``nn.Linear(bias=False)``; see
    ``layers_jax.Linear`` for why this layout): inputs and weight cast to ``dtype``, then the product."""

    def __init__(self, n_in: int, n_out: int, rngs: nnx.Rngs, dtype: jnp.dtype = jnp.float32):
        self.weight = nnx.Param(normal(0.02)(rngs.params(), (n_out, n_in)))
        self.dtype = dtype

    def __call__(self, x: jax.Array) -> jax.Array:
        w = self.weight[...].astype(self.dtype)
        return jax.lax.dot_general(x.astype(self.dtype), w, (((x.ndim - 1,), (1,)), ((), ())))


class RMSNorm(nnx.Module):
    def __init__(self, d: int):
        self.weight = nnx.Param(jnp.ones((d,), jnp.float32))

    def __call__(self, x: jax.Array) -> jax.Array:
        with jax.named_scope("rms_norm"):  # explain's normalization row, as torch's RMSNorm module's
            h = x.astype(jnp.float32)
            h = h * jax.lax.rsqrt(jnp.mean(h * h, axis=-1, keepdims=True) + EPS)
            return self.weight[...] * h.astype(x.dtype)


def rotate(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """RoPE on ``[B, T, H, hd]``: the pairs (x1, x2) are the two halves of the head dimension."""
    x1, x2 = jnp.split(x, 2, axis=-1)
    cos, sin = cos[:, None, :].astype(x.dtype), sin[:, None, :].astype(x.dtype)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


class Attention(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, dtype: jnp.dtype = jnp.float32,
                 attention_impl: str = "default", seq_minor: bool = False):
        self.heads, self.kv_heads = cfg.heads, kv_heads(cfg)
        self.impl = attention_impl
        self.seq_minor = seq_minor  # ModelOptions.splash_layout, resolved
        hd = cfg.d_model // cfg.heads
        self.q_proj = Linear(cfg.d_model, cfg.d_model, rngs, dtype)
        self.k_proj = Linear(cfg.d_model, self.kv_heads * hd, rngs, dtype)
        self.v_proj = Linear(cfg.d_model, self.kv_heads * hd, rngs, dtype)
        self.o_proj = Linear(cfg.d_model, cfg.d_model, rngs, dtype)

    def __call__(self, x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
        # [B, T, H, hd] for every attention, splash too (attention() transposes): written heads first by the
        # projections, as BERT's are, llama-300m's step was slower on a TPU (benchmarks/RESULTS.md, "The fifth
        # sitting")
        B, T, C = x.shape
        hd = C // self.heads
        q = self.q_proj(x).reshape(B, T, self.heads, hd)
        k = self.k_proj(x).reshape(B, T, self.kv_heads, hd)
        v = self.v_proj(x).reshape(B, T, self.kv_heads, hd)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        # grouped-query: each key/value head serves `heads // kv_heads` consecutive query heads (attention()
        # repeats them where the kernel does not take groups itself)
        y = attention(q, k, v, self.impl, seq_minor=self.seq_minor, is_causal=True)
        return self.o_proj(y.reshape(B, T, C))


class MLP(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, dtype: jnp.dtype = jnp.float32, stored: bool = False):
        self.gate_proj = Linear(cfg.d_model, cfg.ff, rngs, dtype)
        self.up_proj = Linear(cfg.d_model, cfg.ff, rngs, dtype)
        self.down_proj = Linear(cfg.ff, cfg.d_model, rngs, dtype)
        self.stored = stored  # ModelOptions.mlp_activation == "stored"

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.down_proj(activation(jax.nn.silu(self.gate_proj(x)) * self.up_proj(x), self.stored))


class Block(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, dtype: jnp.dtype = jnp.float32,
                 attention_impl: str = "default", seq_minor: bool = False, stored: bool = False):
        self.input_layernorm = RMSNorm(cfg.d_model)
        self.self_attn = Attention(cfg, rngs, dtype, attention_impl, seq_minor)
        self.post_attention_layernorm = RMSNorm(cfg.d_model)
        self.mlp = MLP(cfg, rngs, dtype, stored)

    def __call__(self, x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
        with jax.named_scope("attn"):
            x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        with jax.named_scope("mlp"):
            return x + self.mlp(self.post_attention_layernorm(x))


def apply_block(block: Block, x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    return block(x, cos, sin)


class Llama(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, opts: ModelOptions = ModelOptions()):
        self.cfg = cfg
        self.opts = opts
        dtype = DTYPES[opts.compute_dtype]
        self.embed_tokens = nnx.Embed(cfg.vocab, cfg.d_model, embedding_init=normal(0.02), rngs=rngs)
        block = (opts.attention_impl, opts.splash_seq_minor(written_heads_first=False), opts.mlp_activation == "stored")
        if opts.scan_layers:  # one Block whose parameters carry a leading [layers] axis
            make = nnx.vmap(lambda r: Block(cfg, r, dtype, *block))
            self.layers = nnx.split_rngs(splits=cfg.layers)(make)(rngs)
        else:
            self.layers = nnx.List([Block(cfg, rngs, dtype, *block) for _ in range(cfg.layers)])
        self.norm = RMSNorm(cfg.d_model)
        self.lm_head = Linear(cfg.d_model, cfg.vocab, rngs, dtype)

    def __call__(self, idx: jax.Array) -> jax.Array:
        """Logits of shape [batch, seq, vocab]."""
        with jax.named_scope("embed"):
            angles = jnp.arange(idx.shape[1], dtype=jnp.float32)[:, None] * jnp.asarray(inv_freq(self.cfg))[None]  # derived, not a weight
            cos, sin = jnp.cos(angles), jnp.sin(angles)
            x = self.embed_tokens(idx)
        block_fn = apply_block
        if self.opts.remat != "none":
            block_fn = nnx.remat(apply_block, policy=REMAT_POLICIES[self.opts.remat])
        if self.opts.scan_layers:
            scan = nnx.scan(block_fn, in_axes=(0, nnx.Carry, None, None), out_axes=nnx.Carry,
                            unroll=self.opts.scan_unroll)
            x = scan(self.layers, x, cos, sin)
        else:
            for i, block in enumerate(self.layers):
                with jax.named_scope(f"block{i}"):
                    x = block_fn(block, x, cos, sin)
        with jax.named_scope("head"):
            return self.lm_head(self.norm(x))


def loss_fn(model: Llama, idx: jax.Array, targets: jax.Array) -> jax.Array:
    """Mean next-token cross-entropy, computed in float32 (:func:`layers_jax.cross_entropy`)."""
    logits = model(idx)
    with jax.named_scope("loss"):
        return cross_entropy(logits, targets)
