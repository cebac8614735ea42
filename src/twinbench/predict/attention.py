"""A fused attention kernel (cuDNN's, a TPU splash/flash kernel) in place of the einsum attention's ops.

The program is lowered with the einsum attention (any machine can lower it); its ops on the
``[batch, heads, seq, seq]`` scores are then replaced by one kernel per layer, forward and backward:
FLOPs = 3.5 x 4 x batch x heads x seq^2 x head_dim (the forward's two matmuls, the backward's five), at
``ATTENTION_EFFICIENCY`` of the peak (``Efficiency.attention``). Causal: a GPU kernel is counted at half
(its tiles are small against the sequence).

The TPU's splash kernel (``models/layers_jax.splash_attention``) is costed by its grid: it runs one grid step
per block of queries against a block of keys (its block sizes are ``layers_jax.splash_block(seq)``), twice per
layer (the forward kernel and the fused backward one), and every step it runs computes the whole block. So a
causal kernel computes ``n (n + 1) / 2`` of its ``n^2`` blocks (the diagonal's in full, masked), not half of
the square: three quarters at two blocks. Each computed step also costs a fixed time (``SPLASH_STEP_US``: its
DMAs and pipeline around a block's matmuls), which dominates at short sequences (BERT at 128 tokens: one block
per head, 768 steps per kernel at batch 64, each a 128 x 64 x 128 product). The step's cost is measured from
the block sizes' A/B of BERT-base's attention on the chip (``SPLASH_BLOCKS_AB``); the kernel's fraction of the
peak is then what GPT-2's splash attention took inside its measured step once its grid steps are taken out
(``SPLASH_IN_STEP``, :func:`splash_efficiency`). Both figures are in benchmarks/RESULTS.md.

Memory follows the kernel too: a fused kernel computes the scores block by block in on-chip memory and keeps
only O(seq) per row for the backward pass (the softmax's logsumexp, ``[batch, heads, seq]`` in fp32 per layer),
never the ``[batch, heads, seq, seq]`` scores or probabilities the einsum materializes (:func:`is_score_shape`,
:func:`stats_bytes`).
"""

from __future__ import annotations

import functools

from twinbench import backends
from twinbench.predict.datasheets import lookup
from twinbench.predict.roofline import Op
from twinbench.spec import USER, RunSpec

#: fused attention kernels (cuDNN's, the Pallas TPU splash kernel): a CPU cannot lower them as the target
#: runs them (splash would lower Pallas's interpreter), so the einsum attention is lowered and replaced after
FUSED_ATTENTION = ("cudnn", "splash")

#: the splash kernel's fixed cost of one computed grid step, µs: BERT-base's attention block (32 x 12 heads x 512
#: x 64, fused backward) on a TPU v5e with every block 256 against every block 512 (benchmarks/RESULTS.md, "Where
#: BERT-base's attention goes"): the same FLOPs in more steps, (ms with 256, ms with 512, steps added)
SPLASH_BLOCKS_AB = (6.23, 4.39, 2 * 32 * 12 * (2 * 2 - 1))
SPLASH_STEP_US = (SPLASH_BLOCKS_AB[0] - SPLASH_BLOCKS_AB[1]) * 1e3 / SPLASH_BLOCKS_AB[2]

#: GPT-2 124M's splash attention inside its measured TPU v5e step (benchmarks/RESULTS.md, the kernel's rows of
#: the step's profile): ms for every layer, forward and backward, and the shape
SPLASH_IN_STEP = {"ms": 13.75, "layers": 12, "batch": 8, "heads": 12, "seq": 1024, "head_dim": 64, "causal": True}


def splash_blocks(seq: int, causal: bool) -> tuple[int, int]:
    """(blocks per head the splash kernel computes, blocks in the square): ``n (n + 1) / 2`` of ``n^2`` when
    causal, every one otherwise, with ``n = seq / block``."""
    from twinbench.models.layers_jax import splash_block

    n = max(1, seq // splash_block(seq))
    return (n * (n + 1) // 2 if causal else n * n), n * n


def attention_flops(*, batch: int, heads: int, seq: int, head_dim: int, causal: bool, backward: bool = True,
                    computed: float | None = None) -> float:
    """The kernel's FLOPs: the share ``computed`` of the full square (a GPU's causal kernel: half)."""
    share = computed if computed is not None else (0.5 if causal else 1.0)
    return 4.0 * batch * heads * seq * seq * head_dim * share * (3.5 if backward else 1.0)


def splash_efficiency() -> float:
    """The splash kernel's fraction of the bf16 peak: GPT-2's in-step attention (:data:`SPLASH_IN_STEP`) less its
    computed grid steps at :data:`SPLASH_STEP_US`, over the FLOPs of the blocks it computes."""
    g = SPLASH_IN_STEP
    done, square = splash_blocks(g["seq"], g["causal"])
    flops = g["layers"] * attention_flops(batch=g["batch"], heads=g["heads"], seq=g["seq"], head_dim=g["head_dim"],
                                          causal=True, computed=done / square)
    steps = g["layers"] * 2 * g["batch"] * g["heads"] * done
    peak = lookup("tpu-v5e").peak("bf16")  # the chip it was measured on, by its datasheet
    return flops / (peak * (g["ms"] * 1e-3 - steps * SPLASH_STEP_US * 1e-6))


#: fraction of the bf16 peak a fused attention kernel (forward + backward) reaches, per platform (the TPU's:
#: :func:`attention_efficiency`, read from its splash kernel's measurements when first asked for)
ATTENTION_EFFICIENCY = {"gpu": 0.30, "cpu": 0.5}


@functools.cache
def attention_efficiency(platform: str) -> float:
    """:data:`ATTENTION_EFFICIENCY` of ``platform``; a TPU's is :func:`splash_efficiency` (computed on first use:
    the splash block sizes live with the JAX layers, which a torch-only prediction never imports)."""
    return splash_efficiency() if platform == "tpu" else ATTENTION_EFFICIENCY[platform]


def is_score_op(op: Op, seq: int, heads: int, batch: int = 0) -> bool:
    """An op of the einsum attention: it touches the ``[batch, heads, seq, seq]`` scores (or a ``[heads, seq,
    seq]`` slice of them, or ``[batch * heads, seq, seq]`` with the two merged, as torch's batched matmul under
    torchax writes them; a fused kernel is none). A ``[batch, seq, d_model]`` activation whose width equals the
    sequence length (Llama-300M: 1024 and 1024) is not one. An op that reads the scores to write a smaller
    tensor (a softmax's row sums, ``[batch, heads, seq]``) is one by ``op.scores`` (``hlo.fused_ops`` sets it)."""
    if op.scores and op.kind != "attention":
        return True
    merged = f"[{batch * heads},{seq},{seq}]" in op.label if batch else False
    return op.kind != "attention" and (f",{heads},{seq},{seq}]" in op.label or f"[{heads},{seq},{seq}]" in op.label
                                       or merged)


def fused_in(spec: RunSpec) -> bool:
    """Whether ``spec``'s step runs a fused attention kernel: a JAX twin's step with ``--attention-impl`` cudnn or
    splash, or a PyTorch module through torchax with it (torchax lowers its ``F.scaled_dot_product_attention`` to
    that kernel: ``strategies/torchax_step.py``); a user's JAX port keeps its own attention."""
    runs = backends.get(spec.framework).attention_impl(spec.strategy.attention_impl)  # torch's SDPA: "default"
    return runs in FUSED_ATTENTION and (spec.model.family != USER or "torchax" in spec.strategy.name)


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
                 backward: bool = True, splash: bool = False) -> Op:
    """One fused attention kernel per layer (forward, and backward when ``backward``); ``splash``: the TPU's
    splash kernel, costed by the blocks it computes and its grid steps (the module's docstring)."""
    computed, steps = None, 0
    if splash:
        done, square = splash_blocks(seq, causal)
        computed, steps = done / square, (2 if backward else 1) * batch * heads * done
    flops = attention_flops(batch=batch, heads=heads, seq=seq, head_dim=head_dim, causal=causal, backward=backward,
                            computed=computed)
    io = 2.0 * batch * seq * heads * head_dim * (10 if backward else 4)  # q, k, v, o (do, dq, dk, dv, stats)
    return Op("fused_attention", "attention", flops, io, "bf16", 2 if backward else 1, layers,
              f"fused attention kernel [{batch},{heads},{seq},{seq}] {'fwd+bwd' if backward else 'fwd'}"
              + (f", {steps} grid steps" if splash else ""), fixed_us=steps * SPLASH_STEP_US)


def fused_attention(ops: list[Op], *, layers: int, batch: int, heads: int, seq: int, head_dim: int,
                    causal: bool, splash: bool = False) -> list[Op]:
    """``ops`` with the einsum attention's ops replaced by one fused kernel per layer (forward + backward);
    ``splash``: the TPU's splash kernel (:func:`attention_op`)."""
    kept = [op for op in ops if not is_score_op(op, seq, heads, batch)]
    return [*kept, attention_op(layers=layers, batch=batch, heads=heads, seq=seq, head_dim=head_dim,
                                causal=causal, splash=splash)]
