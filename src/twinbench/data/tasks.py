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
from collections.abc import Iterator, Sequence
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
    """A classifier's batches: labelled texts, tokenised and padded by the length policy when asked for."""
    from twinbench.data import classify

    t = spec.train
    policy = classify.length_policy(spec)
    if k > 1 and policy != "pad-max":
        raise SpecError(f"--strategies: {spec.strategy.name!r} stacks {k} batches per call, which needs one shape: "
                        "use +pad-max")
    data = classify.load(t.data, t.batch, t.seq, spec.model.num_labels, policy, t.seed)
    order = data.batch_indices(n_calls * k)
    real, padded, lengths = [], [], []
    for rows in order:
        n_tokens = [len(classify.encode(data.train[j], t.seq)[0]) for j in rows]
        length = classify.batch_length(max(n_tokens), policy, t.seq)
        real.append(sum(n_tokens))
        padded.append(length * len(rows))
        lengths.append(length)

    def make(i: int) -> Any:  # tokenise and pad when the pipeline asks for the batch
        return classify.collate([data.train[j] for j in order[i]], t.seq, policy)

    return RunData(HostBatches(make, n_calls, k, t.slow_input), real, padded, lengths, data.eval_batches())


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
