"""Compile time as the frameworks report it: torch's figure includes the backward AOTAutograd compiles lazily."""

from __future__ import annotations

import pytest

from twinbench.measure.compiles import TORCH_BACKWARD, TORCH_FRAME, TorchCompiles


def test_torch_compile_seconds_include_the_lazily_compiled_backward() -> None:
    torch = pytest.importorskip("torch")
    import torch._dynamo.utils as dynamo_utils

    metrics = dynamo_utils.compilation_time_metrics
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))

    def loss_of(x: torch.Tensor) -> torch.Tensor:
        return model(x).pow(2).mean()

    # aot_eager: AOTAutograd splits forward and backward exactly as for Inductor, without generating kernels
    compiled = torch.compile(loss_of, backend="aot_eager")
    monitor = TorchCompiles()
    start = {k: sum(metrics.get(k, ())) for k in (TORCH_FRAME, TORCH_BACKWARD)}
    start_s = monitor.seconds()
    loss = compiled(torch.randn(4, 8))
    forward_s = sum(metrics[TORCH_FRAME]) - start[TORCH_FRAME]
    assert sum(metrics.get(TORCH_BACKWARD, ())) == start[TORCH_BACKWARD]  # nothing compiled for backward yet
    loss.backward()  # the backward graph is compiled now, outside any dynamo frame compile
    backward_s = sum(metrics[TORCH_BACKWARD]) - start[TORCH_BACKWARD]
    assert forward_s > 0 and backward_s > 0
    total = monitor.seconds() - start_s
    assert total == pytest.approx(forward_s + backward_s)  # both, and no nested sub-timer counted again
    assert total > forward_s  # the figure before this fix counted the frame compile only
    assert monitor.backward_seconds() >= backward_s
    assert model[0].weight.grad is not None and monitor.count() >= 1


def test_torch_cache_hits_are_graphs_as_the_compile_count_is(monkeypatch) -> None:
    """A warm process that loaded a training graph (forward and backward) and an inference graph: torch's own
    counters then read 2 graphs, 2 AOTAutograd cache hits and 3 FX graph cache hits (seen in such a process)."""
    pytest.importorskip("torch")
    from collections import Counter

    import torch._dynamo.utils as dynamo_utils

    for group, values in {"stats": {"unique_graphs": 2}, "aot_autograd": {"autograd_cache_hit": 2},
                          "inductor": {"fxgraph_cache_hit": 3}}.items():
        monkeypatch.setitem(dynamo_utils.counters, group, Counter(values))
    monitor = TorchCompiles()
    assert monitor.count() == 2
    assert monitor.cache_hits() == 2  # two graphs loaded whole, not five hits of two caches
