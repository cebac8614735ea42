"""Llama checkpoints: a random ``LlamaForCausalLM`` made offline loads into both twins with the same logits as
``transformers`` (1e-5), an export loads back into ``transformers``, ``--init-from`` takes its shape, and
``twinbench score`` agrees with ``transformers``' loss in both frameworks."""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from typer.testing import CliRunner

from twinbench.cli import app
from twinbench.data.text import synthetic_corpus
from twinbench.models.hf import load_hf, save_hf
from twinbench.models.llama import init_llama
from twinbench.models.llama import model_jax as llama_jax
from twinbench.models.llama import model_torch as llama_torch
from twinbench.models.weights import canonical_to_jax, canonical_to_torch
from twinbench.spec import SpecError, from_preset, validate

TOL = 1e-5
HF_CFG = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
              intermediate_size=160, vocab_size=300, max_position_embeddings=32, rms_norm_eps=1e-6,
              tie_word_embeddings=False, bos_token_id=0, eos_token_id=0)


@pytest.fixture(scope="module")
def hf_llama(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**HF_CFG)).eval()
    with torch.no_grad():  # RMSNorm weights other than 1, so their mapping is tested too
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    path = tmp_path_factory.mktemp("llama")
    model.save_pretrained(path, safe_serialization=True)
    return path, model


def hf_logits(model, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(x).long()).logits.numpy()


def twin_logits(cfg, weights, x):
    tm = llama_torch.Llama(cfg)
    canonical_to_torch(tm, weights)
    with torch.no_grad():
        lt = tm.eval()(torch.from_numpy(x).long()).numpy()
    jm = llama_jax.Llama(cfg, nnx.Rngs(0))
    canonical_to_jax(jm, weights)
    return lt, np.asarray(nnx.jit(lambda m, t: m(t))(jm, jnp.asarray(x, jnp.int32)))


def test_llama_checkpoint_logits_match_transformers_in_both_twins(hf_llama):
    path, model = hf_llama
    cfg, weights = load_hf(path)
    assert (cfg.family, cfg.layers, cfg.d_model, cfg.heads, cfg.d_ff, cfg.vocab, cfg.context) == \
        ("llama", 2, 64, 4, 160, 300, 32)
    x = np.random.default_rng(0).integers(0, 300, (2, 32))
    ref = hf_logits(model, x)
    lt, lj = twin_logits(cfg, weights, x)
    assert np.max(np.abs(ref)) > 0.05
    assert np.max(np.abs(lt - ref)) <= TOL and np.max(np.abs(lj - ref)) <= TOL


def test_llama_export_loads_in_transformers_and_round_trips(hf_llama, tmp_path):
    from transformers import LlamaForCausalLM

    cfg, weights = load_hf(hf_llama[0])
    save_hf(cfg, weights, tmp_path / "out")
    back = LlamaForCausalLM.from_pretrained(tmp_path / "out").eval()
    x = np.random.default_rng(1).integers(0, 300, (2, 32))
    assert np.max(np.abs(hf_logits(back, x) - hf_logits(hf_llama[1], x))) <= TOL
    cfg2, weights2 = load_hf(tmp_path / "out")
    assert cfg2 == cfg and all(np.array_equal(weights[k], weights2[k]) for k in weights)


def test_llama_init_from_sets_the_shape_and_task(hf_llama):
    spec = validate(from_preset("tiny", {"init_from": str(hf_llama[0])}))
    assert spec.model.family == "llama" and spec.model.heads == 4 and spec.train.task == "lm"


def test_unsupported_llama_configs_are_one_line_errors(hf_llama, tmp_path):
    for key, value in (("num_key_value_heads", 1), ("hidden_act", "gelu"), ("tie_word_embeddings", True),
                       ("attention_bias", True)):
        d = tmp_path / key
        d.mkdir()
        cfg = json.loads((hf_llama[0] / "config.json").read_text())
        (d / "config.json").write_text(json.dumps({**cfg, key: value}))
        with pytest.raises(SpecError, match=key):
            load_hf(d)


def test_score_agrees_with_transformers_in_both_frameworks(hf_llama, tmp_path):
    path, model = hf_llama
    text = tmp_path / "text.txt"
    text.write_bytes(synthetic_corpus(n_bytes=4 * 32).tobytes())
    res = CliRunner().invoke(app, ["score", "--init-from", str(path), "--data", str(text), "--batch", "2",
                                   "--json", str(tmp_path / "score.json")])
    assert res.exit_code == 0, res.output
    result = json.loads((tmp_path / "score.json").read_text())
    x = torch.from_numpy(np.frombuffer(text.read_bytes(), np.uint8).reshape(4, 32).astype(np.int64))
    with torch.no_grad():
        ref = float(model(x, labels=x).loss)
    for fw in ("torch", "jax"):
        assert result["frameworks"][fw]["status"] == "ok"
        assert abs(result["frameworks"][fw]["loss"] - ref) <= TOL * ref, fw
    assert result["max_logit_diff"] <= TOL


def test_fresh_init_exports_and_loads(tmp_path):
    cfg = validate(from_preset("llama-tiny")).model
    weights = init_llama(cfg, 0)
    save_hf(cfg, weights, tmp_path / "x")
    cfg2, back = load_hf(tmp_path / "x")
    assert cfg2 == cfg and all(np.array_equal(back[k], weights[k]) for k in weights)
