"""GPT-2 in JAX (Flax NNX). Twin of ``model_torch.py``: same classes, same attribute names, same maths.

Learned position embeddings, pre-LayerNorm blocks, causal self-attention (written out with
einsums by default, :func:`attention`), tanh-GELU MLP, LM head tied to the token embedding, GPT-2 init.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from twinbench.config import ModelConfig
from twinbench.models.layers_jax import (
    DTYPES,
    REMAT_POLICIES,
    LayerNorm,
    Linear,
    activation,
    attention,
    cross_entropy,
    heads_first,
    make_optimizer,
    normal,
)
from twinbench.models.options import ModelOptions

__all__ = ["GPT", "loss_fn", "make_optimizer"]


class CausalSelfAttention(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, dtype: jnp.dtype = jnp.float32,
                 attention_impl: str = "default", fused_qkv: bool = False, seq_minor: bool = False):
        self.heads = cfg.heads
        self.impl = attention_impl
        self.fused_qkv = fused_qkv
        self.seq_minor = seq_minor  # ModelOptions.splash_layout, resolved
        proj_std = 0.02 / math.sqrt(2 * cfg.layers)
        self.c_attn = Linear(cfg.d_model, 3 * cfg.d_model, rngs, 0.02, dtype)
        self.c_proj = Linear(cfg.d_model, cfg.d_model, rngs, proj_std, dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        # q, k, v stay [B, T, H, D] for every attention, splash too (it takes [B, H, T, D]: attention()
        # transposes): written heads first by c_attn's own product, as BERT's are, the step was slower on a TPU
        # (the biases' gradients then reduce over [B, H, T, D]), where BERT's was faster (benchmarks/RESULTS.md,
        # "The fifth sitting").
        B, T, C = x.shape
        if self.fused_qkv and heads_first(self.impl):  # ModelOptions.fused_qkv: one transpose of the three
            q, k, v = jnp.transpose(self.c_attn(x).reshape(B, T, 3, self.heads, C // self.heads), (2, 0, 3, 1, 4))
            y = attention(q, k, v, self.impl, layout_heads_first=True, seq_minor=self.seq_minor, is_causal=True)
            return self.c_proj(jnp.swapaxes(y, 1, 2).reshape(B, T, C))
        q, k, v = jnp.split(self.c_attn(x), 3, axis=2)
        q, k, v = (t.reshape(B, T, self.heads, C // self.heads) for t in (q, k, v))
        y = attention(q, k, v, self.impl, seq_minor=self.seq_minor, is_causal=True)
        return self.c_proj(y.reshape(B, T, C))


class MLP(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, dtype: jnp.dtype = jnp.float32, stored: bool = False):
        proj_std = 0.02 / math.sqrt(2 * cfg.layers)
        self.c_fc = Linear(cfg.d_model, cfg.ff, rngs, 0.02, dtype)
        self.c_proj = Linear(cfg.ff, cfg.d_model, rngs, proj_std, dtype)
        self.stored = stored  # ModelOptions.mlp_activation == "stored"

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.c_proj(activation(jax.nn.gelu(self.c_fc(x), approximate=True), self.stored))


class Block(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, dtype: jnp.dtype = jnp.float32,
                 attention_impl: str = "default", fused_qkv: bool = False, seq_minor: bool = False,
                 stored: bool = False):
        self.ln_1 = LayerNorm(cfg.d_model, epsilon=1e-5, rngs=rngs)
        self.attn = CausalSelfAttention(cfg, rngs, dtype, attention_impl, fused_qkv, seq_minor)
        self.ln_2 = LayerNorm(cfg.d_model, epsilon=1e-5, rngs=rngs)
        self.mlp = MLP(cfg, rngs, dtype, stored)

    def __call__(self, x: jax.Array) -> jax.Array:
        with jax.named_scope("attn"):  # profiler scopes (twinbench explain), as the torch twin's record_function
            x = x + self.attn(self.ln_1(x))
        with jax.named_scope("mlp"):
            return x + self.mlp(self.ln_2(x))


def apply_block(block: Block, x: jax.Array) -> jax.Array:
    return block(x)


class GPT(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, opts: ModelOptions = ModelOptions()):
        self.cfg = cfg
        self.opts = opts
        dtype = DTYPES[opts.compute_dtype]
        block = (opts.attention_impl, opts.fused_qkv, opts.splash_seq_minor(written_heads_first=False),
                 opts.mlp_activation == "stored")
        self.wte = nnx.Embed(cfg.vocab, cfg.d_model, embedding_init=normal(0.02), rngs=rngs)
        self.wpe = nnx.Embed(cfg.context, cfg.d_model, embedding_init=normal(0.02), rngs=rngs)
        if opts.scan_layers:  # one Block whose parameters carry a leading [layers] axis
            self.blocks = nnx.split_rngs(splits=cfg.layers)(nnx.vmap(
                lambda r: Block(cfg, r, dtype, *block)))(rngs)
        else:
            self.blocks = nnx.List([Block(cfg, rngs, dtype, *block)
                                    for _ in range(cfg.layers)])
        self.ln_f = LayerNorm(cfg.d_model, epsilon=1e-5, rngs=rngs)

    def __call__(self, idx: jax.Array) -> jax.Array:
        """Logits of shape [batch, seq, vocab]; the LM head is the token embedding (tied)."""
        # bf16: the Linear layers compute in bf16 (so does attention, on their output); parameters and
        # LayerNorm stay fp32, like torch.autocast in the twin.
        dtype = DTYPES[self.opts.compute_dtype]
        with jax.named_scope("embed"):
            # one position per token, [B, T], as Hugging Face's Flax GPT-2: the table's gradient is then one
            # scatter-add of every token's row. Looked up once per position ([T]) and broadcast over the batch, it
            # was first a reduction over the batch, which XLA:CPU's YNNPACK fusion ran several times slower than
            # the scatter (benchmarks/position_lookup.py). For a TPU XLA compiles the same ops.
            pos = jnp.broadcast_to(jnp.arange(idx.shape[1]), idx.shape)
            x = self.wte(idx) + self.wpe(pos)
        block_fn = apply_block
        if self.opts.remat != "none":
            block_fn = nnx.remat(apply_block, policy=REMAT_POLICIES[self.opts.remat])
        if self.opts.scan_layers:
            scan = nnx.scan(block_fn, in_axes=(0, nnx.Carry), out_axes=nnx.Carry, unroll=self.opts.scan_unroll)
            x = scan(self.blocks, x)
        else:
            for i, block in enumerate(self.blocks):
                with jax.named_scope(f"block{i}"):
                    x = block_fn(block, x)
        with jax.named_scope("head"):
            return self.ln_f(x).astype(dtype) @ self.wte.embedding[...].astype(dtype).T


def loss_fn(model: GPT, idx: jax.Array, targets: jax.Array) -> jax.Array:
    """Mean next-token cross-entropy, computed in float32 (:func:`layers_jax.cross_entropy`)."""
    logits = model(idx)
    with jax.named_scope("loss"):
        return cross_entropy(logits, targets)
