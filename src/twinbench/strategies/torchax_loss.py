"""``+fused-loss``: torch's ``F.cross_entropy`` under torchax as one fused JAX lowering.

What a plain torchax user gets (the default): ``F.cross_entropy`` decomposes into ATen's ``_log_softmax`` and
``nll_loss``, which torchax lowers one by one. The log-probabilities are a materialised fp32 array the size of
the logits, kept for the backward pass, with copies and conversions around it: with a large vocabulary (GPT-2's
``[8192, 50257]`` logits at 8 x 1024) a large share of the step's time and memory (benchmarks/RESULTS.md,
"On a TPU").

With ``+fused-loss`` the same call is lowered to :func:`cross_entropy_jax`, the JAX twins' loss
(``layers_jax.cross_entropy``): the log-sum-exp over the classes and the target's logit picked by a masked sum,
each a reduction that reads the logits in their own dtype and accumulates in fp32, so XLA fuses the conversion
into the reductions and writes nothing the size of the logits. Its gradient is JAX's (softmax minus the one-hot
target), which XLA fuses likewise. The same values as ATen's, within float rounding.

Covered: integer class targets, ``ignore_index``, ``reduction`` ``mean``/``sum``/``none``, the class axis 1 of an
``[N, C, d1, ...]`` input. Anything else (class ``weight``, ``label_smoothing``, probability targets, the legacy
``size_average``/``reduce`` arguments) runs torchax's own lowering, unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp

from twinbench.strategies.torchax_compat import lowered


def cross_entropy_jax(logits: jax.Array, target: jax.Array, ignore_index: int = -100,
                      reduction: str = "mean") -> jax.Array:
    """``F.cross_entropy(logits, target, ignore_index=..., reduction=...)`` for integer targets, in JAX: the
    log-sum-exp and the target's logit read ``logits`` in its dtype and accumulate in fp32 (at least); the
    result has ``logits``' dtype, as torch's. ``mean`` divides by the number of targets not ignored."""
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    x = logits
    if x.ndim == 1:  # one example: [C] and a 0-d target
        x, target = x[None], target[None]
    elif x.ndim > 2:  # [N, C, d1, ...]: the class axis last
        x = jnp.moveaxis(x, 1, -1)
    acc = jnp.promote_types(x.dtype, jnp.float32)
    xf = x.astype(acc)  # fused into the two reductions below: no fp32 copy of the logits is written
    is_target = jax.lax.broadcasted_iota(jnp.int32, xf.shape, xf.ndim - 1) == target[..., None].astype(jnp.int32)
    target_logit = jnp.sum(jnp.where(is_target, xf, 0.0), axis=-1)
    keep = target != ignore_index
    loss = jnp.where(keep, jax.nn.logsumexp(xf, axis=-1) - target_logit, 0.0)
    if reduction == "none":
        out = loss if logits.ndim > 1 else loss[0]
    elif reduction == "sum":
        out = loss.sum()
    else:
        out = loss.sum() / keep.sum().astype(acc)
    return out.astype(logits.dtype)


def fused_cross_entropy(input: Any, target: Any, weight: Any = None, size_average: Any = None,
                        ignore_index: int = -100, reduce: Any = None, reduction: str = "mean",
                        label_smoothing: float = 0.0) -> Any:
    """``F.cross_entropy`` with torch's signature, on torchax tensors: :func:`cross_entropy_jax` where it covers the
    call, else ATen's ``cross_entropy_loss`` (torchax's own lowering, what the default runs)."""
    import torch
    from torch.nn import _reduction
    from torchax import interop

    if (weight is None and not label_smoothing and size_average is None and reduce is None
            and not target.is_floating_point()):
        return interop.call_jax(lambda x, t: cross_entropy_jax(x, t, ignore_index, reduction), input, target)
    if size_average is not None or reduce is not None:
        reduction = _reduction.legacy_get_string(size_average, reduce)
    return torch._C._nn.cross_entropy_loss(input, target, weight, _reduction.get_enum(reduction), ignore_index,
                                           label_smoothing)


@contextlib.contextmanager
def cross_entropy_lowered(env: Any, fused: bool) -> Iterator[None]:
    """While active (``fused``), torchax lowers ``F.cross_entropy`` to :func:`fused_cross_entropy`; under
    torchax's autocast it runs in fp32 as ``torch.autocast`` runs ``cross_entropy``. Nothing changes when not
    ``fused``; torchax's own lowering is put back on exit."""
    if not fused:
        yield
        return
    import torch.nn.functional as F

    with lowered(env, F.cross_entropy, fused_cross_entropy, is_jax_function=False, fp32_under_autocast=True):
        yield
