"""The torch twins' AdamW (``layers_torch.make_optimizer``): torch's fused kernel where it has one (a CPU here), the
same update as the per-tensor loop torch picks by default on a CPU, and the decay groups unchanged."""

from __future__ import annotations

import torch

from twinbench.models.layers_torch import fused_adamw, make_optimizer


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))


def _train(opt_of, steps: int = 3) -> list[torch.Tensor]:
    model = _model()
    opt = opt_of(model)
    for i in range(steps):
        torch.manual_seed(i)
        model(torch.randn(5, 8)).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return [p.detach().clone() for p in model.parameters()]


def test_the_twins_adamw_is_fused_on_a_cpu_and_decays_matrices_only() -> None:
    opt = make_optimizer(_model(), lr=1e-2, weight_decay=0.1)
    assert opt.defaults["fused"] is True
    decay, no_decay = opt.param_groups
    assert {p.ndim for p in decay["params"]} == {2} and decay["weight_decay"] == 0.1
    assert {p.ndim for p in no_decay["params"]} == {1} and no_decay["weight_decay"] == 0.0


def test_the_fused_update_is_the_per_tensor_loops() -> None:
    def loop(model: torch.nn.Module) -> torch.optim.Optimizer:
        groups = [{"params": [p for p in model.parameters() if p.ndim >= 2], "weight_decay": 0.1},
                  {"params": [p for p in model.parameters() if p.ndim < 2], "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=1e-2, betas=(0.9, 0.95), eps=1e-8, foreach=False)

    for a, b in zip(_train(lambda m: make_optimizer(m, 1e-2, 0.1)), _train(loop), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_fused_only_where_torch_has_the_kernel() -> None:
    assert fused_adamw([torch.zeros(2)])
    assert not fused_adamw([torch.zeros(2, device="meta")])
    assert not fused_adamw([torch.zeros(2, dtype=torch.int64)])
    assert not fused_adamw([])
