"""A checkpoint whose tensors do not fit its config.json is refused from the safetensors header alone, in one
line naming the tensor, the shape expected and the shape found, before any framework starts (``compare
--init-from``, ``score``): docs/bad-input.md, promise 6. No run starts here (``runner`` is replaced)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file
from typer.testing import CliRunner

from tests.test_hostile import one_line_error
from twinbench import runner
from twinbench.cli import app
from twinbench.config import SpecError
from twinbench.models.hf import check_weights

CLI = CliRunner()


def _checkpoint(tmp_path: Path, preset: str) -> Path:
    ck = tmp_path / preset
    assert CLI.invoke(app, ["export", "--preset", preset, "--out", str(ck)]).exit_code == 0
    return ck


def _rewrite(ck: Path, change) -> None:
    """``model.safetensors`` rewritten with ``change(tensors)`` applied (a whole, valid file of other tensors)."""
    st = ck / "model.safetensors"
    tensors = dict(load_file(str(st)))
    change(tensors)
    save_file(tensors, str(st), metadata={"format": "pt"})



@pytest.fixture
def no_runs(monkeypatch):
    calls = []
    monkeypatch.setattr(runner, "run_one", lambda spec, *a, **k: calls.append(spec) or {})
    monkeypatch.setattr(runner, "run_module", lambda *a, **k: calls.append(a) or (1, "a framework started"))
    return calls


# (preset, the tensor made narrower, its shape in the checkpoint: [out, in] where the family transposes)
NARROWED = [("tiny", "transformer.h.1.mlp.c_fc.weight", [64, 256]),
            ("bert-tiny", "bert.encoder.layer.0.intermediate.dense.weight", None),
            ("llama-tiny", "model.layers.0.self_attn.k_proj.weight", None)]


@pytest.mark.parametrize(("preset", "name", "shape"), NARROWED)
def test_a_tensor_of_another_shape_is_named_with_both_shapes_before_any_run(tmp_path, no_runs, preset, name, shape):
    ck = _checkpoint(tmp_path, preset)
    found = {}

    def narrow(t: dict) -> None:
        assert shape is None or list(t[name].shape) == shape  # the layout the test assumes
        found["was"] = list(t[name].shape)
        t[name] = np.ascontiguousarray(t[name][:, :-1])

    _rewrite(ck, narrow)
    was, now = found["was"], [found["was"][0], found["was"][1] - 1]
    line = one_line_error(CLI.invoke(app, ["compare", "--init-from", str(ck), "--strategies", "torch:eager,jax:jit",
                                      "--out", str(tmp_path / "o")]))
    assert f"tensor {name} has shape {now}" in line and f"needs {was}" in line, line
    assert not no_runs and not (tmp_path / "o").exists()


def test_score_refuses_a_checkpoint_of_another_shape_before_either_framework_starts(tmp_path, no_runs):
    ck = _checkpoint(tmp_path, "tiny")
    _rewrite(ck, lambda t: t.update({"transformer.wpe.weight": np.zeros((31, 64), np.float32)}))
    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 40)
    line = one_line_error(CLI.invoke(app, ["score", "--init-from", str(ck), "--data", str(text)]))
    assert "tensor transformer.wpe.weight has shape [31, 64]" in line and "needs [32, 64]" in line, line
    assert not no_runs


def test_missing_extra_and_non_float_tensors_are_named(tmp_path):
    ck = _checkpoint(tmp_path, "tiny")
    original = dict(load_file(str(ck / "model.safetensors")))
    cases = [
        (lambda t: t.pop("transformer.ln_f.bias"), r"no tensor for the weight ln_f\.bias"),
        (lambda t: t.update({"transformer.h.2.ln_1.weight": np.ones(64, np.float32)}),
         "tensor transformer.h.2.ln_1.weight is not a weight of the gpt model"),
        (lambda t: t.update({"transformer.ln_f.bias": np.zeros(64, np.int32)}),
         "tensor transformer.ln_f.bias is of type I32"),
    ]
    for change, says in cases:
        _rewrite(ck, lambda t, change=change: (t.clear(), t.update(original), change(t)))
        with pytest.raises(SpecError, match=says):
            check_weights(ck)
    _rewrite(ck, lambda t: (t.clear(), t.update(original)))
    check_weights(ck)
    st = ck / "model.safetensors"
    raw = st.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    start, end = header["transformer.ln_f.bias"]["data_offsets"]
    header["transformer.ln_f.bias"]["data_offsets"] = [start, end - 4]  # one element short, the file still whole
    text = json.dumps(header, separators=(",", ":")).encode()
    assert len(text) <= n  # the header keeps its size: the data stays where it was
    text = text.ljust(n)
    st.write_bytes(raw[:8] + text + raw[8 + n:])
    with pytest.raises(SpecError, match=r"data_offsets .* do not hold a F32 tensor of shape"):
        check_weights(ck)


def test_what_the_loader_accepts_the_header_check_accepts(tmp_path):
    """A tied GPT-2 head, causal-mask buffers and BERT without its pooler and classifier (both made fresh)."""
    gpt = _checkpoint(tmp_path, "tiny")
    _rewrite(gpt, lambda t: t.update({"lm_head.weight": t["transformer.wte.weight"],
                                      "transformer.h.0.attn.bias": np.ones((1, 1, 32, 32), np.float32)}))
    check_weights(gpt)
    bert = _checkpoint(tmp_path, "bert-tiny")
    _rewrite(bert, lambda t: [t.pop(k) for k in list(t) if k.startswith(("bert.pooler.", "classifier."))])
    check_weights(bert)
    from twinbench.models.hf import load_hf

    load_hf(bert)  # and the loader agrees
    _rewrite(bert, lambda t: t.pop("bert.embeddings.LayerNorm.bias"))
    with pytest.raises(SpecError, match=r"embeddings\.LayerNorm\.bias"):
        check_weights(bert)


def test_a_header_over_what_safetensors_allows_is_refused_unread(tmp_path):
    ck = _checkpoint(tmp_path, "tiny")
    with open(ck / "model.safetensors", "wb") as f:
        f.write((2**31).to_bytes(8, "little"))
        f.truncate(2**31 + 16)  # sparse: a 2 GB "header" that takes no disk
    with pytest.raises(SpecError, match="over the 100000000 a safetensors header may hold"):
        check_weights(ck)
    json.loads((ck / "config.json").read_text())  # the config stays as export wrote it


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory) -> Path:
    """One exported tiny checkpoint for the module; each test breaks a copy of it."""
    return _checkpoint(tmp_path_factory.mktemp("ck"), "tiny")


def _copy(src: Path, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(src, tmp_path / "tiny"))


def _raw_header(ck: Path) -> tuple[dict, bytes]:
    raw = (ck / "model.safetensors").read_bytes()
    n = int.from_bytes(raw[:8], "little")
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def _write_raw(ck: Path, header: dict | bytes, data: bytes) -> None:
    blob = header if isinstance(header, bytes) else json.dumps(header).encode()
    (ck / "model.safetensors").write_bytes(len(blob).to_bytes(8, "little") + blob + data)


@pytest.mark.parametrize("break_it, says", [
    # a tensor the model's mapping ignores, pointing past the end of the file (the mapping skipped it)
    (lambda h: h.update(extra={"dtype": "F32", "shape": [4], "data_offsets": [10**12, 10**12 + 16]}),
     "truncated: tensor extra"),
    # two tensors sharing their bytes
    (lambda h: h.update(extra={"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}), "overlap"),
    (lambda h: h.update(__metadata__=["format", "pt"]), "__metadata__"),
    (lambda h: h.update(extra={"dtype": "Q4", "shape": [4], "data_offsets": [0, 16]}), "not a safetensors type"),
])
def test_every_tensor_of_the_header_is_checked_not_only_those_the_model_maps(tmp_path, no_runs, break_it, says,
                                                                           tiny_checkpoint):
    ck = _copy(tiny_checkpoint, tmp_path)
    header, data = _raw_header(ck)
    break_it(header)
    _write_raw(ck, header, data)
    with pytest.raises(SpecError, match=says):
        check_weights(ck)
    line = one_line_error(CLI.invoke(app, ["compare", "--init-from", str(ck), "--framework", "torch",
                                           "--strategies", "eager"]))
    assert says.split(":")[0] in line
    assert not no_runs


@pytest.mark.parametrize("where", ["header", "config.json", "index"])
def test_json_nested_100000_deep_is_one_line(tmp_path, no_runs, where, tiny_checkpoint):
    ck = _copy(tiny_checkpoint, tmp_path)
    deep = "[" * 100_000 + "]" * 100_000
    if where == "header":
        _, data = _raw_header(ck)
        _write_raw(ck, deep.encode(), data)
    elif where == "config.json":
        (ck / "config.json").write_text(deep)
    else:
        (ck / "model.safetensors").unlink()
        (ck / "model.safetensors.index.json").write_text(deep)
    line = one_line_error(CLI.invoke(app, ["compare", "--init-from", str(ck), "--framework", "torch",
                                           "--strategies", "eager"]))
    assert str(ck) in line
    assert not no_runs


@pytest.mark.parametrize("value", [1e308, 10**400, float("nan")])
def test_a_config_size_no_model_has_is_one_short_line(tmp_path, no_runs, value, tiny_checkpoint):
    ck = _copy(tiny_checkpoint, tmp_path)
    cfg = json.loads((ck / "config.json").read_text())
    cfg["n_embd"] = value
    (ck / "config.json").write_text(json.dumps(cfg))
    line = one_line_error(CLI.invoke(app, ["compare", "--init-from", str(ck), "--framework", "torch",
                                           "--strategies", "eager"]))
    assert "n_embd" in line and len(line) < 300, line
    assert not no_runs
