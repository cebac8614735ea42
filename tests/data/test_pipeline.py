"""The input pipeline hands out the same batches with or without prefetching; waits are measured."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from twinbench.data.pipeline import HostBatches, _leaves, feed
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


# ---------------------------------------------------------------------- JAX +prefetch: the Grain pipeline
def _new_threads_left(before: set[threading.Thread], patience_s: float = 10.0) -> list[str]:
    """Names of the threads started since ``before`` still alive after waiting up to ``patience_s`` for them."""
    deadline = time.monotonic() + patience_s
    for t in set(threading.enumerate()) - before:
        t.join(max(0.0, deadline - time.monotonic()))
    return [t.name for t in set(threading.enumerate()) - before if t.is_alive()]


@pytest.fixture
def jax_ready():
    """JAX imported and its default device used once, so that its own start-up is not taken for the pipeline's."""
    jax = pytest.importorskip("jax")
    jax.device_put(np.zeros(1)).block_until_ready()
    return jax


def test_jax_prefetch_runs_on_grain(jax_ready, monkeypatch):
    grain = pytest.importorskip("grain")
    from twinbench.data import pipeline

    seen: dict = {}
    to_iter, device_put = grain.MapDataset.to_iter_dataset, grain.experimental.device_put

    def spy_to_iter(self, read_options=None, **kw):
        seen["read_options"] = read_options
        return to_iter(self, read_options, **kw)

    def spy_device_put(ds, device, **kw):
        seen["device_put"] = kw
        return device_put(ds, device, **kw)

    monkeypatch.setattr(grain.MapDataset, "to_iter_dataset", spy_to_iter)
    monkeypatch.setattr(grain.experimental, "device_put", spy_device_put)
    out = list(feed(HostBatches(make, 5), "jax", prefetch=True))
    assert seen["read_options"].num_threads == pipeline.WORKERS
    assert seen["read_options"].prefetch_buffer_size == pipeline.HOST_DEPTH
    assert seen["device_put"]["device_buffer_size"] == pipeline.DEVICE_DEPTH
    assert [int(y[0]) for _, y in out] == [0, 1, 2, 3, 4]
    assert all(isinstance(leaf, jax_ready.Array) for (x0, x1), y in out for leaf in (x0, x1, y))


def test_jax_prefetch_stacked_and_slow_batches_equal_the_plain_ones(jax_ready):
    batches = HostBatches(make, 4, k=3, slow_input_ms=5)
    plain = [_np(b) for b in feed(batches, "jax", prefetch=False)]
    fetched = [_np(b) for b in feed(batches, "jax", prefetch=True)]
    assert len(fetched) == 4
    for a, b in zip(plain, fetched, strict=True):
        for leaf_a, leaf_b in zip(_leaves(a), _leaves(b), strict=True):
            np.testing.assert_array_equal(leaf_a, leaf_b)


class _Watched(HostBatches):
    """Records on which threads the simulated host work runs, and how many batches are in it at once."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.lock, self.busy, self.most, self.threads = threading.Lock(), 0, 0, set()

    def host_work(self, batch):
        with self.lock:
            self.busy += 1
            self.most = max(self.most, self.busy)
            self.threads.add(threading.current_thread().name)
        try:
            return super().host_work(batch)
        finally:
            with self.lock:
                self.busy -= 1


def test_jax_prefetch_overlaps_slow_input_on_the_workers(jax_ready):
    from twinbench.data.pipeline import WORKERS

    batches = _Watched(make, 6, slow_input_ms=200)
    waits = InputWaits(feed(batches, "jax", prefetch=True))
    for _ in range(6):
        waits.next()
        time.sleep(0.25)  # a step longer than one batch's host work: the workers keep ahead of it
    assert threading.current_thread().name not in batches.threads  # never on the loop's thread
    assert batches.most == WORKERS  # the slow host work of WORKERS batches at the same time
    # counts, not times: without prefetch all 6 steps wait the 200 ms (test above); here only the first should
    assert sum(w > 0.1 for w in waits.waits[1:]) <= 1


def test_jax_prefetch_leaves_no_thread_behind(jax_ready):
    before = set(threading.enumerate())
    batches = HostBatches(make, 6, slow_input_ms=20)
    feed_all = feed(batches, "jax", prefetch=True)
    for _ in range(6):  # exactly the loop's steps, as the worker takes them: the iterator is never exhausted
        next(feed_all)
    assert _new_threads_left(before) == []
    feed_some = feed(batches, "jax", prefetch=True)
    next(feed_some)
    next(feed_some)
    feed_some.close()  # a loop that stops early (an error in a step)
    assert _new_threads_left(before) == []


def test_a_run_on_grain_records_its_version(jax_ready):
    grain = pytest.importorskip("grain")
    from twinbench.measure.device import versions

    list(feed(HostBatches(make, 2), "jax", prefetch=True))
    assert versions("jax")["grain"] == grain.__version__
