"""Fixtures of the strategy parity tests: identical weights and batches for every trainer."""

from __future__ import annotations

import pytest
from strategy_helpers import OVERRIDES, STEPS, make_spec

from twinbench.data.text import batches, synthetic_corpus
from twinbench.models.gpt import init_gpt


@pytest.fixture(scope="session")
def weights():
    return init_gpt(make_spec("jax", "jit").model, seed=0)


@pytest.fixture(scope="session")
def host_batches():
    corpus = synthetic_corpus(n_bytes=20_000) % OVERRIDES["vocab"]
    data = batches(corpus, OVERRIDES["batch"], OVERRIDES["seq"], seed=0)
    return [next(data) for _ in range(STEPS)]
