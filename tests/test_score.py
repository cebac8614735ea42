"""``twinbench score``: a GPT-2 checkpoint's next-token cross-entropy in each framework, and the logit diff.

The checkpoint is written by ``save_hf`` (its transformers compatibility is tested in
``tests/models/test_hf.py``). Tolerances, float32 on CPU: the two frameworks' mean losses agree to 1e-5
relative, the largest logit difference is <= 1e-4, and the torch child's loss equals an in-process
reference computation to 1e-6 relative.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from twinbench.cli import app
from twinbench.data.text import synthetic_corpus
from twinbench.models.gpt import init_gpt
from twinbench.models.gpt import model_torch as gpt_torch
from twinbench.models.hf import save_hf
from twinbench.models.weights import canonical_to_torch
from twinbench.score import cut_windows, tokenize
from twinbench.spec import ModelConfig, SpecError

CFG = ModelConfig(layers=2, d_model=32, heads=4, vocab=300, context=32)
N_WINDOWS = 10


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    root = tmp_path_factory.mktemp("score")
    weights = init_gpt(CFG, seed=5)
    weights["wte.weight"] *= 10  # larger logits than GPT-2 init, so the logit comparison means something
    save_hf(CFG, weights, root / "gpt")
    text = root / "text.txt"
    text.write_bytes(synthetic_corpus(n_bytes=N_WINDOWS * CFG.context + 17).tobytes())  # + a partial window
    return root, weights, text


@pytest.fixture(scope="module")
def scored(ckpt):
    root, _, text = ckpt
    res = CliRunner().invoke(app, ["score", "--init-from", str(root / "gpt"), "--data", str(text),
                                   "--batch", "3", "--compare-windows", "2", "--json", str(root / "score.json")])
    assert res.exit_code == 0, res.output
    return json.loads((root / "score.json").read_text()), res.output


def test_score_is_the_same_in_both_frameworks(scored, ckpt):
    result, output = scored
    _, weights, text = ckpt
    assert result["windows"] == N_WINDOWS and result["tokens_scored"] == N_WINDOWS * (CFG.context - 1)
    t, j = result["frameworks"]["torch"], result["frameworks"]["jax"]
    assert t["status"] == j["status"] == "ok"
    assert np.isfinite(t["loss"]) and 1.0 < t["loss"] < 20.0
    assert abs(t["loss"] - j["loss"]) <= 1e-5 * t["loss"]
    assert result["compared_windows"] == 2 and result["logits_compared"] == 2 * CFG.context * CFG.vocab
    assert result["max_abs_logit"] > 1.0
    assert 0.0 <= result["max_logit_diff"] <= 1e-4
    assert result["max_window_loss_diff"] <= 1e-5
    assert "max |logit diff| torch vs jax" in output and "mean CE" in output

    # the reference: the same windows through the torch twin in this process
    windows = cut_windows(tokenize(text), CFG.context)
    model = gpt_torch.GPT(CFG)
    canonical_to_torch(model, weights)
    x = torch.from_numpy(windows).long()
    with torch.no_grad():
        logits = model.eval()(x)
    ref = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, CFG.vocab), x[:, 1:].reshape(-1))
    assert t["loss"] == pytest.approx(float(ref), rel=1e-6)


def test_windows_drop_the_partial_tail():
    tokens = np.arange(100)
    w = cut_windows(tokens, 32)
    assert w.shape == (3, 32) and w[1, 0] == 32 and w[-1, -1] == 95
    assert cut_windows(tokens, 32, max_windows=2).shape == (2, 32)


def test_tokenizer_json(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "hello": 1, "world": 2, "again": 3}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "t.txt").write_text("hello world hello again xyz")
    assert tokenize(tmp_path / "t.txt", tmp_path / "tokenizer.json").tolist() == [1, 2, 1, 3, 0]
    assert tokenize(tmp_path / "t.txt").tolist()[:5] == list(b"hello")
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(SpecError, match="--tokenizer"):
        tokenize(tmp_path / "t.txt", tmp_path / "bad.json")
    with pytest.raises(SpecError, match="no such file"):
        tokenize(tmp_path / "t.txt", tmp_path / "missing.json")


def test_parent_imports_no_framework(ckpt):
    """The parent only reads the config and tokenises: torch and JAX load in the children alone."""
    root, _, text = ckpt
    code = (f"import sys, twinbench.cli, twinbench.score as s; cfg, w = s.prepare({str(root / 'gpt')!r}, "
            f"{str(text)!r}, None, 0); assert w.shape == ({N_WINDOWS}, {CFG.context}); "
            "print(sorted(m for m in ('torch', 'jax', 'flax', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_score_errors_are_one_line(ckpt, tmp_path):
    root, _, text = ckpt
    gpt = str(root / "gpt")
    short = tmp_path / "short.txt"
    short.write_text("too short")
    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"],
                                                  "hidden_size": 32, "num_hidden_layers": 2,
                                                  "num_attention_heads": 4, "intermediate_size": 64,
                                                  "vocab_size": 300, "max_position_embeddings": 32}))
    cases = [
        (["--init-from", gpt, "--data", str(short)], "no full window of the model's context 32"),
        (["--init-from", gpt, "--data", str(tmp_path / "missing.txt")], "--data"),
        (["--init-from", str(tmp_path / "nope"), "--data", str(text)], "--init-from"),
        (["--init-from", str(bert), "--data", str(text)], "score needs a language-model checkpoint (model_type gpt2"),
        (["--init-from", gpt, "--data", str(text), "--framework", "torch,mxnet"], "--framework"),
        (["--init-from", gpt, "--data", str(text), "--batch", "0"], "--batch"),
    ]
    for args, message in cases:
        res = CliRunner().invoke(app, ["score", *args])
        assert res.exit_code == 2, (args, res.output)
        assert message in res.output and "Traceback" not in res.output, (args, res.output)


def test_a_broken_checkpoint_is_one_line_before_any_run_and_a_failing_framework_one_line_after(ckpt, tmp_path,
                                                                                                  monkeypatch):
    from twinbench import runner

    root, _, text = ckpt
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text((root / "gpt" / "config.json").read_text())
    (broken / "model.safetensors").write_bytes(b"\x00" * 16)
    calls = []
    monkeypatch.setattr(runner, "run_module", lambda *a: calls.append(a) or (1, "boom: the child failed"))
    res = CliRunner().invoke(app, ["score", "--init-from", str(broken), "--data", str(text), "--framework", "torch"])
    assert res.exit_code == 2 and "model.safetensors is not a safetensors file" in res.output, res.output
    assert not calls  # refused before any framework started
    res = CliRunner().invoke(app, ["score", "--init-from", str(root / "gpt"), "--data", str(text), "--framework",
                                   "torch", "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 1, res.output
    assert [ln for ln in res.output.splitlines() if ln.strip()] == [
        ln for ln in res.output.splitlines() if ln.startswith("error:")]  # one line, no table of failures
    r = json.loads((tmp_path / "r.json").read_text())["frameworks"]["torch"]
    assert r["status"] == "failed" and "boom" in r["error"]


def test_tokenizer_ids_must_fit_the_checkpoint(ckpt, tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    from twinbench.score import prepare

    root, _, _ = ckpt
    words = [f"w{i}" for i in range(40)]
    text = tmp_path / "t.txt"
    text.write_text(" ".join(words * 2))  # 80 tokens: two full windows of 32 and a partial one
    for top, ok in ((299, True), (300, False)):
        vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words[:-1])}, words[-1]: top}
        tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        tok.save(str(tmp_path / "tokenizer.json"))
        if ok:
            _, windows = prepare(str(root / "gpt"), str(text), str(tmp_path / "tokenizer.json"), 0)
            assert windows.shape == (2, 32) and windows[0, :3].tolist() == [1, 2, 3] and windows.max() == top
        else:
            with pytest.raises(SpecError, match="token id 300 is outside the checkpoint's vocab_size 300"):
                prepare(str(root / "gpt"), str(text), str(tmp_path / "tokenizer.json"), 0)
