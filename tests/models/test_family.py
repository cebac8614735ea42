"""The model-family bundle: one place per family, lazy framework imports, FLOPs per token owned by the family."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from twinbench.measure import flops
from twinbench.models import family as families
from twinbench.models.bert import init_bert
from twinbench.models.gpt import init_gpt
from twinbench.spec import PRESETS, from_preset


def cfg(preset: str):
    return PRESETS[preset][0]


@pytest.mark.parametrize("preset", ["tiny", "small", "gpt2-124m"])
def test_gpt_flops_per_token_is_unchanged(preset):
    """GPT keeps today's count: 6 N (every parameter but the position embeddings) + 12 L d T."""
    m, t = PRESETS[preset]
    w = init_gpt(m, 0) if preset != "gpt2-124m" else None
    n = sum(a.size for a in w.values()) - w["wpe.weight"].size if w else 124_439_808 - 1024 * 768
    assert families.by_name("gpt").flops_per_token(m, t.seq) == flops.flops_per_token(n, m.layers, m.d_model, t.seq)


def test_gpt2_124m_flops_exact():
    m, t = PRESETS["gpt2-124m"]
    assert families.by_name("gpt").flops_per_token(m, t.seq) == 6 * 123_653_376 + 12 * 12 * 768 * 1024


@pytest.mark.parametrize(("preset", "expected", "overstated"), [
    # 6 * L * (4 d^2 + 2 d ff) + 12 L d T + 6 (d^2 + 2 d) // T
    ("bert-tiny", 6 * 2 * (4 * 128**2 + 2 * 128 * 512) + 12 * 2 * 128 * 128 + 6 * (128**2 + 2 * 128) // 128, 0.117),
    ("bert-base", 6 * 12 * (4 * 768**2 + 2 * 768 * 3072) + 12 * 12 * 768 * 512 + 6 * (768**2 + 2 * 768) // 512,
     0.256),
])
def test_bert_flops_count_matmul_parameters_only(preset, expected, overstated):
    m, t = PRESETS[preset]
    assert families.by_name("bert").flops_per_token(m, t.seq) == expected
    assert expected == {"bert-tiny": 2_753_292, "bert-base": 566_237_970}[preset]
    # what 6N (every parameter but the position embeddings) claimed: 11% / 25% too much
    w = init_bert(m, 0) if preset == "bert-tiny" else None
    if w is not None:
        n = sum(a.size for a in w.values()) - w["embeddings.position_embeddings.weight"].size
        old = flops.flops_per_token(n, m.layers, m.d_model, t.seq)
        assert old / expected - 1 == pytest.approx(overstated, abs=0.005)


def test_bert_attention_term_follows_the_padded_length():
    m = cfg("bert-tiny")
    full, half = families.by_name("bert").flops_per_token(m, 128), families.by_name("bert").flops_per_token(m, 64)
    assert full - half == 12 * m.layers * m.d_model * 64 - (6 * (128**2 + 256) // 64 - 6 * (128**2 + 256) // 128)


def test_the_worker_counts_attention_on_the_padded_length_of_the_steady_steps():
    from twinbench.worker import attention_length

    data = SimpleNamespace(lengths=[128, 32, 64, 64], padded_tokens=[4 * 128, 4 * 32, 4 * 64, 4 * 64])
    assert attention_length(data, 1) == round((32 * 32 + 64 * 64 + 64 * 64) / (32 + 64 + 64))
    assert attention_length(SimpleNamespace(lengths=[128] * 3, padded_tokens=[512] * 3), 1) == 128


def test_get_returns_the_bundle_of_the_spec():
    assert families.get(from_preset("tiny")) is families.by_name("gpt")
    bert = families.get(from_preset("bert-tiny"))
    assert bert is families.by_name("bert") and bert.task == "classify"
    assert families.by_name("bert").n_params(init_bert(cfg("bert-tiny"), 0)) == sum(a.size for a in init_bert(cfg("bert-tiny"), 0).values())
    assert set(bert.supports) == set(families.OPTIONS) and bert.reason("remat") is None


def test_the_bundle_imports_no_framework():
    code = ("import sys, twinbench.models.family as f, twinbench.strategies.registry as r; r.matrix(); "
            "print(sorted(m for m in ('torch', 'jax', 'flax') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_no_family_is_named_outside_models():
    """A family is one folder under models/ plus one registration line: no other module names one. The one
    exception is config.py's DEFAULT_FAMILY (the family of a ModelConfig, or an old record, that names none)."""
    import re
    from pathlib import Path

    import twinbench
    from twinbench.models.family import FAMILIES

    root = Path(twinbench.__file__).parent
    names = "|".join(re.escape(n) for n in (*FAMILIES, "llama"))
    quoted = re.compile(rf"""["']({names})["']""")
    hits = [f"{p.relative_to(root)}:{i}: {line.strip()}"
            for p in sorted(root.rglob("*.py")) if root / "models" not in p.parents
            for i, line in enumerate(p.read_text().splitlines(), 1)
            if quoted.search(line) and not line.startswith("DEFAULT_FAMILY = ")]
    assert not hits, "family names outside models/ (move them into the family's Family):\n" + "\n".join(hits)
