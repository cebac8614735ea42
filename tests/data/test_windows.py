"""A language model's batches are cut when a step asks for them, and are the stream twinbench always trained on."""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from twinbench.data.text import Windows, batches, synthetic_corpus


def test_any_step_asked_in_any_order_from_threads_is_the_streams_step():
    """Step i's windows are the i-th of :func:`batches` (records' losses stay comparable across versions),
    asked backwards, repeated and from several threads (the input pipeline's workers)."""
    tokens = synthetic_corpus(seed=1234)
    stream = list(itertools.islice(batches(tokens, 4, 16, 7), 150))
    w = Windows(tokens, 4, 16, 7)
    order = [149, 3, 3, 0, 77, *range(150)]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(w, order))
    for i, (x, y) in zip(order, got, strict=True):
        assert np.array_equal(x, stream[i][0]) and np.array_equal(y, stream[i][1]), i
    assert w.starts(0).shape == (4,) and not np.array_equal(w(0)[0], w(1)[0])
