"""Data with no download: a learnable corpus, deterministic batches, clear errors for bad files."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from twinbench.data.text import batches, load_tokens, read_text_file, synthetic_corpus
from twinbench.spec import SpecError


def test_corpus_is_deterministic_text_with_structure():
    a, b = synthetic_corpus(n_bytes=50_000), synthetic_corpus(n_bytes=50_000)
    assert np.array_equal(a, b) and a.dtype == np.uint8 and len(a) == 50_000
    text = bytes(a).decode("ascii")
    words = text.replace(".", " ").replace(",", " ").split()
    # a Markov source: far fewer distinct bigrams than a uniform one would give
    bigrams = set(itertools.pairwise(words))
    assert len(set(words)) <= 400 and len(bigrams) < 0.5 * len(words)
    assert not np.array_equal(synthetic_corpus(seed=1, n_bytes=1000), synthetic_corpus(seed=2, n_bytes=1000))


def test_batches_are_shifted_windows_and_reproducible():
    tokens = synthetic_corpus(n_bytes=10_000)
    x, y = next(batches(tokens, batch=4, seq=16, seed=7))
    assert x.shape == y.shape == (4, 16) and x.dtype == np.int32
    assert np.array_equal(x[:, 1:], y[:, :-1])
    x2, _ = next(batches(tokens, batch=4, seq=16, seed=7))
    x3, _ = next(batches(tokens, batch=4, seq=16, seed=8))
    assert np.array_equal(x, x2) and not np.array_equal(x, x3)


def test_user_text_file(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("héllo wörld " * 20, encoding="utf-8")
    tokens = load_tokens(str(p), seq=16, seed=0)
    assert bytes(tokens).decode("utf-8").startswith("héllo")


@pytest.mark.parametrize(("content", "message"), [
    (None, "no such file"),
    (b"", "the file is empty"),
    (b"\x00\x01\x02binary" * 10, "looks binary"),
    (b"\xff\xfe caf\xe9 " * 10, "not UTF-8"),
    (b"short", "too short"),
])
def test_bad_data_files_get_one_line_errors(tmp_path, content, message):
    p = tmp_path / "d.txt"
    if content is not None:
        p.write_bytes(content)
    with pytest.raises(SpecError, match=message) as e:
        read_text_file(p, min_bytes=18)
    assert "\n" not in str(e.value) and str(e.value).startswith("--data")
