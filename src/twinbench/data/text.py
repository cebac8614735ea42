"""Byte-level language-model data: the embedded synthetic corpus or a user's UTF-8 text file.

The synthetic corpus is a seeded word-level Markov source written out as bytes: a few hundred made-up
words, each followed by one of a handful of likely successors, with punctuation and line breaks. A model
learns spelling within tens of steps and word transitions after that, so the loss falls visibly in a short
run. Batches are random windows drawn by a seeded NumPy generator: the same seed gives the same int32
arrays, whichever framework consumes them.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from twinbench.spec import SpecError

CORPUS_BYTES = 1 << 20


def synthetic_corpus(seed: int = 1234, n_bytes: int = CORPUS_BYTES) -> np.ndarray:
    """A deterministic byte corpus (uint8) from a word-level Markov source over lowercase letters (a fresh,
    writable copy; the bytes are made once per process and arguments)."""
    return np.frombuffer(_corpus_bytes(seed, n_bytes), np.uint8).copy()


@functools.lru_cache(maxsize=8)
def _corpus_bytes(seed: int, n_bytes: int) -> bytes:
    rng = np.random.default_rng(seed)
    letters = np.frombuffer(b"etaoinshrdlcumwfgypbvkjxqz", np.uint8)
    letter_p = 1.0 / np.arange(1, 27) ** 0.9
    letter_p /= letter_p.sum()
    n_words = 400
    words = [bytes(rng.choice(letters, size=rng.integers(2, 8), p=letter_p)) for _ in range(n_words)]
    successors = rng.integers(0, n_words, size=(n_words, 6)).tolist()
    succ_p = np.array([0.4, 0.25, 0.15, 0.1, 0.06, 0.04])
    n_draws = n_bytes // 2  # more words than needed: every word and separator is >= 2 bytes
    picks, seps = rng.choice(6, size=n_draws, p=succ_p).tolist(), rng.random(n_draws).tolist()
    out, size, w, i = bytearray(), 0, 0, 0
    while size < n_bytes:  # Python lists, not NumPy scalars, in the loop: no NumPy scalar is boxed per draw, the same bytes
        word, r = words[w], seps[i]
        sep = b". " if r < 0.06 else b".\n" if r < 0.08 else b", " if r < 0.14 else b" "
        out += word + sep
        size += len(word) + len(sep)
        w, i = successors[w][picks[i]], i + 1
    return bytes(out[:n_bytes])


def read_text_file(path: str | Path, min_bytes: int) -> np.ndarray:
    """Bytes of a UTF-8 text file as uint8 tokens; a one-line :class:`SpecError` if unusable."""
    p = Path(path)
    if not p.is_file():
        what = "a folder, not a file" if p.is_dir() else "not a regular file (a device or a pipe)" if p.exists() \
            else "no such file"
        raise SpecError(f"--data {path}: {what}")
    raw = p.read_bytes()
    if not raw:
        raise SpecError(f"--data {path}: the file is empty")
    if b"\x00" in raw[:65536]:
        raise SpecError(f"--data {path}: looks binary (NUL bytes); give a UTF-8 text file")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(f"--data {path}: not UTF-8 text (bad byte at offset {e.start})") from None
    if len(raw) < min_bytes:
        raise SpecError(f"--data {path}: {len(raw)} bytes is too short for --seq; need at least {min_bytes}")
    return np.frombuffer(raw, np.uint8).copy()


def load_tokens(data: str, seq: int, seed: int) -> np.ndarray:
    """The token stream of a run: the user's file if ``data`` is set, else the synthetic corpus."""
    return read_text_file(data, seq + 2) if data else synthetic_corpus(seed=1234 + seed)


def batches(tokens: np.ndarray, batch: int, seq: int, seed: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Endless (inputs, targets) int32 pairs of shape [batch, seq], targets shifted by one token."""
    rng = np.random.default_rng(seed)
    offsets = np.arange(seq + 1)
    while True:
        starts = rng.integers(0, len(tokens) - seq - 1, size=batch)
        window = tokens[starts[:, None] + offsets].astype(np.int32)
        yield window[:, :-1], window[:, 1:]
