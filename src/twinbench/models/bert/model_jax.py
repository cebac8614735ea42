"""BERT encoder for sequence classification in JAX (Flax NNX). Twin of ``model_torch.py``: same classes,
same attribute names (those of Hugging Face's ``BertForSequenceClassification``, without its ``bert.``
prefix), same maths.

Token + position + segment embeddings, post-LayerNorm blocks (eps 1e-12), bidirectional self-attention
(``layers_jax.attention``: written out with einsums by default) with a key padding mask, exact (erf) GELU, a tanh pooler over
the first token and a linear classifier. No dropout: the twins are deterministic, so they can be compared.

``cfg.mask_impl`` chooses how the padding mask reaches the attention (`--mask-impl`); all three give
the same result: ``where`` hands the fused attention a boolean mask (applied with a select, ``jnp.where``),
``mul`` turns the 0/1 mask into an additive bias by multiplication, ``cond`` chooses per batch with
``lax.cond`` between no mask (no padding anywhere in the batch) and the masked attention, on the device.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from twinbench.config import ModelConfig
from twinbench.models import layers_jax
from twinbench.models.layers_jax import (
    DTYPES,
    REMAT_POLICIES,
    LayerNorm,
    Linear,
    activation,
    attention,
    heads_first,
)
from twinbench.models.options import ModelOptions

TYPE_VOCAB = 2  # segment ids: 0 for the first text, 1 for the second of a pair
LN_EPS = 1e-12

normal = nnx.initializers.normal
zeros = nnx.initializers.zeros_init()


def attention_bias(attention_mask: jax.Array, dtype: jnp.dtype) -> jax.Array:
    """0 where a key is a real token, the dtype's most negative value where it is padding: by multiplying."""
    return (1.0 - attention_mask.astype(dtype)) * jnp.finfo(dtype).min


def _linear(n_in: int, n_out: int, rngs: nnx.Rngs, dtype: jnp.dtype = jnp.float32) -> Linear:
    return Linear(n_in, n_out, rngs, 0.02, dtype)


class SelfAttention(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, dtype: jnp.dtype = jnp.float32,
                 attention_impl: str = "default", fused_qkv: bool = False, seq_minor: bool = False):
        self.heads = cfg.heads
        self.impl = attention_impl
        self.fused_qkv = fused_qkv
        self.seq_minor = seq_minor  # ModelOptions.splash_layout, resolved
        self.mask_impl = cfg.mask_impl
        self.query = _linear(cfg.d_model, cfg.d_model, rngs, dtype)
        self.key = _linear(cfg.d_model, cfg.d_model, rngs, dtype)
        self.value = _linear(cfg.d_model, cfg.d_model, rngs, dtype)

    def __call__(self, x: jax.Array, attention_mask: jax.Array) -> jax.Array:
        """The heads' outputs, ``[B, T, H, D]`` or, where the attention takes them heads first
        (``layers_jax.heads_first``: splash), ``[B, H, T, D]``, written so by the projections' own products;
        ``SelfOutput`` merges them in its product. On a TPU with splash that made BERT's step faster: XLA had laid
        each of q, k, v out twice between the product and the kernel. (GPT-2's and Llama's steps were slower so:
        they keep ``[B, T, H, D]``; benchmarks/RESULTS.md, "The fifth sitting".)"""
        first = heads_first(self.impl)
        if self.fused_qkv:
            q, k, v = self.qkv(x, first)
        else:
            q, k, v = (proj.to_heads(x, self.heads, first) for proj in (self.query, self.key, self.value))
        keep = attention_mask[:, None, None, :].astype(bool)  # [B, 1, 1, T]: which keys each query may see
        attend = functools.partial(attention, impl=self.impl, layout_heads_first=first, seq_minor=self.seq_minor)
        if self.mask_impl == "mul":
            y = attend(q, k, v, bias=attention_bias(keep, q.dtype))
        elif self.mask_impl == "cond":  # no padding in this batch: no mask at all; decided on the device
            y = jax.lax.cond(jnp.all(keep),
                             lambda q, k, v: attend(q, k, v),
                             lambda q, k, v: attend(q, k, v, mask=keep),
                             q, k, v)
        else:
            y = attend(q, k, v, mask=keep)
        return y

    def qkv(self, x: jax.Array, first: bool) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``ModelOptions.fused_qkv``: q, k, v as one product ``[B, T, 3C]`` of the three weights side by side (a
        full-width matmul; its biases' gradient a reduction over ``[B, T, 3C]``), then split into heads: with
        ``first`` by one transpose of the three together to ``[3, B, H, T, D]``, the kernel's layout."""
        B, T, C = x.shape
        projs = (self.query, self.key, self.value)
        dtype = self.query.dtype
        w = jnp.concatenate([p.weight[...] for p in projs]).astype(dtype)  # [3C, C]
        b = jnp.concatenate([p.bias[...] for p in projs]).astype(dtype)
        y = jax.lax.dot_general(x.astype(dtype), w, (((2,), (1,)), ((), ()))) + b
        y = y.reshape(B, T, 3, self.heads, C // self.heads)
        if first:
            q, k, v = jnp.transpose(y, (2, 0, 3, 1, 4))
            return q, k, v
        return y[:, :, 0], y[:, :, 1], y[:, :, 2]


class SelfOutput(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, dtype: jnp.dtype = jnp.float32):
        self.dense = _linear(cfg.d_model, cfg.d_model, rngs, dtype)
        self.LayerNorm = LayerNorm(cfg.d_model, epsilon=LN_EPS, rngs=rngs)

    def __call__(self, h: jax.Array, x: jax.Array, first: bool = False) -> jax.Array:
        """``h``: the attention heads' outputs (``first``: ``[B, H, T, D]``, else ``[B, T, H, D]``)."""
        return self.LayerNorm(self.dense.from_heads(h, first) + x)


class Attention(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, dtype: jnp.dtype = jnp.float32,
                 attention_impl: str = "default", fused_qkv: bool = False, seq_minor: bool = False):
        self.self = SelfAttention(cfg, rngs, dtype, attention_impl, fused_qkv, seq_minor)
        self.output = SelfOutput(cfg, rngs, dtype)

    def __call__(self, x: jax.Array, attention_mask: jax.Array) -> jax.Array:
        return self.output(self.self(x, attention_mask), x, heads_first(self.self.impl))


class Intermediate(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, dtype: jnp.dtype = jnp.float32, stored: bool = False):
        self.dense = _linear(cfg.d_model, cfg.ff, rngs, dtype)
        self.stored = stored  # ModelOptions.mlp_activation == "stored"

    def __call__(self, x: jax.Array) -> jax.Array:
        return activation(jax.nn.gelu(self.dense(x), approximate=False), self.stored)  # exact erf GELU, as BERT


class Output(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, dtype: jnp.dtype = jnp.float32):
        self.dense = _linear(cfg.ff, cfg.d_model, rngs, dtype)
        self.LayerNorm = LayerNorm(cfg.d_model, epsilon=LN_EPS, rngs=rngs)

    def __call__(self, h: jax.Array, x: jax.Array) -> jax.Array:
        return self.LayerNorm(self.dense(h) + x)


class Layer(nnx.Module):
    """One post-LayerNorm block: x = LN(x + attn(x)); x = LN(x + mlp(x))."""

    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, dtype: jnp.dtype = jnp.float32,
                 attention_impl: str = "default", fused_qkv: bool = False, seq_minor: bool = False,
                 stored: bool = False):
        self.attention = Attention(cfg, rngs, dtype, attention_impl, fused_qkv, seq_minor)
        self.intermediate = Intermediate(cfg, rngs, dtype, stored)
        self.output = Output(cfg, rngs, dtype)

    def __call__(self, x: jax.Array, attention_mask: jax.Array) -> jax.Array:
        with jax.named_scope("attn"):  # profiler scopes (twinbench explain), as the torch twin's record_function
            x = self.attention(x, attention_mask)
        with jax.named_scope("mlp"):
            return self.output(self.intermediate(x), x)


def apply_layer(layer: Layer, x: jax.Array, attention_mask: jax.Array) -> jax.Array:
    return layer(x, attention_mask)


class Encoder(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, opts: ModelOptions = ModelOptions()):
        self.opts = opts
        dtype = DTYPES[opts.compute_dtype]
        # the projections write q, k, v heads first themselves, unless fused (then one transpose of the three)
        layer = (opts.attention_impl, opts.fused_qkv, opts.splash_seq_minor(written_heads_first=not opts.fused_qkv),
                 opts.mlp_activation == "stored")
        if opts.scan_layers:  # one Layer whose parameters carry a leading [layers] axis
            self.layer = nnx.split_rngs(splits=cfg.layers)(nnx.vmap(lambda r: Layer(cfg, r, dtype, *layer)))(rngs)
        else:
            self.layer = nnx.List([Layer(cfg, rngs, dtype, *layer)
                                   for _ in range(cfg.layers)])

    def __call__(self, x: jax.Array, attention_mask: jax.Array) -> jax.Array:
        layer_fn = apply_layer
        if self.opts.remat != "none":
            layer_fn = nnx.remat(apply_layer, policy=REMAT_POLICIES[self.opts.remat])
        if self.opts.scan_layers:  # the mask is the same for every layer: broadcast (in_axes None)
            scan = nnx.scan(layer_fn, in_axes=(0, nnx.Carry, None), out_axes=nnx.Carry,
                            unroll=self.opts.scan_unroll)
            return scan(self.layer, x, attention_mask)
        for i, layer in enumerate(self.layer):
            with jax.named_scope(f"block{i}"):
                x = layer_fn(layer, x, attention_mask)
        return x


def lookup_few(table: jax.Array, ids: jax.Array) -> jax.Array:
    """``table[ids]`` for a table of a few rows (the segment embeddings), by one select per row instead of a
    gather: the same values, but the backward pass sums the gradient of each row (a reduction over the batch)
    instead of scatter-adding every token's gradient (16384 rows at 32 x 512) into a 2-row table."""
    out = jnp.broadcast_to(table[0], (*ids.shape, table.shape[-1]))
    for row in range(1, table.shape[0]):
        out = jnp.where((ids == row)[..., None], table[row], out)
    return out


class Embeddings(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        self.word_embeddings = nnx.Embed(cfg.vocab, cfg.d_model, embedding_init=normal(0.02), rngs=rngs)
        self.position_embeddings = nnx.Embed(cfg.context, cfg.d_model, embedding_init=normal(0.02), rngs=rngs)
        self.token_type_embeddings = nnx.Embed(TYPE_VOCAB, cfg.d_model, embedding_init=normal(0.02), rngs=rngs)
        self.LayerNorm = LayerNorm(cfg.d_model, epsilon=LN_EPS, rngs=rngs)

    def __call__(self, input_ids: jax.Array, token_type_ids: jax.Array) -> jax.Array:
        pos = jnp.arange(input_ids.shape[1])
        x = self.word_embeddings(input_ids) + self.position_embeddings(pos)
        return self.LayerNorm(x + lookup_few(self.token_type_embeddings.embedding[...], token_type_ids))


class Pooler(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, dtype: jnp.dtype = jnp.float32):
        self.dense = _linear(cfg.d_model, cfg.d_model, rngs, dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        return jnp.tanh(self.dense(x[:, 0]))


class BERT(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, opts: ModelOptions = ModelOptions()):
        # bf16: the Linear layers compute in bf16 (so does attention, on their output); parameters, LayerNorm
        # and the residual stream stay fp32, like torch.autocast in the twin.
        self.cfg = cfg
        self.opts = opts
        dtype = DTYPES[opts.compute_dtype]
        self.embeddings = Embeddings(cfg, rngs)
        self.encoder = Encoder(cfg, rngs, opts)
        self.pooler = Pooler(cfg, rngs, dtype)
        self.classifier = _linear(cfg.d_model, cfg.num_labels, rngs, dtype)

    def __call__(self, input_ids: jax.Array, token_type_ids: jax.Array | None = None,
                 attention_mask: jax.Array | None = None) -> jax.Array:
        """Class logits [batch, num_labels]. ``attention_mask`` is 1 for real tokens, 0 for padding."""
        if token_type_ids is None:
            token_type_ids = jnp.zeros_like(input_ids)
        if attention_mask is None:
            attention_mask = jnp.ones_like(input_ids)
        x = self.encoder(self.embeddings(input_ids, token_type_ids), attention_mask)
        return self.classifier(self.pooler(x))


def loss_fn(model: BERT, x: tuple[jax.Array, ...], labels: jax.Array) -> jax.Array:
    """Mean cross-entropy of the class logits, in float32. ``x`` = (input_ids, token_type_ids, attention_mask)."""
    logits = model(*x)
    return optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels.reshape(-1)).mean()


def make_optimizer(lr: float, weight_decay: float, flat: bool = False) -> optax.GradientTransformation:
    """Clip by global norm 1.0, then AdamW as BERT fine-tuning uses it (betas 0.9/0.999, eps 1e-6)."""
    return layers_jax.make_optimizer(lr, weight_decay, betas=(0.9, 0.999), eps=1e-6, flat=flat)
