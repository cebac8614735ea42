"""``+fused-loss``'s JAX cross-entropy (strategies/torchax_loss.py) computes torch's ``F.cross_entropy``: values and
the gradient of the logits, for the arguments it covers (integer targets, ignore_index, every reduction, the class
axis 1). In-process: the JAX function alone, no torchax (the whole lowering is tested in torchax_child.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from twinbench.strategies.torchax_loss import cross_entropy_jax

CASES = {  # name: (logits shape, target shape)
    "rows": ((12, 37), (12,)),
    "class-axis-1": ((3, 37, 5), (3, 5)),
    "one": ((37,), ()),
}


def inputs(shape: tuple, target_shape: tuple) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    logits = (4 * rng.standard_normal(shape)).astype(np.float32)
    classes = shape[1] if len(shape) > 1 else shape[0]
    target = rng.integers(0, classes, target_shape).astype(np.int64)
    if target.ndim:
        target.reshape(-1)[::4] = -100  # every fourth target ignored
    return logits, target


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("case", list(CASES))
def test_values_and_gradient_are_torchs(case: str, reduction: str) -> None:
    logits, target = inputs(*CASES[case])
    x = torch.tensor(logits, requires_grad=True)
    want = F.cross_entropy(x, torch.tensor(target), reduction=reduction)
    (want * torch.linspace(0.5, 1.5, want.numel()).reshape(want.shape)).sum().backward()

    def loss(xj: jax.Array) -> jax.Array:
        out = cross_entropy_jax(xj, jnp.asarray(target, jnp.int32), -100, reduction)
        return out, (out * jnp.linspace(0.5, 1.5, out.size).reshape(out.shape)).sum()

    got, grad = loss(jnp.asarray(logits))[0], jax.grad(lambda xj: loss(xj)[1])(jnp.asarray(logits))
    assert got.shape == tuple(want.shape)
    np.testing.assert_allclose(np.asarray(got), want.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(grad), x.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_bf16_logits_give_a_bf16_loss_accumulated_in_fp32() -> None:
    """bf16 logits in, bf16 loss out (torch's dtype rule), computed from the bf16 values in fp32: the fp32 loss of
    the same bf16 values, rounded once."""
    logits, target = inputs((64, 1000), (64,))
    low = jnp.asarray(logits, jnp.bfloat16)
    got = cross_entropy_jax(low, jnp.asarray(target, jnp.int32))
    exact = F.cross_entropy(torch.tensor(np.asarray(low.astype(jnp.float32))), torch.tensor(target))
    assert got.dtype == jnp.bfloat16
    assert float(got) == pytest.approx(float(exact), rel=2 ** -8)


def test_a_bad_reduction_is_refused() -> None:
    with pytest.raises(ValueError, match="reduction"):
        cross_entropy_jax(jnp.zeros((2, 3)), jnp.zeros((2,), jnp.int32), reduction="avg")
