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


def test_draws_are_the_rows_of_one_grid_drawn_up_front():
    """Row i drawn when asked (backwards, repeated, from threads) is row i of the grid one call drew up front
    (the classifier's example indices before they were drawn lazily), for odd widths and any range too."""
    from twinbench.data.text import Draws

    for high, width in ((4096, 32), (3001, 5), (7, 1), (2**40, 3)):
        grid = np.random.default_rng(11).integers(0, high, size=(300, width))
        d = Draws(11, high, width)
        order = [299, 0, 0, 150, *range(300)]
        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(d, order))
        for i, row in zip(order, got, strict=True):
            assert np.array_equal(row, grid[i]), (high, width, i)


def _classify_spec(policy: str, steps: int):
    from twinbench.spec import from_preset, validate

    over = {"layers": 1, "d_model": 32, "heads": 2, "context": 64, "seq": 64, "batch": 5, "steps": steps,
            "warmup": 1, "seed": 3}
    return validate(from_preset("bert-tiny", over, framework="torch", strategy=f"eager+{policy}"))


def test_a_classifiers_batches_and_token_counts_are_the_ones_built_up_front_before():
    """The first steps' batches, and every step's real and padded tokens and length, are the ones the code
    built for every step before the first (the index grid drawn in one call, each batch encoded to count it)."""
    from twinbench.data import classify, tasks

    n = 40
    for policy in ("pad-max", "bucket", "dynamic"):
        spec = _classify_spec(policy, n)
        t = spec.train
        data = classify.load(t.data, t.batch, t.seq, spec.model.num_labels, policy, t.seed)
        order = np.random.default_rng(t.seed).integers(0, len(data.train), size=(n, t.batch))  # the old grid
        real, padded, lengths = [], [], []
        for rows in order:
            n_tokens = [len(classify.encode(data.train[j], t.seq)[0]) for j in rows]
            length = classify.batch_length(max(n_tokens), policy, t.seq)
            real.append(sum(n_tokens))
            padded.append(length * len(rows))
            lengths.append(length)
        got = tasks.run_data(spec)
        for i in (0, 1, 17, 5, n - 1):  # not in order: each step is its own, whenever it is made
            (ids, types, mask), labels = got.batches[i]
            (ids0, types0, mask0), labels0 = classify.collate([data.train[j] for j in order[i]], t.seq, policy)
            for a, b in ((ids, ids0), (types, types0), (mask, mask0), (labels, labels0)):
                assert np.array_equal(a, b), (policy, i)
        # counts kept as batches were made, the rest counted when asked: the same lists as before
        assert list(got.real_tokens) == real and list(got.padded_tokens) == padded, policy
        assert list(got.lengths) == lengths and list(got.lengths[3:9]) == lengths[3:9], policy
        assert got.real_tokens[-1] == real[-1] and float(np.mean(got.padded_tokens[2:])) == np.mean(padded[2:])
        before = tasks.RunData(got.batches, real, padded, lengths)
        assert got.token_stats(2, 1.5) == before.token_stats(2, 1.5), policy


def test_a_long_classifier_run_builds_nothing_per_step_before_its_first():
    """A classifier's run of a billion steps costs the memory of the steps made (its indices were a
    [steps, batch] grid and its token counts three lists, built before the first step)."""
    import tracemalloc

    from twinbench.data import classify, tasks

    spec = _classify_spec("bucket", 10**9)
    t = spec.train
    classify.load(t.data, t.batch, t.seq, spec.model.num_labels, "bucket", t.seed)  # the examples, made once
    tracemalloc.start()
    data = tasks.run_data(spec)
    x = data.batches[2000]
    held = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert held < 16 << 20, held  # 2,001 steps' indices and counts, a batch, the held-out set
    assert len(data.batches) == 10**9 and x[0][0].shape[0] == 5 and len(data.real_tokens[10:]) == 10**9 - 10
