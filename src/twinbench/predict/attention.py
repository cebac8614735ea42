"""A fused attention kernel (cuDNN's, a TPU splash/flash kernel) in place of the einsum attention's ops.

The program is lowered with the einsum attention (any machine can lower it); its ops on the
``[batch, heads, seq, seq]`` scores are then replaced by one kernel per layer, forward and backward:
FLOPs = 3.5 x 4 x batch x heads x seq^2 x head_dim (the forward's two matmuls, the backward's five), halved
when causal (the masked blocks are skipped), at ``ATTENTION_EFFICIENCY`` of the peak (``Efficiency.attention``).
Fused attention at a head size of 64 keeps the matrix units far from full (softmax and masking run on the
vector units). The TPU's fraction is measured inside a training step, from GPT-2 124M's splash attention in
its profile, by the count above (the kernel timed alone per layer, with its layout transposes and a jit call
each, gave less than half of it); Llama-300M's step, predicted with it, is the check (benchmarks/RESULTS.md,
"How far is `twinbench predict` from the chip?"). The GPU's fraction is the usual reach of FlashAttention-class
kernels at this head size, set before a GPU's cuDNN step was predicted.

Memory follows the kernel too: a fused kernel computes the scores block by block in on-chip memory and keeps
only O(seq) per row for the backward pass (the softmax's logsumexp, ``[batch, heads, seq]`` in fp32 per layer),
never the ``[batch, heads, seq, seq]`` scores or probabilities the einsum materializes (:func:`is_score_shape`,
:func:`stats_bytes`).
"""

from __future__ import annotations

from twinbench.predict.roofline import Op
from twinbench.spec import USER, RunSpec

#: fused attention kernels (cuDNN's, the Pallas TPU splash kernel): a CPU cannot lower them as the target
#: runs them (splash would lower Pallas's interpreter), so the einsum attention is lowered and replaced after
FUSED_ATTENTION = ("cudnn", "splash")

#: fraction of the bf16 peak a fused attention kernel (forward + backward) reaches, per platform
ATTENTION_EFFICIENCY = {"tpu": 0.20, "gpu": 0.30, "cpu": 0.5}


def is_score_op(op: Op, seq: int, heads: int, batch: int = 0) -> bool:
    """An op of the einsum attention: it touches the ``[batch, heads, seq, seq]`` scores (or a ``[heads, seq,
    seq]`` slice of them, or ``[batch * heads, seq, seq]`` with the two merged, as torch's batched matmul under
    torchax writes them; a fused kernel is none). A ``[batch, seq, d_model]`` activation whose width equals the
    sequence length (Llama-300M: 1024 and 1024) is not one."""
    merged = f"[{batch * heads},{seq},{seq}]" in op.label if batch else False
    return op.kind != "attention" and (f",{heads},{seq},{seq}]" in op.label or f"[{heads},{seq},{seq}]" in op.label
                                       or merged)


def fused_in(spec: RunSpec) -> bool:
    """Whether ``spec``'s step runs a fused attention kernel: a JAX twin's step with ``--attention-impl`` cudnn or
    splash, or a PyTorch module through torchax with it (torchax lowers its ``F.scaled_dot_product_attention`` to
    that kernel: ``strategies/torchax_step.py``); a user's JAX port keeps its own attention."""
    return (spec.framework == "jax" and spec.attention_impl in FUSED_ATTENTION
            and (spec.model.family != USER or "torchax" in spec.strategy))


def is_score_shape(dims: tuple[int, ...], heads: int, seq: int, batch: int = 0) -> bool:
    """A tensor of the einsum attention's scores: ``[..., heads, seq, seq]``, or ``[batch * heads, seq, seq]``
    (a fused kernel never writes one)."""
    return len(dims) >= 3 and (tuple(dims[-3:]) == (heads, seq, seq)
                               or (bool(batch) and tuple(dims) == (batch * heads, seq, seq)))


def stats_bytes(*, layers: int, batch: int, heads: int, seq: int) -> float:
    """What a fused kernel keeps for its backward pass beyond q, k, v and its output: the fp32 logsumexp of
    every row, ``[batch, heads, seq]`` per layer."""
    return 4.0 * layers * batch * heads * seq


def attention_op(*, layers: int, batch: int, heads: int, seq: int, head_dim: int, causal: bool,
                 backward: bool = True) -> Op:
    """One fused attention kernel per layer (forward, and backward when ``backward``)."""
    flops = 4.0 * batch * heads * seq * seq * head_dim * (0.5 if causal else 1.0) * (3.5 if backward else 1.0)
    io = 2.0 * batch * seq * heads * head_dim * (10 if backward else 4)  # q, k, v, o (do, dq, dk, dv, stats)
    return Op("fused_attention", "attention", flops, io, "bf16", 2 if backward else 1, layers,
              f"fused attention kernel [{batch},{heads},{seq},{seq}] {'fwd+bwd' if backward else 'fwd'}")


def fused_attention(ops: list[Op], *, layers: int, batch: int, heads: int, seq: int, head_dim: int,
                    causal: bool) -> list[Op]:
    """``ops`` with the einsum attention's ops replaced by one fused kernel per layer (forward + backward)."""
    kept = [op for op in ops if not is_score_op(op, seq, heads, batch)]
    return [*kept, attention_op(layers=layers, batch=batch, heads=heads, seq=seq, head_dim=head_dim,
                                causal=causal)]
