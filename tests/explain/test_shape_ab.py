"""explain's per-shape A/B (issue 73): the product of a traced shape, run in each framework on this machine, each
in its own process, one thread on one core; and each backend's product of a shape in each operand layout."""

from __future__ import annotations

import pytest

from twinbench import backends
from twinbench.explain import shape_ab


@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_each_backend_multiplies_the_shape_in_each_layout(framework: str, layout: str) -> None:
    run, sync = backends.get(framework).matmul("cpu", "fp32", 3, 5, 4, 6, layout)
    out = run()
    waited = sync()
    result = out if out is not None else waited
    assert tuple(result.shape) == (3, 5, 6)
    run, sync = backends.get(framework).matmul("cpu", "fp32", 1, 5, 4, 6, layout)  # no batch: a plain [m,k] x [k,n]
    result = run() if framework == "torch" else (run(), sync())[1]
    assert tuple(result.shape) == (5, 6)


def test_the_shape_is_timed_in_a_process_of_its_own(monkeypatch) -> None:
    # JAX's child (torch's product of a shape is checked in process above: the child is the same code)
    monkeypatch.setenv(shape_ab.SWITCH, "1")
    timed = shape_ab.measure("jax", [2, 32, 16, 48], "NT")
    assert len(timed.ms) == shape_ab.SAMPLES and all(ms > 0 for ms in timed.ms)
    assert timed.threads == 1 and timed.spread >= 0


def test_the_suite_starts_no_timing_process() -> None:
    with pytest.raises(RuntimeError, match="not timed"):
        shape_ab.measure("jax", [1, 4, 4, 4], "NN")


def test_a_framework_the_machine_cannot_run_fails_in_one_line(monkeypatch) -> None:
    monkeypatch.setenv(shape_ab.SWITCH, "1")
    with pytest.raises(RuntimeError) as e:
        shape_ab.measure("mxnet", [1, 4, 4, 4], "NN")
    assert "mxnet" in str(e.value) and "\n" not in str(e.value)
