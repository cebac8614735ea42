"""GPT-2 in JAX (Flax NNX). Twin of ``gpt_torch.py``: same classes, same attribute names, same maths.

Learned position embeddings, pre-LayerNorm blocks, causal self-attention (written out with
einsums by default, :func:`attention`), tanh-GELU MLP, LM head tied to the token embedding, GPT-2 init.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from twinbench.config import ModelConfig
from twinbench.models.options import ModelOptions

normal = nnx.initializers.normal
zeros = nnx.initializers.zeros_init()
DTYPES = {"fp32": jnp.float32, "bf16": jnp.bfloat16}
#: jax.checkpoint policies by ModelOptions.remat name ("full": no policy, i.e. save nothing but the inputs).
REMAT_POLICIES = {"full": None, "dots-saveable": jax.checkpoint_policies.dots_saveable,
                  "nothing-saveable": jax.checkpoint_policies.nothing_saveable}
#: ``implementation`` of jax.nn.dot_product_attention by ModelOptions.attention_impl (None: JAX's choice).
KERNELS = {"jax-nn": None, "cudnn": "cudnn"}


#: queries per block of "chunked" attention (the sequence is split into blocks of at most this many).
ATTENTION_CHUNK = 128


def einsum_attention(q: jax.Array, k: jax.Array, v: jax.Array, *, is_causal: bool = False,
                     mask: jax.Array | None = None, bias: jax.Array | None = None) -> jax.Array:
    """Attention written out, ``[B, T, H, D]`` in and out: the maths of ``jax.nn.dot_product_attention``'s
    XLA path (softmax in fp32) without the grouped-query ``vmap`` that path wraps around it, whose extra batch
    axis costs transposes of the scores on XLA:CPU; formulated as Hugging Face's Flax GPT-2 does it: the
    queries scaled before the product, the causal mask added to the scores as a 0 / most-negative bias.
    ``mask``: True where a query may see a key (broadcast to ``[B, H, T, T]``); ``bias`` is added to the scores."""
    D = q.shape[-1]
    q = q * jnp.asarray(1.0 / math.sqrt(D), q.dtype)
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.promote_types(q.dtype, jnp.float32))
    if bias is not None:
        s = s + bias.astype(s.dtype)
    if is_causal:
        T, S = s.shape[-2:]
        causal = jnp.tril(jnp.ones((T, S), bool))
        s = s + jax.lax.select(causal, jnp.zeros((T, S), s.dtype), jnp.full((T, S), jnp.finfo(s.dtype).min, s.dtype))
    if mask is not None:
        s = jnp.where(mask, s, jnp.finfo(s.dtype).min)
    p = jax.nn.softmax(s.astype(jnp.float32), axis=-1).astype(v.dtype)
    return jnp.einsum("bhqk,bkhd->bqhd", p, v)


def attention(q: jax.Array, k: jax.Array, v: jax.Array, impl: str, **masks: jax.Array | bool | None) -> jax.Array:
    """The twins' attention by ``ModelOptions.attention_impl``: ``default`` (:func:`einsum_attention`),
    ``jax-nn`` or ``cudnn`` (``jax.nn.dot_product_attention``, JAX's choice or cuDNN's fused kernel),
    ``chunked`` (:func:`chunked_attention`, causal only)."""
    if impl == "default":
        return einsum_attention(q, k, v, **masks)
    if impl == "chunked":
        if set(masks) - {"is_causal"} or not masks.get("is_causal"):
            raise ValueError("attention_impl 'chunked' computes causal attention only")
        return chunked_attention(q, k, v)
    return jax.nn.dot_product_attention(q, k, v, implementation=KERNELS[impl], **masks)


def chunked_attention(q: jax.Array, k: jax.Array, v: jax.Array, chunk: int = ATTENTION_CHUNK) -> jax.Array:
    """Causal attention by blocks of queries, ``[B, T, H, D]`` in and out: the maths of
    ``jax.nn.dot_product_attention(q, k, v, is_causal=True)`` (softmax in fp32), but only one block's
    ``[B, H, chunk, T]`` scores are alive at a time: each block is rematerialised in the backward pass
    instead of keeping every layer's ``[B, H, T, T]`` probabilities."""
    B, T, H, D = q.shape
    c = math.gcd(T, chunk)
    scale = 1.0 / math.sqrt(D)
    q_blocks = q.reshape(B, T // c, c, H, D).swapaxes(0, 1)  # [blocks, B, c, H, D]

    @jax.checkpoint
    def block(args: tuple[jax.Array, jax.Array]) -> jax.Array:
        qi, i = args
        s = jnp.einsum("bqhd,bkhd->bhqk", qi, k) * jnp.asarray(scale, qi.dtype)
        causal = (i * c + jnp.arange(c))[:, None] >= jnp.arange(T)[None, :]
        s = jnp.where(causal, s.astype(jnp.float32), jnp.finfo(jnp.float32).min)
        p = jax.nn.softmax(s, axis=-1).astype(v.dtype)
        return jnp.einsum("bhqk,bkhd->bqhd", p, v)

    y = jax.lax.map(block, (q_blocks, jnp.arange(T // c)))
    return y.swapaxes(0, 1).reshape(B, T, H, D)


class Linear(nnx.Module):
    """``y = x @ weight.T + bias`` with ``weight`` of shape ``[out, in]``, as torch's ``nn.Linear`` (and Hugging
    Face's Flax GPT-2) keep it, not ``nnx.Linear``'s ``[in, out]``: the backward pass's weight gradient is then
    ``dy.T @ x``, a plain matrix product XLA:CPU hands to its fast matmul library, where ``[in, out]`` asks
    for ``x.T @ dy`` with both operands transposed, which it leaves to a slower one (about 15% of a ``small``
    training step). The maths is nnx.Linear's: inputs and parameters cast to ``dtype``, then the product."""

    def __init__(self, n_in: int, n_out: int, rngs: nnx.Rngs, std: float = 0.02, dtype: jnp.dtype = jnp.float32):
        self.weight = nnx.Param(normal(std)(rngs.params(), (n_out, n_in)))
        self.bias = nnx.Param(zeros(rngs.params(), (n_out,)))
        self.dtype = dtype

    def __call__(self, x: jax.Array) -> jax.Array:
        w, b = self.weight[...].astype(self.dtype), self.bias[...].astype(self.dtype)
        return jax.lax.dot_general(x.astype(self.dtype), w, (((x.ndim - 1,), (1,)), ((), ()))) + b


class CausalSelfAttention(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, dtype: jnp.dtype = jnp.float32,
                 attention_impl: str = "default"):
        self.heads = cfg.heads
        self.impl = attention_impl
        proj_std = 0.02 / math.sqrt(2 * cfg.layers)
        self.c_attn = Linear(cfg.d_model, 3 * cfg.d_model, rngs, 0.02, dtype)
        self.c_proj = Linear(cfg.d_model, cfg.d_model, rngs, proj_std, dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        B, T, C = x.shape
        q, k, v = jnp.split(self.c_attn(x), 3, axis=2)
        q, k, v = (t.reshape(B, T, self.heads, C // self.heads) for t in (q, k, v))
        y = attention(q, k, v, self.impl, is_causal=True)
        return self.c_proj(y.reshape(B, T, C))


class MLP(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, dtype: jnp.dtype = jnp.float32):
        proj_std = 0.02 / math.sqrt(2 * cfg.layers)
        self.c_fc = Linear(cfg.d_model, cfg.ff, rngs, 0.02, dtype)
        self.c_proj = Linear(cfg.ff, cfg.d_model, rngs, proj_std, dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.c_proj(jax.nn.gelu(self.c_fc(x), approximate=True))


class Block(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, dtype: jnp.dtype = jnp.float32,
                 attention_impl: str = "default"):
        self.ln_1 = nnx.LayerNorm(cfg.d_model, epsilon=1e-5, rngs=rngs)
        self.attn = CausalSelfAttention(cfg, rngs, dtype, attention_impl)
        self.ln_2 = nnx.LayerNorm(cfg.d_model, epsilon=1e-5, rngs=rngs)
        self.mlp = MLP(cfg, rngs, dtype)

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
        self.wte = nnx.Embed(cfg.vocab, cfg.d_model, embedding_init=normal(0.02), rngs=rngs)
        self.wpe = nnx.Embed(cfg.context, cfg.d_model, embedding_init=normal(0.02), rngs=rngs)
        if opts.scan_layers:  # one Block whose parameters carry a leading [layers] axis
            self.blocks = nnx.split_rngs(splits=cfg.layers)(nnx.vmap(lambda r: Block(cfg, r, dtype, opts.attention_impl)))(rngs)
        else:
            self.blocks = nnx.List([Block(cfg, rngs, dtype, opts.attention_impl) for _ in range(cfg.layers)])
        self.ln_f = nnx.LayerNorm(cfg.d_model, epsilon=1e-5, rngs=rngs)

    def __call__(self, idx: jax.Array) -> jax.Array:
        """Logits of shape [batch, seq, vocab]; the LM head is the token embedding (tied)."""
        # bf16: the Linear layers compute in bf16 (so does attention, on their output); parameters and
        # LayerNorm stay fp32, like torch.autocast in the twin.
        dtype = DTYPES[self.opts.compute_dtype]
        with jax.named_scope("embed"):
            pos = jnp.arange(idx.shape[1])
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
    """Mean next-token cross-entropy, computed in float32."""
    logits = model(idx)
    with jax.named_scope("loss"):
        return optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), targets).mean()


def decay_mask(params: nnx.State) -> nnx.State:
    """AdamW decays every parameter of rank >= 2 (matrices and embeddings), not biases or LayerNorm."""
    return jax.tree.map(lambda p: p.ndim >= 2, params)


GRAD_CLIP = 1.0


def make_optimizer(lr: float, weight_decay: float) -> optax.GradientTransformation:
    """Clip by global norm 1.0, then AdamW: the semantics of ``gpt_torch.make_optimizer``."""
    return optax.chain(
        optax.clip_by_global_norm(GRAD_CLIP),
        optax.adamw(lr, b1=0.9, b2=0.95, eps=1e-8, weight_decay=weight_decay, mask=decay_mask),
    )
