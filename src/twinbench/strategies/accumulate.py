"""``+accum``: gradient accumulation, the step's batch as ``--accum-steps`` microbatches whose gradients are
averaged before the one clip and optimizer update. The same maths as the whole batch (the losses are means over
equal microbatches), with one microbatch's activations alive at a time. Declared in ``strategies/modifiers.py``;
these are its two hooks on the shared steps (the torch trainer's forward-and-backward, the JAX step's gradient).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def torch_step(trainer: Any, forward_backward: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """The trainer's forward-and-backward over the microbatches: gradients summed by backward, then divided by
    their count; the loss is the microbatches' mean."""
    import torch

    k = trainer.spec.strategy.accum_steps

    def parts(a: Any) -> list[Any]:
        if isinstance(a, (tuple, list)):  # a family whose input is several arrays (BERT: ids, segments, mask)
            return [tuple(p) for p in zip(*(parts(t) for t in a), strict=True)]
        return list(a.chunk(k))

    def accumulated(x: Any, y: Any) -> Any:
        losses = [forward_backward(xi, yi).detach() for xi, yi in zip(parts(x), parts(y), strict=True)]
        grads = [p.grad for p in trainer.model.parameters() if p.grad is not None]
        torch._foreach_div_(grads, float(k))
        return torch.stack(losses).mean()

    return accumulated


def jax_step(spec: Any, value_and_grad: Callable[..., Any]) -> Callable[..., Any]:
    """The step's ``value_and_grad`` over the microbatches, in a ``lax.scan``: the sums of their losses and
    gradients, divided by their count."""
    import jax
    import jax.numpy as jnp

    k = spec.strategy.accum_steps

    def accumulated(params: Any, x: Any, y: Any) -> Any:
        xs, ys = jax.tree.map(lambda a: a.reshape(k, a.shape[0] // k, *a.shape[1:]), (x, y))
        first = jax.tree.map(lambda a: a[0], (xs, ys))
        zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(value_and_grad, params, *first))

        def body(total: Any, batch: Any) -> tuple[Any, None]:
            return jax.tree.map(jnp.add, total, value_and_grad(params, *batch)), None

        total, _ = jax.lax.scan(body, zeros, (xs, ys))
        return jax.tree.map(lambda a: a / k, total)

    return accumulated
