"""Hugging Face checkpoints: import into both twins, export back, and the errors a user can cause.

Checkpoints are built here, offline, with ``transformers`` (random tiny models, ``save_pretrained`` with
safetensors). Tolerance, float32 on CPU: both twins' logits equal transformers' own PyTorch model's to
max |diff| <= 1e-4 (logits are O(1); a wrong transpose or activation gives O(0.1) or more).
"""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from safetensors.numpy import load_file, save_file
from typer.testing import CliRunner

from twinbench.cli import app
from twinbench.export import initial_weights
from twinbench.models.gpt import init_gpt
from twinbench.models.gpt import model_jax as gpt_jax
from twinbench.models.gpt import model_torch as gpt_torch
from twinbench.models.hf import load_hf, save_hf
from twinbench.models.weights import canonical_to_jax, canonical_to_torch
from twinbench.spec import ModelConfig, SpecError, from_preset, validate

TOL = 1e-4
GPT_CFG = dict(n_layer=2, n_embd=32, n_head=4, n_positions=24, vocab_size=300, bos_token_id=0, eos_token_id=0)


@pytest.fixture(scope="module")
def hf_gpt2(tmp_path_factory):
    """A random GPT2LMHeadModel saved as config.json + model.safetensors, and the model itself."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(**GPT_CFG)).eval()
    path = tmp_path_factory.mktemp("gpt2")
    model.save_pretrained(path, safe_serialization=True)
    return path, model


def twin_logits(cfg: ModelConfig, weights: dict, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    tm = gpt_torch.GPT(cfg)
    canonical_to_torch(tm, weights)
    with torch.no_grad():
        lt = tm.eval()(torch.from_numpy(x).long()).numpy()
    jm = gpt_jax.GPT(cfg, nnx.Rngs(0))
    canonical_to_jax(jm, weights)
    return lt, np.asarray(nnx.jit(lambda m, t: m(t))(jm, jnp.asarray(x, jnp.int32)))


def hf_logits(model, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(x).long()).logits.numpy()


def test_gpt2_checkpoint_logits_match_transformers_in_both_twins(hf_gpt2):
    path, model = hf_gpt2
    cfg, weights = load_hf(path)
    assert (cfg.family, cfg.layers, cfg.d_model, cfg.heads, cfg.vocab, cfg.context) == ("gpt", 2, 32, 4, 300, 24)
    x = np.random.default_rng(0).integers(0, 300, size=(3, 24))
    ref = hf_logits(model, x)
    lt, lj = twin_logits(cfg, weights, x)
    assert np.abs(ref).max() > 0.1  # not a degenerate all-zero comparison
    assert np.abs(lt - ref).max() <= TOL
    assert np.abs(lj - ref).max() <= TOL


def test_old_gpt2_layout_without_prefix_with_mask_buffers_and_lm_head(hf_gpt2, tmp_path):
    """The hub's original gpt2 files: no ``transformer.`` prefix, ``attn.bias``/``masked_bias`` buffers,
    an explicit (tied) ``lm_head.weight``. All load to the same canonical weights."""
    path, _ = hf_gpt2
    _, weights = load_hf(path)
    tensors = {k.removeprefix("transformer."): v for k, v in load_file(str(path / "model.safetensors")).items()}
    for i in range(2):
        tensors[f"h.{i}.attn.bias"] = np.tril(np.ones((1, 1, 24, 24), np.float32))
        tensors[f"h.{i}.attn.masked_bias"] = np.array(-1e4, np.float32)
    tensors["lm_head.weight"] = tensors["wte.weight"].copy()
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    (tmp_path / "config.json").write_text((path / "config.json").read_text())
    _, old = load_hf(tmp_path)
    assert set(old) == set(weights)
    assert all(np.array_equal(old[k], weights[k]) for k in weights)

    tensors["lm_head.weight"] = tensors["lm_head.weight"] + 1.0  # untied head: the twin cannot represent it
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(SpecError, match="not tied"):
        load_hf(tmp_path)


def test_sharded_checkpoint_loads(hf_gpt2, tmp_path):
    path, model = hf_gpt2
    model.save_pretrained(tmp_path, safe_serialization=True, max_shard_size="40KB")
    assert (tmp_path / "model.safetensors.index.json").is_file() and len(list(tmp_path.glob("*.safetensors"))) > 1
    _, sharded = load_hf(tmp_path)
    _, single = load_hf(path)
    assert set(sharded) == set(single) and all(np.array_equal(sharded[k], single[k]) for k in single)


def test_bf16_and_fp16_checkpoints_load_as_float32(hf_gpt2, tmp_path):
    """NumPy has no bfloat16: such tensors are widened to float32 exactly (fp16 through NumPy)."""
    from safetensors.torch import load_file as load_torch
    from safetensors.torch import save_file as save_torch

    path, _ = hf_gpt2
    tensors = load_torch(str(path / "model.safetensors"))
    half = {k: v.to(torch.bfloat16 if i % 2 else torch.float16) for i, (k, v) in enumerate(tensors.items())}
    save_torch(half, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    (tmp_path / "config.json").write_text((path / "config.json").read_text())
    _, w = load_hf(tmp_path)
    for k, v in half.items():
        name = k.removeprefix("transformer.").replace("h.", "blocks.", 1) if k.startswith("transformer.h.") \
            else k.removeprefix("transformer.")
        assert w[name].dtype == np.float32 and np.array_equal(w[name], v.float().numpy())


def test_export_loads_in_transformers_and_round_trips(tmp_path):
    from transformers import GPT2LMHeadModel

    cfg = ModelConfig(layers=2, d_model=64, heads=2, vocab=256, context=32)
    weights = init_gpt(cfg, seed=3)
    save_hf(cfg, weights, tmp_path)
    model = GPT2LMHeadModel.from_pretrained(tmp_path).eval()  # offline: a local directory
    x = np.random.default_rng(1).integers(0, 256, size=(2, 32))
    lt, lj = twin_logits(cfg, weights, x)
    ref = hf_logits(model, x)
    assert np.abs(lt - ref).max() <= TOL and np.abs(lj - ref).max() <= TOL
    cfg2, back = load_hf(tmp_path)
    assert cfg2 == cfg
    assert all(np.array_equal(back[k], weights[k]) for k in weights)  # bit-exact


def test_export_command(hf_gpt2, tmp_path):
    path, _ = hf_gpt2
    runner = CliRunner()
    res = runner.invoke(app, ["export", "--preset", "tiny", "--init-from", str(path), "--out", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    _, a = load_hf(tmp_path / "a")
    _, orig = load_hf(path)
    assert all(np.array_equal(a[k], orig[k]) for k in orig)
    # --weights: a canonical safetensors file of the preset's shape
    from twinbench.models.weights import save

    tiny = validate(from_preset("tiny")).model
    save(init_gpt(tiny, seed=7), tmp_path / "w.safetensors")
    res = runner.invoke(app, ["export", "--preset", "tiny", "--weights", str(tmp_path / "w.safetensors"),
                              "--out", str(tmp_path / "b")])
    assert res.exit_code == 0, res.output
    assert np.array_equal(load_hf(tmp_path / "b")[1]["wte.weight"], init_gpt(tiny, seed=7)["wte.weight"])
    res = runner.invoke(app, ["export", "--preset", "small", "--weights", str(tmp_path / "w.safetensors"),
                              "--out", str(tmp_path / "c")])
    assert res.exit_code == 2 and "--weights" in res.output and "Traceback" not in res.output
    res = runner.invoke(app, ["export", "--preset", "tiny", "--weights", str(path / "model.safetensors"),
                              "--out", str(tmp_path / "d")])
    assert res.exit_code == 2 and "--init-from" in res.output


def test_init_from_sets_the_model_shape_and_the_weights(hf_gpt2):
    path, _ = hf_gpt2
    spec = validate(from_preset("tiny", {"init_from": str(path)}))
    assert (spec.model.layers, spec.model.d_model, spec.model.heads, spec.model.vocab) == (2, 32, 4, 300)
    assert spec.train.seq == min(from_preset("tiny").train.seq, 24)
    w = initial_weights(spec)
    assert np.array_equal(w["wte.weight"], load_hf(path)[1]["wte.weight"])
    with pytest.raises(SpecError, match="--layers 3 contradicts --init-from"):
        from_preset("tiny", {"init_from": str(path), "layers": 3})
    assert from_preset("tiny", {"init_from": str(path), "layers": 2}).model.layers == 2  # agreeing is fine


def test_compare_run_starts_from_the_checkpoint(tmp_path):
    """A compare run with --init-from: its first loss is transformers' loss of that checkpoint on batch 1."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from twinbench.data.text import batches, load_tokens

    torch.manual_seed(1)
    model = GPT2LMHeadModel(GPT2Config(**{**GPT_CFG, "vocab_size": 256})).eval()
    ckpt = tmp_path / "ckpt"
    model.save_pretrained(ckpt, safe_serialization=True)
    res = CliRunner().invoke(app, ["compare", "--preset", "tiny", "--init-from", str(ckpt), "--framework", "torch",
                                   "--strategies", "eager", "--steps", "2", "--warmup", "1",
                                   "--out", str(tmp_path / "run"), "--json", str(tmp_path / "r.json"),
                                   "--save-weights", str(tmp_path / "w")])
    assert res.exit_code == 0, res.output
    record = json.loads((tmp_path / "r.json").read_text())[0]
    assert record["status"] == "ok" and record["d_model"] == 32 and record["seq"] == 24
    spec = validate(from_preset("tiny", {"init_from": str(ckpt)}))
    x, y = next(batches(load_tokens("", spec.train.seq, spec.train.seed), spec.train.batch, spec.train.seq,
                        spec.train.seed))
    logits = torch.from_numpy(hf_logits(model, x))
    ref = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), torch.from_numpy(y).long().reshape(-1))
    assert record["loss_first"] == pytest.approx(float(ref), rel=1e-5)

    # the trained weights were saved; export --from writes them as a checkpoint transformers loads
    from twinbench.models.weights import load

    trained = load(record["weights_path"])
    assert not np.array_equal(trained["wte.weight"], load_hf(ckpt)[1]["wte.weight"])  # two AdamW steps moved it
    res = CliRunner().invoke(app, ["export", "--from", str(tmp_path / "run"), "--out", str(tmp_path / "hf")])
    assert res.exit_code == 0, res.output
    cfg, exported = load_hf(tmp_path / "hf")
    assert cfg.d_model == 32 and all(np.array_equal(exported[k], trained[k]) for k in trained)
    assert GPT2LMHeadModel.from_pretrained(tmp_path / "hf").transformer.wte.weight.shape == (256, 32)
    res = CliRunner().invoke(app, ["export", "--from", str(tmp_path / "run"), "--run", "jax/jit",
                                   "--out", str(tmp_path / "hf2")])
    assert res.exit_code == 2 and "no successful run jax/jit saved its weights" in res.output


def _write_config(path, **cfg):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(cfg))
    return path


@pytest.mark.parametrize(("config", "message"), [
    ({"model_type": "mistral", "hidden_size": 8}, "model_type .mistral. is not supported; allowed: gpt2, bert, llama"),
    ({**GPT_CFG, "model_type": "gpt2", "activation_function": "relu"}, "activation_function 'relu'"),
    ({**GPT_CFG, "model_type": "gpt2", "layer_norm_epsilon": 1e-6}, "layer_norm_epsilon 1e-06"),
    ({"model_type": "gpt2", "n_embd": 32}, "lacks a valid GPT-2 field"),
])
def test_unsupported_configs_are_one_line_errors(tmp_path, config, message):
    with pytest.raises(SpecError, match=message) as e:
        load_hf(_write_config(tmp_path / "c", **config))
    assert "\n" not in str(e.value)


def test_missing_files_are_one_line_errors(hf_gpt2, tmp_path):
    with pytest.raises(SpecError, match="no such directory"):
        load_hf(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SpecError, match=r"no config\.json"):
        load_hf(tmp_path / "empty")
    d = _write_config(tmp_path / "nobin", **{**GPT_CFG, "model_type": "gpt2"})
    (d / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(SpecError, match=r"no model\.safetensors there \(found pytorch_model\.bin"):
        load_hf(d)
    (d / "model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(SpecError, match=r"cannot read model\.safetensors"):
        load_hf(d)
    small = _write_config(tmp_path / "v", **{**GPT_CFG, "model_type": "gpt2", "vocab_size": 100})
    with pytest.raises(SpecError, match="vocab_size 100 cannot hold the 256 byte-level token ids"):
        from_preset("tiny", {"init_from": str(small)})
    res = CliRunner().invoke(app, ["compare", "--preset", "tiny", "--init-from", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "--init-from" in res.output and "Traceback" not in res.output


# ----------------------------------------------------------------------------------------------- BERT
BERT_CFG = dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=48, vocab_size=300,
                max_position_embeddings=16, num_labels=3)


@pytest.fixture(scope="module")
def hf_bert(tmp_path_factory):
    """A random BertForSequenceClassification (3 labels) with O(1) logits, saved with safetensors."""
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(**BERT_CFG)).eval()
    with torch.no_grad():  # larger head weights than the 0.02 init, so the logits are not all ~0
        model.classifier.weight.normal_(0.0, 1.0)
        model.bert.pooler.dense.weight.normal_(0.0, 0.5)
    path = tmp_path_factory.mktemp("bert")
    model.save_pretrained(path, safe_serialization=True)
    return path, model


def bert_inputs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ids, segment ids (a sentence pair) and a padding mask with two padded rows."""
    x = np.random.default_rng(2).integers(1, 300, size=(3, 16))
    types = np.broadcast_to((np.arange(16) >= 9).astype(np.int64), (3, 16)).copy()
    mask = np.ones((3, 16), np.int64)
    mask[1, 11:], mask[2, 5:] = 0, 0
    return x, types, mask


def bert_twin_logits(cfg: ModelConfig, weights: dict, inputs: tuple) -> tuple[np.ndarray, np.ndarray]:
    from twinbench.models.bert import model_jax as bert_jax
    from twinbench.models.bert import model_torch as bert_torch

    tm = bert_torch.BERT(cfg)
    canonical_to_torch(tm, weights)
    with torch.no_grad():
        lt = tm.eval()(*(torch.from_numpy(a) for a in inputs)).numpy()
    jm = bert_jax.BERT(cfg, nnx.Rngs(0))
    canonical_to_jax(jm, weights)
    lj = nnx.jit(lambda m, *a: m(*a))(jm, *(jnp.asarray(a, jnp.int32) for a in inputs))
    return lt, np.asarray(lj)


def bert_hf_logits(model, inputs: tuple) -> np.ndarray:
    x, types, mask = (torch.from_numpy(a) for a in inputs)
    with torch.no_grad():
        return model(x, token_type_ids=types, attention_mask=mask).logits.numpy()


def test_bert_checkpoint_logits_match_transformers_in_both_twins(hf_bert):
    path, model = hf_bert
    cfg, weights = load_hf(path)
    assert (cfg.family, cfg.layers, cfg.d_model, cfg.heads, cfg.d_ff, cfg.vocab, cfg.context, cfg.num_labels) == \
        ("bert", 2, 32, 4, 48, 300, 16, 3)
    inputs = bert_inputs()
    ref = bert_hf_logits(model, inputs)
    lt, lj = bert_twin_logits(cfg, weights, inputs)
    assert ref.shape == (3, 3) and np.abs(ref).max() > 0.1
    assert np.abs(lt - ref).max() <= TOL
    assert np.abs(lj - ref).max() <= TOL


def test_bert_encoder_only_and_tf_style_names_load(hf_bert, tmp_path):
    """A BertModel-style file (no ``bert.`` prefix, no classifier), TF-converted LayerNorm ``gamma``/``beta``,
    the ``position_ids`` buffer and pre-training ``cls.*`` heads: encoder weights load, the classifier is
    freshly initialised."""
    path, _ = hf_bert
    _, weights = load_hf(path)
    tensors = {}
    for k, v in load_file(str(path / "model.safetensors")).items():
        if k.startswith("classifier."):
            continue
        k = k.removeprefix("bert.")
        if "LayerNorm" in k:
            k = k.replace(".weight", ".gamma").replace(".bias", ".beta")
        tensors[k] = v
    tensors["embeddings.position_ids"] = np.arange(16, dtype=np.int64)[None]
    tensors["cls.predictions.bias"] = np.zeros(300, np.float32)
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    (tmp_path / "config.json").write_text((path / "config.json").read_text())
    _, enc = load_hf(tmp_path)
    assert set(enc) == set(weights)
    assert all(np.array_equal(enc[k], weights[k]) for k in weights if not k.startswith("classifier."))
    assert enc["classifier.weight"].shape == (32, 3) and not np.array_equal(enc["classifier.weight"],
                                                                           weights["classifier.weight"])


def test_bert_export_loads_in_transformers_and_round_trips(hf_bert, tmp_path):
    from transformers import BertForSequenceClassification

    path, _ = hf_bert
    cfg, weights = load_hf(path)
    save_hf(cfg, weights, tmp_path)
    model = BertForSequenceClassification.from_pretrained(tmp_path).eval()
    inputs = bert_inputs()
    lt, _ = bert_twin_logits(cfg, weights, inputs)
    assert np.abs(bert_hf_logits(model, inputs) - lt).max() <= TOL
    cfg2, back = load_hf(tmp_path)
    assert cfg2 == cfg and all(np.array_equal(back[k], weights[k]) for k in weights)


def test_bert_init_from_sets_the_shape_and_task(hf_bert, tmp_path):
    path, _ = hf_bert
    big = tmp_path / "bert"
    big.mkdir()
    (big / "config.json").write_text(json.dumps({**json.loads((path / "config.json").read_text()),
                                                 "vocab_size": 400}))
    small = _write_config(tmp_path / "v", **{**BERT_CFG, "model_type": "bert", "vocab_size": 200})
    with pytest.raises(SpecError, match="vocab_size 200 cannot hold the 260 byte-level token ids"):
        from_preset("bert-tiny", {"init_from": str(small)})
    spec = from_preset("tiny", {"init_from": str(big)})  # a gpt preset: the checkpoint makes it bert/classify
    assert (spec.model.family, spec.train.task, spec.model.vocab, spec.model.num_labels) == ("bert", "classify", 400, 3)
    spec = from_preset("bert-tiny", {"init_from": str(big), "mask_impl": "mul"})
    assert (spec.model.layers, spec.model.d_model, spec.model.mask_impl, spec.train.seq) == (2, 32, "mul", 16)
    # what the worker starts from (the GPT end-to-end run above covers the worker's call of it)
    spec = validate(from_preset("bert-tiny", {"init_from": str(path)}))
    _, expected = load_hf(path)
    got = initial_weights(spec)
    assert set(got) == set(expected) and all(np.array_equal(got[k], expected[k]) for k in expected)


@pytest.mark.parametrize(("config", "message"), [
    ({**BERT_CFG, "model_type": "bert", "hidden_act": "relu"}, "hidden_act 'relu'"),
    ({**BERT_CFG, "model_type": "bert", "layer_norm_eps": 1e-5}, "layer_norm_eps 1e-05"),
    ({**BERT_CFG, "model_type": "bert", "type_vocab_size": 3}, "type_vocab_size=3"),
    ({**BERT_CFG, "model_type": "bert", "position_embedding_type": "relative_key"}, "position_embedding_type"),
])
def test_unsupported_bert_configs_are_one_line_errors(tmp_path, config, message):
    with pytest.raises(SpecError, match=message):
        load_hf(_write_config(tmp_path / "c", **config))
