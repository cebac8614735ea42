"""Sequence-classification data for the BERT twin: an embedded task or a user's JSONL file, byte tokens.

The embedded task ("topics") needs no download and is learnable within tens of steps. Two topics, each with
its own made-up vocabulary, plus common filler words shared by both:
- single sentences (70 %): the label is the sentence's topic;
- sentence pairs (30 %): the label is 1 when both sentences are on the same topic, else 0.
Lengths follow a realistic skewed distribution: log-normal in tokens (median ~ seq/5), so most examples are
short and a long tail reaches the maximum length, where they are truncated. That is what makes padding
strategies (pad-max, bucket, dynamic) differ.

Tokens are bytes shifted by 4 after four specials: ``[PAD]=0, [CLS]=1, [SEP]=2, [UNK]=3``. A single text is
``[CLS] a [SEP]``; a pair is ``[CLS] a [SEP] b [SEP]`` with segment id 1 on ``b [SEP]``. The longer text of a
pair is cut first when the pair does not fit.

A batch is ``((input_ids, token_type_ids, attention_mask), labels)`` of int32 NumPy arrays, padded to the
length the length policy (``pad-max``, ``bucket``, ``dynamic``) chooses. The same seed gives the same
examples in the same batches whatever the policy or framework, so runs differ only in padding.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from twinbench.data.text import Draws
from twinbench.spec import RunSpec, SpecError

PAD, CLS, SEP, UNK = 0, 1, 2, 3
N_SPECIAL = 4
N_TRAIN, N_EVAL = 4096, 256


@dataclass(frozen=True)
class Example:
    text: str
    text_pair: str | None
    label: int


# ---------------------------------------------------------------------------------------------- tokens
def encode(ex: Example, max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """(token ids, segment ids) of one example, at most ``max_len`` long, int32."""
    a = np.frombuffer(ex.text.encode("utf-8"), np.uint8).astype(np.int32) + N_SPECIAL
    if ex.text_pair is None:
        a = a[: max_len - 2]
        ids = np.concatenate([[CLS], a, [SEP]])
        return ids.astype(np.int32), np.zeros(len(ids), np.int32)
    b = np.frombuffer(ex.text_pair.encode("utf-8"), np.uint8).astype(np.int32) + N_SPECIAL
    budget = max_len - 3
    if len(a) + len(b) > budget:  # cut the longer text first (BERT's "longest first" truncation)
        short = min(len(a), len(b), budget // 2)
        la, lb = (budget - short, short) if len(a) >= len(b) else (short, budget - short)
        a, b = a[:la], b[:lb]
    ids = np.concatenate([[CLS], a, [SEP], b, [SEP]]).astype(np.int32)
    types = np.concatenate([np.zeros(len(a) + 2, np.int32), np.ones(len(b) + 1, np.int32)])
    return ids, types


def length_policy(spec: RunSpec) -> str:
    """The padding policy a strategy names: ``+bucket`` or ``+dynamic``; ``pad-max`` otherwise."""
    return spec.strategy.mods.length or "pad-max"


def buckets(seq: int) -> tuple[int, ...]:
    """The bucket lengths of ``bucket``: seq/8, seq/4, seq/2, seq (at least 8 tokens each)."""
    return tuple(sorted({max(8, seq // 8), max(8, seq // 4), max(8, seq // 2), seq}))


def batch_length(longest: int, policy: str, seq: int) -> int:
    """The padded length of a batch whose longest example has ``longest`` tokens."""
    if policy == "dynamic":
        return longest
    if policy == "bucket":
        return next(b for b in buckets(seq) if b >= longest)
    return seq


def collate(examples: Sequence[Example], seq: int, policy: str) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """Tokenise and pad a batch: ((input_ids, token_type_ids, attention_mask), labels)."""
    encoded = [encode(ex, seq) for ex in examples]
    length = batch_length(max(len(ids) for ids, _ in encoded), policy, seq)
    ids = np.full((len(examples), length), PAD, np.int32)
    types = np.zeros((len(examples), length), np.int32)
    mask = np.zeros((len(examples), length), np.int32)
    for row, (i, t) in enumerate(encoded):
        ids[row, : len(i)], types[row, : len(t)], mask[row, : len(i)] = i, t, 1
    labels = np.array([ex.label for ex in examples], np.int32)
    return (ids, types, mask), labels


# ------------------------------------------------------------------------------------- embedded task
def _vocab(rng: np.random.Generator, letters: bytes, n: int) -> list[str]:
    pool = np.frombuffer(letters, np.uint8)
    return [bytes(rng.choice(pool, size=rng.integers(3, 8))).decode() for _ in range(n)]


def _sentence(rng: np.random.Generator, topic_words: list[str], common: list[str], n_bytes: int) -> str:
    words: list[str] = []
    size = 0
    while size < n_bytes:
        w = topic_words[rng.integers(len(topic_words))] if rng.random() < 0.8 else common[rng.integers(len(common))]
        words.append(w)
        size += len(w) + 1
    return " ".join(words)[: max(n_bytes, 1)].strip() or words[0]


def synthetic_task(seq: int, n: int, seed: int) -> list[Example]:
    """``n`` examples of the embedded topic task, token lengths log-normal with a long tail to ``seq`` (a new
    list each call; the examples, immutable, are drawn once per process and arguments)."""
    return list(_synthetic_task(seq, n, seed))


@functools.lru_cache(maxsize=8)
def _synthetic_task(seq: int, n: int, seed: int) -> tuple[Example, ...]:
    vocab_rng = np.random.default_rng(4321)  # the task itself (vocabularies) is fixed; ``seed`` draws examples
    topics = [_vocab(vocab_rng, b"aeioustrnl", 60), _vocab(vocab_rng, b"aeioubkgpdz", 60)]
    common = _vocab(vocab_rng, b"aeiouhmwyfc", 80)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        tokens = int(np.clip(rng.lognormal(np.log(seq / 5), 0.65), 8, 2 * seq))  # long tail, truncated later
        if rng.random() < 0.7:
            topic = int(rng.integers(2))
            out.append(Example(_sentence(rng, topics[topic], common, tokens - 2), None, topic))
        else:
            ta, tb = int(rng.integers(2)), int(rng.integers(2))
            cut = int(rng.integers(tokens // 3, 2 * tokens // 3 + 1))
            out.append(Example(_sentence(rng, topics[ta], common, max(cut - 2, 3)),
                               _sentence(rng, topics[tb], common, max(tokens - cut - 1, 3)), int(ta == tb)))
    return tuple(out)


# ------------------------------------------------------------------------------------------- JSONL file
def read_jsonl(path: str | Path, num_labels: int) -> list[Example]:
    """Examples of a JSONL file (``text``, optional ``text_pair``, ``label``); one-line errors with line numbers.

    ``label`` is an integer in ``0..num_labels-1`` or a string; string labels are numbered in sorted order.
    """
    from twinbench.data.text import read_data
    from twinbench.limits import max_data_bytes

    flag = f"--data {path}"
    raw = read_data(path, max_data_bytes() // 8)  # examples as Python objects: several times the file's bytes
    try:
        lines = raw.decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise SpecError(f"{flag}: not UTF-8 text (bad byte at offset {e.start})") from None
    del raw
    rows: list[tuple[int, str, str | None, int | str]] = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise SpecError(f"{flag} line {n}: not valid JSON ({getattr(e, 'msg', e)})") from None
        except RecursionError:
            raise SpecError(f"{flag} line {n}: JSON nested too deeply") from None
        if not isinstance(obj, dict):
            raise SpecError(f"{flag} line {n}: expected a JSON object with text, label (and text_pair)")
        text, pair, label = obj.get("text"), obj.get("text_pair"), obj.get("label")
        if not isinstance(text, str) or not text:
            raise SpecError(f"{flag} line {n}: 'text' must be a non-empty string")
        if pair is not None and not isinstance(pair, str):
            raise SpecError(f"{flag} line {n}: 'text_pair' must be a string when given")
        if "label" not in obj:
            raise SpecError(f"{flag} line {n}: missing 'label'")
        if isinstance(label, bool) or not isinstance(label, (int, str)):
            raise SpecError(f"{flag} line {n}: 'label' must be an integer or a string, got {label!r}")
        rows.append((n, text, pair, label))
    if len(rows) < 2:
        raise SpecError(f"{flag}: {len(rows)} example(s); need at least 2")
    kinds = {type(r[3]) for r in rows}
    if len(kinds) > 1:
        n = next(r[0] for r in rows if type(r[3]) is not type(rows[0][3]))
        raise SpecError(f"{flag} line {n}: labels mix integers and strings")
    names = sorted({r[3] for r in rows}) if kinds == {str} else None
    out = []
    for n, text, pair, label in rows:
        idx = names.index(label) if names else int(label)
        if not 0 <= idx < num_labels:
            what = f"{len(names)} distinct labels" if names else f"label {label}"
            raise SpecError(f"{flag} line {n}: {what} do(es) not fit --num-labels {num_labels}; "
                            f"allowed labels: 0..{num_labels - 1}")
        out.append(Example(text, pair, idx))
    return out


# --------------------------------------------------------------------------------------------- batches
@dataclass
class ClassifyData:
    """Training and held-out examples, and the seeded order in which training batches draw them."""

    train: list[Example]
    eval: list[Example]
    batch: int
    seq: int
    policy: str
    seed: int

    def batch_indices(self) -> Draws:
        """Step ``i``'s example indices, ``batch_indices()(i)``, drawn when the step asks for them: the rows of
        ``default_rng(seed).integers(0, len(train), size=(steps, batch))``, the same for every policy, framework
        and run length."""
        return Draws(self.seed, len(self.train), self.batch)

    def eval_batches(self) -> list[tuple[tuple[np.ndarray, ...], np.ndarray]]:
        """The held-out set in batches padded to ``seq`` (one shape: one compiled evaluation)."""
        b = min(self.batch, len(self.eval))
        return [collate(self.eval[i:i + b], self.seq, "pad-max") for i in range(0, len(self.eval) - b + 1, b)]


def load(data: str, batch: int, seq: int, num_labels: int, policy: str, seed: int) -> ClassifyData:
    """The run's classification data: the user's JSONL file (last 10 % held out) or the embedded task."""
    if data:
        examples = read_jsonl(data, num_labels)
        n_eval = max(1, len(examples) // 10)
        return ClassifyData(examples[:-n_eval], examples[-n_eval:], batch, seq, policy, seed)
    return ClassifyData(synthetic_task(seq, N_TRAIN, 1234 + seed), synthetic_task(seq, N_EVAL, 99 + seed),
                        batch, seq, policy, seed)
