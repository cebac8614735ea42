"""The data of one run, by task (each :class:`~twinbench.tasks.task.Task` names its function here): what each
step call consumes, and the token counts the record reports.

- ``lm`` (and ``custom``, the user's model): random windows of the byte corpus (``data/text.py``), cut before the timed loop; every token is
  real (no padding).
- ``classify``: batches of the classification task (``data/classify.py``), tokenised and padded when the
  pipeline asks for them, to the length the strategy's policy (``+pad-max``, ``+bucket``, ``+dynamic``)
  chooses; the real tokens are the unpadded ones.
Batches are handed out by :class:`~twinbench.data.pipeline.HostBatches` (K stacked per call for scan-steps).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from twinbench.data.pipeline import HostBatches
from twinbench.spec import RunSpec, SpecError
from twinbench.tasks import TASKS


class Same(Sequence[int]):
    """``n`` steps of one value (an LM step's token counts): a list of any length in the memory of one int."""

    def __init__(self, value: int, n: int) -> None:
        self.value, self.n = value, n

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        return itertools.repeat(self.value, self.n)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return Same(self.value, len(range(*i.indices(self.n))))
        if not -self.n <= i < self.n:
            raise IndexError(i)
        return self.value


@dataclass
class RunData:
    batches: HostBatches
    real_tokens: Sequence[int]  # per training step: tokens that are not padding
    padded_tokens: Sequence[int]  # per training step: tokens the model processes (batch x padded length)
    lengths: Sequence[int] = field(default_factory=list)  # per step: the padded batch length
    eval_batches: list[Any] = field(default_factory=list)  # classify: held-out batches for accuracy

    def token_stats(self, steady_from: int, steady_s: float) -> dict[str, float]:
        """``pad_pct`` over the whole run; ``real_tokens_per_s`` over the steady steps (from ``steady_from``)."""
        real, padded = sum(self.real_tokens), sum(self.padded_tokens)
        steady_real = sum(self.real_tokens[steady_from:])
        return {"pad_pct": 100.0 * (1 - real / padded) if padded else 0.0,
                "real_tokens_per_s": steady_real / steady_s if steady_s > 0 else 0.0,
                "padded_tokens_per_step": float(np.mean(self.padded_tokens[steady_from:] or self.padded_tokens)),
                "distinct_lengths": len(set(self.lengths))}


def run_data(spec: RunSpec, k: int = 1) -> RunData:
    """The batches of ``spec``'s run, ``k`` steps per call (``spec.train.steps // k`` calls)."""
    return TASKS[spec.train.task].run_data(spec, k, spec.train.steps // k)


def windows(spec: RunSpec, k: int, n_calls: int) -> RunData:
    """A language model's batches: random windows of the corpus, cut when the pipeline asks for them."""
    from twinbench.data.text import Windows, load_tokens

    t = spec.train
    n, steps = t.batch * t.seq, n_calls * k
    make = Windows(load_tokens(t.data, t.seq, t.seed), t.batch, t.seq, t.seed)  # step i's windows, cut when asked
    return RunData(HostBatches(make, n_calls, k, t.slow_input), Same(n, steps), Same(n, steps), Same(t.seq, steps))


def labelled(spec: RunSpec, k: int, n_calls: int) -> RunData:
    """A classifier's batches: labelled texts, drawn, tokenised and padded by the length policy when asked for;
    each step's token counts are kept as its batch is made (:class:`Counts`), none before the first step."""
    from twinbench.data import classify

    t = spec.train
    policy = classify.length_policy(spec)
    if k > 1 and policy != "pad-max":
        raise SpecError(f"--strategies: {spec.strategy.name!r} stacks {k} batches per call, which needs one shape: "
                        "use +pad-max")
    data = classify.load(t.data, t.batch, t.seq, spec.model.num_labels, policy, t.seed)
    order = data.batch_indices()

    def batch(i: int) -> Any:  # step i's examples, tokenised and padded
        return classify.collate([data.train[j] for j in order(i)], t.seq, policy)

    def count(i: int) -> tuple[int, int, int]:  # real tokens, padded tokens, padded length of a batch
        (ids, _, mask), _ = batch(i)
        return int(mask.sum()), int(ids.size), int(ids.shape[1])

    counts = Counts(n_calls * k, count)

    def make(i: int) -> Any:
        b = batch(i)
        (ids, _, mask), _ = b
        counts.put(i, (int(mask.sum()), int(ids.size), int(ids.shape[1])))
        return b

    return RunData(HostBatches(make, n_calls, k, t.slow_input), counts.column(0), counts.column(1),
                   counts.column(2), data.eval_batches())


class Counts:
    """Per step, a few integers (a classifier's real tokens, padded tokens, padded length), each kept when its
    step's batch is made (``put``) or found by ``count(i)`` when asked for first: three int64 a step in a grid
    grown by doubling, never a list of Python ints for every step built before the first."""

    def __init__(self, n: int, count: Callable[[int], tuple[int, ...]], width: int = 3) -> None:
        self.n, self._count = n, count
        self._rows = np.zeros((0, width), np.int64)
        self._known = np.zeros(0, bool)
        self._lock = threading.Lock()  # batches are made by the input pipeline's threads

    def put(self, i: int, values: tuple[int, ...]) -> None:
        with self._lock:
            if i >= len(self._rows):
                size = max(64, 2 * len(self._rows), i + 1)
                rows, known = np.zeros((size, self._rows.shape[1]), np.int64), np.zeros(size, bool)
                rows[: len(self._rows)], known[: len(self._known)] = self._rows, self._known
                self._rows, self._known = rows, known
            self._rows[i], self._known[i] = values, True

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Steps ``start`` .. ``stop - 1``'s integers, those not made yet counted now."""
        known = self._known[start:stop]
        for i in [*(start + np.flatnonzero(~known)).tolist(), *range(start + len(known), stop)]:
            self.put(i, self._count(i))
        return self._rows[start:stop]

    def column(self, j: int) -> Column:
        return Column(self, j, 0, self.n)


class Column(Sequence[int]):
    """One of :class:`Counts`'s integers for steps ``start`` .. ``stop - 1``: a sequence (sliced, summed, iterated,
    ``np.asarray``'d) read from the grid, not copied out as Python ints."""

    def __init__(self, counts: Counts, j: int, start: int, stop: int) -> None:
        self.counts, self.j, self.start, self.stop = counts, j, start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        col = self.counts.rows(self.start, self.stop)[:, self.j]
        return col.astype(dtype) if dtype is not None else col.copy()

    def __iter__(self) -> Iterator[int]:
        return iter(np.asarray(self).tolist())

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            r = range(self.start, self.stop)[i]
            if r.step != 1:
                return np.asarray(self)[i].tolist()
            return Column(self.counts, self.j, r.start, max(r.start, r.stop))
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        k = self.start + (i % len(self))
        return int(self.counts.rows(k, k + 1)[0, self.j])


def check_text(spec: RunSpec) -> None:
    """A --data text file, read as the windows will read it (SpecError, one line)."""
    from twinbench.data.text import read_text_file

    read_text_file(spec.train.data, spec.train.seq + 2)


def check_jsonl(spec: RunSpec) -> None:
    """A --data JSON-lines file of labelled texts, read as the classifier's batches will read it."""
    from twinbench.data.classify import read_jsonl

    read_jsonl(spec.train.data, spec.model.num_labels)


def accuracy(predict: Any, eval_batches: list[Any]) -> float | None:
    """Share of held-out examples ``predict(x) -> classes`` gets right; None without a held-out set."""
    if not eval_batches or predict is None:
        return None
    right = total = 0
    for x, y in eval_batches:
        right += int(np.sum(np.asarray(predict(x)) == y))
        total += len(y)
    return right / total
