"""The input pipeline hands out the same batches with or without prefetching; waits are measured."""

from __future__ import annotations

import numpy as np
import pytest

from twinbench.data.pipeline import HostBatches, feed
from twinbench.measure.inputs import InputWaits


def make(i: int):
    return (np.full((2, 3), i, np.int32), np.arange(3, dtype=np.int32) + i), np.array([i, -i], np.int32)


def _np(tree):
    return tuple(_np(t) for t in tree) if isinstance(tree, (tuple, list)) else np.asarray(tree)


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_prefetch_gives_the_same_batches_in_order(framework):
    batches = HostBatches(make, 7)
    plain = [_np(b) for b in feed(batches, framework, prefetch=False)]
    fetched = [_np(b) for b in feed(batches, framework, prefetch=True)]
    assert len(plain) == len(fetched) == 7
    for a, b in zip(plain, fetched, strict=True):
        np.testing.assert_array_equal(a[0][0], b[0][0])
        np.testing.assert_array_equal(a[0][1], b[0][1])
        np.testing.assert_array_equal(a[1], b[1])


def test_stacked_calls_and_bounds():
    batches = HostBatches(make, 2, k=3)
    (x0, x1), y = batches[1]
    assert x1.shape == (3, 3) and x1[:, 0].tolist() == [3, 4, 5]
    assert x0.shape == (3, 2, 3) and x0[:, 0, 0].tolist() == [3, 4, 5] and y.shape == (3, 2)
    with pytest.raises(IndexError):
        batches[2]


def test_slow_input_is_waited_for_without_prefetch():
    waits = InputWaits(feed(HostBatches(make, 4, slow_input_ms=30), "jax", prefetch=False))
    for _ in range(4):
        waits.next()
    summary = waits.summary(1, [0.05, 0.05, 0.05])
    assert summary["input_wait_ms"] >= 30  # a sleep of 30 ms can only make the wait longer
    assert summary["input_stall_pct"] == pytest.approx(100 * sum(waits.waits[1:]) / 0.15)
