"""Byte-level language-model data: the embedded synthetic corpus or a user's UTF-8 text file.

The synthetic corpus is a seeded word-level Markov source written out as bytes: a few hundred made-up
words, each followed by one of a handful of likely successors, with punctuation and line breaks. A model
learns spelling within tens of steps and word transitions after that, so the loss falls visibly in a short
run. Batches are random windows drawn by a seeded NumPy generator: the same seed gives the same int32
arrays, whichever framework consumes them.
"""

from __future__ import annotations

import functools
import threading
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


def read_data(path: str | Path, cap: int) -> bytes:
    """The bytes of a ``--data`` file, read through the one opener (a FIFO or device is refused, never waited on)
    within ``cap`` bytes, checked from its size before a byte is read; a one-line :class:`SpecError` naming it."""
    from twinbench.folder_io import NotRegular, TooLarge, read_file
    from twinbench.limits import data_refusal

    flag = f"--data {path}"
    try:
        return read_file(Path(path).resolve(), cap)  # the path you name is yours: resolved once, then read
    except TooLarge:
        raise SpecError(data_refusal(flag, path, cap)) from None
    except NotRegular as e:
        raise SpecError(f"{flag}: {e.strerror}") from None
    except FileNotFoundError:
        raise SpecError(f"{flag}: no such file") from None
    except OSError as e:
        raise SpecError(f"{flag}: cannot read it ({e.strerror or e})") from None


def read_text_file(path: str | Path, min_bytes: int) -> np.ndarray:
    """Bytes of a UTF-8 text file as uint8 tokens (:func:`read_data`, within :func:`limits.max_data_bytes`); a
    one-line :class:`SpecError` if unusable."""
    from twinbench.limits import max_data_bytes

    raw = read_data(path, max_data_bytes())
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
    return np.frombuffer(raw, np.uint8)  # read-only, not copied: the file's bytes are held once


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


class Draws:
    """Row ``i`` of ``rng.integers(0, high, size=(steps, width))`` for a seeded generator, drawn when asked for:
    rows are drawn in order (one call a row draws the same integers as one call for all: the bit generator keeps
    its own leftover bits) whatever order they are asked in, from any thread, and kept (``width`` integers a row,
    the grid grown by doubling), so a run of any length holds its draws, never a grid of every step up front."""

    def __init__(self, seed: int, high: int, width: int) -> None:
        self.high, self.width = high, width
        self._rng = np.random.default_rng(seed)
        self._rows = np.empty((0, width), np.int64)
        self._drawn = 0
        self._lock = threading.Lock()  # the input pipeline's workers ask for steps from threads

    def __call__(self, i: int) -> np.ndarray:
        with self._lock:
            while self._drawn <= i:
                if self._drawn == len(self._rows):  # grown by doubling: amortised, never one row at a time
                    grown = np.empty((max(64, 2 * len(self._rows)), self.width), np.int64)
                    grown[: self._drawn] = self._rows[: self._drawn]
                    self._rows = grown
                self._rows[self._drawn] = self._rng.integers(0, self.high, size=self.width)
                self._drawn += 1
            return self._rows[i].copy()


class Windows:
    """Step ``i``'s (inputs, targets) int32 pair, the stream :func:`batches` yields, cut when the step asks for it:
    the draws' starts are kept (:class:`Draws`: ``batch`` integers a step), so a step's batch is the same in every
    framework, process and version, and a run of any length holds its starts and the batches in flight, not
    every step's windows built up front."""

    def __init__(self, tokens: np.ndarray, batch: int, seq: int, seed: int) -> None:
        self.tokens, self.batch, self.seq = tokens, batch, seq
        self.starts = Draws(seed, len(tokens) - seq - 1, batch)

    def __call__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        w = self.tokens[self.starts(i)[:, None] + np.arange(self.seq + 1)].astype(np.int32)
        return w[:, :-1], w[:, 1:]
