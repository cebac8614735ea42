"""``--attention-impl`` under torchax: torch's ``F.scaled_dot_product_attention`` runs the JAX twins' attention of
that name (the Pallas splash kernel in Pallas's interpreter here), so a torchax row and a JAX twin row with the
same option run the same attention. One fresh process (torchax changes global torch settings on import):
tests/strategies/torchax_attention_child.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = Path(__file__).with_name("torchax_attention_child.py")
pytestmark = pytest.mark.slow  # one child process of ~25 s: started early by make test's scheduling


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("torchax-attention") / "out.json"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, str(CHILD), str(out)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("case", ["causal/splash", "causal/jax-nn", "causal/chunked", "padding/splash",
                                  "padding/jax-nn", "scale-gqa/jax-nn", "scale-gqa/splash", "scale-gqa/chunked"])
def test_lowered_attention_is_torchs(found: dict, case: str) -> None:
    """Values and the gradient of q equal torch's own scaled_dot_product_attention: causal, a boolean key padding
    mask (padding queries' outputs read by no loss), an explicit scale with grouped key/value heads."""
    got = found[case]
    assert got["value"] < 1e-5
    assert got["grad"] < 1e-5 * got["grad_scale"]


def test_each_impl_is_the_one_that_runs(found: dict) -> None:
    """splash puts a Pallas kernel into the program, chunked a loop over query blocks, default (torchax's own
    lowering) neither: the option changes what is compiled, not only its name."""
    assert found["causal/splash"]["pallas"] and found["padding/splash"]["pallas"]
    assert not found["causal/jax-nn"]["pallas"] and found["causal/chunked"]["scan"]
    assert found["default"] == {"pallas": False, "scan": False}


def test_a_torchax_run_with_splash_trains_as_with_torchaxs_own_attention(found: dict) -> None:
    runs = found["trainer"]
    assert runs["splash"]["pallas"] and not runs["default"]["pallas"]
    for a, b in zip(runs["splash"]["losses"], runs["default"]["losses"], strict=True):
        assert abs(a - b) <= 1e-5 * abs(b)
    assert runs["default"]["losses"][-1] < runs["default"]["losses"][0]


def test_fewer_key_heads_without_enable_gqa_are_refused_in_one_line(found: dict) -> None:
    assert "2 key heads for 4 query heads" in found["gqa-without-flag"] and "\n" not in found["gqa-without-flag"]


def test_dropout_is_refused_in_one_line_and_the_lowering_restored(found: dict) -> None:
    assert "dropout_p=0.1" in found["dropout"] and "\n" not in found["dropout"]
    assert found["restored"] is True
