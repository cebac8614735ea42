"""Layers shared by the JAX twins (every family): ``Linear`` in torch's ``[out, in]`` layout, attention
(written out with einsums, chunked, or ``jax.nn.dot_product_attention``), compute dtypes, remat policies, and
the default optimizer (gradient clipping by global norm + AdamW). Twin of ``layers_torch.py``.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

normal = nnx.initializers.normal
zeros = nnx.initializers.zeros_init()
DTYPES = {"fp32": jnp.float32, "bf16": jnp.bfloat16}
#: jax.checkpoint policies by ModelOptions.remat name ("full": no policy, i.e. save nothing but the inputs).
REMAT_POLICIES = {"full": None, "dots-saveable": jax.checkpoint_policies.dots_saveable,
                  "nothing-saveable": jax.checkpoint_policies.nothing_saveable}
#: ``implementation`` of jax.nn.dot_product_attention by ModelOptions.attention_impl (None: JAX's choice).
KERNELS = {"jax-nn": None, "cudnn": "cudnn"}
#: block sizes (queries and keys) "splash" tries, largest first: on a TPU, gpt2-124m's attention forward and
#: backward ran fastest at 512 with the fused backward kernel, 256 slower, and all of them faster than XLA's
#: einsums (benchmarks/RESULTS.md, "On a TPU"). Blocks of 128 lanes at least.
SPLASH_BLOCKS = (512, 256, 128)


#: the platform the program being traced will run on, where that is not this process's own (``lowering_for``)
_TARGET_PLATFORM: contextvars.ContextVar[str | None] = contextvars.ContextVar("twinbench_target", default=None)


@contextlib.contextmanager
def lowering_for(platform: str) -> Iterator[None]:
    """Trace the twins for ``platform`` (``tpu``) while this process runs on another (a TPU step compiled on
    a CPU by ``twinbench predict --compile``): the Pallas TPU kernels are then built as Mosaic kernels, not
    for Pallas's interpreter. Only what is traced inside the block is affected. JAX's tracing caches are
    cleared on the way in and out: a splash kernel traced for one platform is otherwise reused for the other
    (the kernel's cached trace does not tell them apart)."""
    token = _TARGET_PLATFORM.set(platform)
    jax.clear_caches()
    try:
        yield
    finally:
        _TARGET_PLATFORM.reset(token)
        jax.clear_caches()


def target_platform() -> str:
    """The platform the twins are traced for: ``lowering_for``'s, else this process's default backend."""
    return _TARGET_PLATFORM.get() or jax.default_backend()


#: queries per block of "chunked" attention (the sequence is split into blocks of at most this many).
ATTENTION_CHUNK = 128


def _scores(q: jax.Array, k: jax.Array) -> jax.Array:
    return jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.promote_types(q.dtype, jnp.float32))


@jax.custom_vjp
def _scores_vjp(q: jax.Array, k: jax.Array) -> jax.Array:
    return _scores(q, k)


def _scores_fwd(q: jax.Array, k: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    return _scores(q, k), (q, k)


def _scores_bwd(res: tuple[jax.Array, jax.Array], ds: jax.Array) -> tuple[jax.Array, jax.Array]:
    q, k = res
    ds = ds.astype(q.dtype)  # the scores' gradient in the inputs' dtype, as torch's bf16 attention hands it on
    dq = jnp.einsum("bhqk,bkhd->bqhd", ds, k, preferred_element_type=jnp.float32).astype(q.dtype)
    dk = jnp.einsum("bhqk,bqhd->bkhd", ds, q, preferred_element_type=jnp.float32).astype(k.dtype)
    return dq, dk


_scores_vjp.defvjp(_scores_fwd, _scores_bwd)


def attention_scores(q: jax.Array, k: jax.Array) -> jax.Array:
    """``q @ k.T`` per head, ``[B, T, H, D]`` in, ``[B, H, T, S]`` fp32 scores out (accumulated in fp32), with
    its backward pass's two products written out (``dq = ds @ k``, ``dk = ds.T @ q``) instead of left to JAX's
    transpose of the forward einsum.

    In fp32, JAX's own transpose asks for ``dk`` as a batched product contracting the left operand's rows
    (``lhs_contracting_dims={2}``), which XLA:CPU runs outside its YNNPACK matmul fusions (4 dots of the ``small``
    step, 1.0 against 0.65 ms for the same product laid out for YNNPACK on one thread); written out in this order,
    XLA lays ``dk`` out as ``q.T @ ds`` and every dot of the step is a YNNPACK fusion, with the same copies and
    transposes (``benchmarks/twin_programs.py``; Hugging Face's FlaxGPT2 keeps the 4: benchmarks/results/
    twins-vs-public.md). The same maths, summed in another order.

    With bf16 ``q`` and ``k``, the two products take the scores' gradient rounded to bf16 and accumulate in fp32,
    as torch's bf16 attention does (autocast's matmul backward, FlashAttention's dS). Left to JAX's transpose of
    ``preferred_element_type=float32``, they would be fp32 x fp32 products with ``k``/``q`` converted up: under
    ``jax_default_matmul_precision=highest`` (twinbench's fp32 setting, also set in bf16 runs) a TPU runs those as
    6 bf16 passes."""
    return _scores_vjp(q, k)


def einsum_attention(q: jax.Array, k: jax.Array, v: jax.Array, *, is_causal: bool = False,
                     mask: jax.Array | None = None, bias: jax.Array | None = None) -> jax.Array:
    """Attention written out, ``[B, T, H, D]`` in and out: the maths of ``jax.nn.dot_product_attention``'s
    XLA path (softmax in fp32) without the grouped-query ``vmap`` that path wraps around it, whose extra batch
    axis costs transposes of the scores on XLA:CPU; formulated as Hugging Face's Flax GPT-2 does it: the
    queries scaled before the product, the causal mask added to the scores as a 0 / most-negative bias.
    ``mask``: True where a query may see a key (broadcast to ``[B, H, T, T]``); ``bias`` is added to the scores."""
    D = q.shape[-1]
    q = q * jnp.asarray(1.0 / math.sqrt(D), q.dtype)
    s = attention_scores(q, k)
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


#: attention implementations whose natural layout is ``[B, H, T, D]`` (heads first; the Pallas TPU kernels):
#: a twin may ask :func:`heads_first` and have its projections write q, k, v in that order
#: (:meth:`Linear.to_heads`), so no transpose stands between the product and the kernel (BERT does: faster on a
#: TPU; GPT-2 and Llama were slower so and give ``[B, T, H, D]``, which attention() swaps; benchmarks/RESULTS.md,
#: "The fifth sitting").
#: The others take ``[B, T, H, D]``, a plain reshape of a projection's output.
HEADS_FIRST = frozenset({"splash"})


def heads_first(impl: str) -> bool:
    """Whether attention ``impl`` wants q, k, v as ``[B, H, T, D]`` (True) or ``[B, T, H, D]``."""
    return impl in HEADS_FIRST


#: attention implementations that take fewer key/value heads than query heads themselves (grouped-query).
GROUPED = frozenset({"splash", "jax-nn", "cudnn"})


def _group(q_heads: int, kv_heads: int) -> int:
    if kv_heads < 1 or q_heads % kv_heads:
        raise ValueError(f"grouped-query attention needs key/value heads dividing the query heads: got {q_heads} "
                         f"query heads and {kv_heads} key/value heads")
    return q_heads // kv_heads


def _swap_heads(*ts: jax.Array) -> tuple[jax.Array, ...]:
    return tuple(jnp.swapaxes(t, 1, 2) for t in ts)  # [B, T, H, D] <-> [B, H, T, D]


def attention(q: jax.Array, k: jax.Array, v: jax.Array, impl: str, *, layout_heads_first: bool = False,
              seq_minor: bool = False, **masks: jax.Array | bool | None) -> jax.Array:
    """The twins' attention by ``ModelOptions.attention_impl``: ``default`` (:func:`einsum_attention`),
    ``jax-nn`` or ``cudnn`` (``jax.nn.dot_product_attention``, JAX's choice or cuDNN's fused kernel),
    ``chunked`` (:func:`chunked_attention`, causal only), ``splash`` (:func:`splash_attention`, the Pallas
    TPU kernel). q, k, v and the output are ``[B, T, H, D]``, or ``[B, H, T, D]`` with ``layout_heads_first``
    (torch's layout; what :func:`heads_first` implementations take without a transpose). ``seq_minor``: the
    splash kernel reads q, k, v sequence-minor (``ModelOptions.splash_layout``); the others ignore it.

    Grouped-query attention: ``k`` and ``v`` may carry fewer heads than ``q`` (a divisor of its count; key/value
    head ``j`` serves query heads ``j * group ... (j + 1) * group - 1``, torch's ``repeat_interleave`` and
    ``enable_gqa``). The kernels that take groups themselves get them as they are (``splash``, ``jax-nn``,
    ``cudnn``); for the others the key/value heads are repeated here. On a TPU, llama-300m's step with the
    heads repeated before splash carried a broadcast and, in the backward pass, a reduction of each of k and v
    in every layer (benchmarks/RESULTS.md, "On a TPU")."""
    head_axis = 1 if layout_heads_first else 2
    if q.shape[head_axis] != k.shape[head_axis] and impl not in GROUPED:
        group = _group(q.shape[head_axis], k.shape[head_axis])
        k, v = (jnp.repeat(t, group, axis=head_axis) for t in (k, v))
    swap = layout_heads_first != heads_first(impl)
    if swap:
        q, k, v = _swap_heads(q, k, v)
    if impl == "default":
        y = einsum_attention(q, k, v, **masks)
    elif impl == "splash":
        y = splash_attention(q, k, v, seq_minor=seq_minor, **masks)
    elif impl == "chunked":
        if set(masks) != {"is_causal"} or not masks["is_causal"]:  # is_causal=True, and nothing else
            raise ValueError("attention_impl 'chunked' computes causal attention only")
        y = chunked_attention(q, k, v)
    else:
        y = jax.nn.dot_product_attention(q, k, v, implementation=KERNELS[impl], **masks)
    return _swap_heads(y)[0] if swap else y


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


def splash_block(seq: int) -> int:
    """The block size "splash" uses for a sequence of ``seq`` tokens: the largest of SPLASH_BLOCKS dividing it."""
    block = next((b for b in SPLASH_BLOCKS if seq % b == 0), None)
    if block is None:
        raise ValueError(f"attention_impl 'splash' needs a sequence length that is a multiple of "
                         f"{SPLASH_BLOCKS[-1]} (got {seq}); pad the batch or use 'default'")
    return block


def splash_attention(q: jax.Array, k: jax.Array, v: jax.Array, *, is_causal: bool = False,
                     mask: jax.Array | None = None, bias: jax.Array | None = None,
                     seq_minor: bool = False) -> jax.Array:
    """Attention by the Pallas TPU splash-attention kernel (``jax.experimental.pallas.ops.tpu``), ``[B, H, T, D]``
    in and out (heads first, the kernel's own layout): the maths of :func:`einsum_attention` (queries scaled by 1/sqrt(D), softmax with fp32
    statistics) in fused blocks, so no ``[B, H, T, T]`` scores are ever stored: the backward pass recomputes
    them block by block (the fused dq/dk/dv kernel). Block sizes follow the sequence (:func:`splash_block`).
    ``seq_minor``: the kernel reads q, k, v as ``[D, T]`` tiles (``QKVLayout.SEQ_MINOR``), so a projection that
    writes them heads first lays its product out with the sequence in the lanes. On a TPU, BERT's attention block
    (the three projections written heads first, the kernel, the output projection; forward and backward) was
    faster so (``benchmarks/tpu_splash_blocks.py``; block sizes other than the sequence's were all slower).

    ``mask`` must be a key padding mask (``[B, 1, 1, T]``, True for real tokens): it becomes segment ids (real
    tokens one segment, padding another), which keep every real query's attention to real keys exactly; a
    padding query then attends to padding only, an output no loss reads. On a platform other than a TPU the
    kernel runs in Pallas's interpreter: the same maths, slowly (tests, not measurements)."""
    from jax.experimental.pallas.ops.tpu import splash_attention as splash

    if bias is not None:
        raise ValueError("attention_impl 'splash' takes a causal or key padding mask, not an additive bias; "
                         "use --mask-impl where (BERT) or attention_impl 'default'")
    B, H, T, D = q.shape
    block = splash_block(T)
    layout = splash.QKVLayout.SEQ_MINOR if seq_minor else splash.QKVLayout.HEAD_DIM_MINOR
    sizes = splash.BlockSizes(block_q=block, block_kv=block, block_kv_compute=block, block_q_dkv=block,
                              block_kv_dkv=block, block_kv_dkv_compute=block, use_fused_bwd_kernel=True,
                              q_layout=layout, k_layout=layout, v_layout=layout)
    head_mask = splash.CausalMask((T, T)) if is_causal else splash.FullMask((T, T))
    kernel = splash.make_splash_mha(splash.MultiHeadMask([head_mask] * H), block_sizes=sizes, head_shards=1,
                                    q_seq_shards=1, interpret=target_platform() != "tpu")
    q = q * jnp.asarray(1.0 / math.sqrt(D), q.dtype)
    with jax.default_matmul_precision("default"):  # Mosaic refuses "highest" on bf16 operands
        return _splash_call(kernel, splash, q, k, v, mask, B, T)


def _splash_call(kernel, splash, q, k, v, mask, B, T):
    """The kernel over the batch (``jax.vmap``), a key padding mask as segment ids."""
    if mask is None:
        return jax.vmap(kernel)(q, k, v)
    if mask.shape[1:3] != (1, 1) or mask.shape[-1] != T:
        raise ValueError(f"attention_impl 'splash' takes a key padding mask [B, 1, 1, T], got {mask.shape}")
    ids = jnp.broadcast_to(mask, (B, 1, 1, T))[:, 0, 0, :].astype(jnp.int32)
    return jax.vmap(lambda q, k, v, s: kernel(q, k, v, segment_ids=splash.SegmentIds(q=s, kv=s)))(q, k, v, ids)


def activation(h: jax.Array, stored: bool) -> jax.Array:
    """The MLP's activation as the products after it read it: written once (an ``optimization_barrier``: XLA may
    not fuse its computation into the products that read it) when ``stored``, else as XLA fuses it
    (models/options.py: MLP_ACTIVATIONS)."""
    return jax.lax.optimization_barrier(h) if stored else h


class LayerNorm(nnx.LayerNorm):
    """``nnx.LayerNorm`` under the profiler scope ``layer_norm``: its ops are the normalization row of
    ``twinbench explain``, as torch's ``aten::layer_norm`` is (without a scope they fuse into the block's
    element-wise and reduction rows, and the two frameworks' rows would not mean the same)."""

    def __call__(self, x: jax.Array, *args: Any, **kwargs: Any) -> jax.Array:
        with jax.named_scope("layer_norm"):
            return super().__call__(x, *args, **kwargs)


class Linear(nnx.Module):
    """``y = x @ weight.T + bias`` with ``weight`` of shape ``[out, in]``, as torch's ``nn.Linear`` (and Hugging
    Face's Flax GPT-2) keep it, not ``nnx.Linear``'s ``[in, out]``: the backward pass's weight gradient is then
    ``dy.T @ x``, a plain matrix product XLA:CPU hands to its fast matmul library, where ``[in, out]`` asks
    for ``x.T @ dy`` with both operands transposed, which it leaves to a slower one (a visible share of a
    ``small`` training step). The maths is nnx.Linear's: inputs and parameters cast to ``dtype``, then the product."""

    def __init__(self, n_in: int, n_out: int, rngs: nnx.Rngs, std: float = 0.02, dtype: jnp.dtype = jnp.float32):
        self.weight = nnx.Param(normal(std)(rngs.params(), (n_out, n_in)))
        self.bias = nnx.Param(zeros(rngs.params(), (n_out,)))
        self.dtype = dtype

    def __call__(self, x: jax.Array) -> jax.Array:
        w, b = self.weight[...].astype(self.dtype), self.bias[...].astype(self.dtype)
        return jax.lax.dot_general(x.astype(self.dtype), w, (((x.ndim - 1,), (1,)), ((), ()))) + b

    def to_heads(self, x: jax.Array, heads: int, first: bool) -> jax.Array:
        """``self(x)`` split into ``heads``: ``[B, T, H, D]`` (a reshape of the product), or with ``first``
        ``[B, H, T, D]``, the order the product itself writes, so the compiler lays the output out for the kernel
        directly (on a TPU, BERT's step lost most of its layout copies by XLA's cost estimate, and ran faster:
        benchmarks/RESULTS.md, "The fifth sitting")."""
        if not first:
            return self(x).reshape(*x.shape[:-1], heads, -1)
        w, b = self.weight[...].astype(self.dtype), self.bias[...].astype(self.dtype)
        D = w.shape[0] // heads
        return jnp.einsum("btc,hdc->bhtd", x.astype(self.dtype), w.reshape(heads, D, -1)) + b.reshape(heads, 1, D)

    def from_heads(self, y: jax.Array, first: bool) -> jax.Array:
        """``self`` over the heads of ``y`` (``[B, T, H, D]``, or ``[B, H, T, D]`` with ``first``) merged:
        ``self(y.reshape(B, T, H * D))``, with ``first`` as one product over (head, dim)."""
        if not first:
            return self(y.reshape(*y.shape[:-2], -1))
        w, b = self.weight[...].astype(self.dtype), self.bias[...].astype(self.dtype)
        H, D = y.shape[1], y.shape[-1]
        return jnp.einsum("bhtd,ohd->bto", y.astype(self.dtype), w.reshape(-1, H, D)) + b


def cross_entropy(logits: jax.Array, targets: jax.Array) -> jax.Array:
    """Mean cross-entropy of ``logits`` (``[..., vocab]``, fp32 or bf16) against integer ``targets``, computed in
    fp32: ``optax.softmax_cross_entropy_with_integer_labels(logits.astype(float32), targets).mean()``, the same
    values and gradients. The target's logit is picked by a masked sum over the vocabulary rather than a gather:
    a reduction XLA fuses with the log-sum-exp's, reading the bf16 logits, where a gather made it write a
    whole fp32 copy of them (``[batch, seq, vocab]``: 1.6 GB for gpt2-124m at 8 x 1024) to gather one per token."""
    x = logits.astype(jnp.float32)
    is_target = jax.lax.broadcasted_iota(jnp.int32, x.shape, x.ndim - 1) == targets[..., None]
    target_logit = jnp.sum(jnp.where(is_target, x, 0.0), axis=-1)
    return (jax.nn.logsumexp(x, axis=-1) - target_logit).mean()


def decay_mask(params: nnx.State) -> nnx.State:
    """AdamW decays every parameter of rank >= 2 (matrices and embeddings), not biases or LayerNorm."""
    return jax.tree.map(lambda p: p.ndim >= 2, params)


GRAD_CLIP = 1.0


def make_optimizer(lr: float, weight_decay: float, betas: tuple[float, float] = (0.9, 0.95),
                   eps: float = 1e-8, flat: bool = False) -> optax.GradientTransformation:
    """Clip by global norm 1.0, then AdamW: the semantics of ``layers_torch.make_optimizer``.

    ``flat`` (``--optimizer-state flat``): the clipping and Adam's moments run over all parameters raveled into one
    vector (``optax.flatten``), so the state is two vectors, not two arrays a parameter. The decay, whose mask is
    read from the parameters' ranks, and the learning rate stay per parameter, outside the flattened part: AdamW's
    order (moments, then decay, then the rate) and maths are unchanged."""
    if not flat:
        return optax.chain(
            optax.clip_by_global_norm(GRAD_CLIP),
            optax.adamw(lr, b1=betas[0], b2=betas[1], eps=eps, weight_decay=weight_decay, mask=decay_mask),
        )
    return optax.chain(
        optax.flatten(optax.chain(optax.clip_by_global_norm(GRAD_CLIP),
                                  optax.scale_by_adam(b1=betas[0], b2=betas[1], eps=eps))),
        optax.add_decayed_weights(weight_decay, mask=decay_mask),
        optax.scale_by_learning_rate(lr),
    )
