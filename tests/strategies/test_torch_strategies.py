"""PyTorch strategies against the ``eager`` baseline (tiny shapes, fp32 on CPU).

Tolerances: compiled strategies match eager's loss trajectory within 1e-4 relative per step and the final
weights within 1e-4 absolute, a few % of one AdamW step of lr 3e-3 (Inductor fuses and reorders float32
arithmetic, and AdamW divides by sqrt(v), which magnifies tiny gradient differences); +remat recomputes the same
ops, so its gradients equal eager's within 1e-6 + 1e-5 * max|grad|. bf16 stays within 2e-2 relative of
fp32 over 4 steps, yet differs from it, with fp32 parameters and optimizer state.

No torch.compile here: the compiled strategies are cells of tests/strategies/test_cells_compiled.py (the
regional one also counts its graphs there: one block's, reused for every layer).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from strategy_helpers import make_spec, train

from twinbench.models.gpt import model_torch as gpt_torch
from twinbench.models.options import ModelOptions
from twinbench.models.weights import canonical_to_torch


@pytest.fixture(scope="module")
def eager_run(weights, host_batches):
    return train("torch", "eager", weights, host_batches)


def test_bf16_close_to_fp32_but_not_equal(weights, host_batches, eager_run):
    losses, trainer = train("torch", "eager+bf16", weights, host_batches)
    np.testing.assert_allclose(losses, eager_run[0], rtol=2e-2)
    assert max(abs(a - b) for a, b in zip(losses, eager_run[0], strict=True)) > 1e-7, "bf16 had no effect"
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}
    states = [t for s in trainer.optimizer.state.values() for t in s.values() if t.ndim]
    assert states and {t.dtype for t in states} == {torch.float32}
    assert make_spec("torch", "eager+bf16").train.precision == "bf16"


def test_remat_gradients_equal_eager(weights, host_batches):
    x, y = (torch.from_numpy(a) for a in host_batches[0])
    cfg = make_spec("torch", "eager").model
    grads = []
    for opts in (ModelOptions(), ModelOptions(remat="full")):
        model = gpt_torch.GPT(cfg, opts)
        canonical_to_torch(model, weights)
        gpt_torch.loss_fn(model, x, y).backward()
        grads.append({n: p.grad.numpy() for n, p in model.named_parameters()})
    for name, g0 in grads[0].items():
        np.testing.assert_allclose(grads[1][name], g0, atol=1e-6 + 1e-5 * float(np.abs(g0).max()), err_msg=name)


def test_remat_loss_trajectory_matches_eager(weights, host_batches, eager_run):
    losses, _ = train("torch", "eager+remat", weights, host_batches)
    np.testing.assert_allclose(losses, eager_run[0], rtol=1e-6)


def test_torch_model_refuses_jax_only_options():
    cfg = make_spec("torch", "eager").model
    for opts in (ModelOptions(scan_layers=True), ModelOptions(remat="dots-saveable")):
        with pytest.raises(ValueError, match="unsupported options"):
            gpt_torch.GPT(cfg, opts)


def test_apply_remat_wraps_the_blocks_of_a_module_that_does_not_remat_itself(monkeypatch):
    """A family whose model does not read ModelOptions (a user's module) gets +remat from outside: every block
    its family names runs under torch.utils.checkpoint, with the same gradients."""
    from dataclasses import replace

    from twinbench.models.gpt import FAMILY as GPT
    from twinbench.strategies import torch_eager

    plain = replace(GPT, name="user", native_options=frozenset(), torch_blocks=lambda m: list(m))
    calls = []
    real = torch_eager.checkpoint
    monkeypatch.setattr(torch_eager, "checkpoint", lambda *a, **k: calls.append(1) or real(*a, **k))
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    x = torch.randn(4, 8)
    net(x).sum().backward()
    g0 = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    torch_eager.apply_remat(net, plain, make_spec("torch", "eager+remat"))
    net(x).sum().backward()
    assert len(calls) == 3  # one checkpoint per block
    for a, b in zip(g0, (p.grad for p in net.parameters()), strict=True):
        torch.testing.assert_close(a, b)
    assert torch_eager.apply_remat(net, GPT, make_spec("torch", "eager+remat")) is net  # the twins remat themselves
