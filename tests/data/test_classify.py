"""The classification task: tokens, padding policies, the skewed lengths, the JSONL reader and its errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from twinbench.data import classify
from twinbench.data.classify import CLS, PAD, SEP, Example, batch_length, buckets, collate, encode, read_jsonl
from twinbench.spec import SpecError


def test_single_and_pair_encoding():
    ids, types = encode(Example("ab", None, 0), 16)
    assert ids.tolist() == [CLS, ord("a") + 4, ord("b") + 4, SEP] and types.tolist() == [0] * 4
    ids, types = encode(Example("ab", "c", 1), 16)
    assert ids.tolist() == [CLS, ord("a") + 4, ord("b") + 4, SEP, ord("c") + 4, SEP]
    assert types.tolist() == [0, 0, 0, 0, 1, 1]


def test_truncation_cuts_the_longer_text_first():
    ids, types = encode(Example("x" * 100, "y" * 5, 0), 32)
    assert len(ids) == 32 and ids[-1] == SEP
    assert int(types.sum()) == 6  # "yyyyy" and its [SEP] kept whole
    assert len(encode(Example("z" * 500, None, 0), 32)[0]) == 32


def test_length_policies():
    assert buckets(128) == (16, 32, 64, 128)
    assert batch_length(20, "pad-max", 128) == 128
    assert batch_length(20, "bucket", 128) == 32 and batch_length(64, "bucket", 128) == 64
    assert batch_length(65, "bucket", 128) == 128
    assert batch_length(20, "dynamic", 128) == 20
    exs = [Example("hello", None, 0), Example("a longer text here", "and a pair", 1)]
    outs = {p: collate(exs, 128, p) for p in ("pad-max", "bucket", "dynamic")}
    for p, ((ids, _types, mask), labels) in outs.items():
        assert ids.shape[1] == {"pad-max": 128, "bucket": 32, "dynamic": 31}[p]
        assert labels.tolist() == [0, 1]
        assert (ids[mask == 0] == PAD).all() and mask.sum() == 7 + 31  # [CLS] hello [SEP]; [CLS] 18 [SEP] 10 [SEP]
        # the same tokens whatever the padding
        np.testing.assert_array_equal(ids[:, :31], outs["dynamic"][0][0])


def test_embedded_task_is_skewed_deterministic_and_balanced():
    exs = classify.synthetic_task(128, 2000, seed=5)
    assert exs == classify.synthetic_task(128, 2000, seed=5)
    lengths = np.array([len(encode(e, 128)[0]) for e in exs])
    assert np.median(lengths) < 128 / 3  # most are short
    assert lengths.max() == 128  # the long tail reaches the context
    assert np.mean(lengths) < 0.4 * 128  # pad-max wastes most of each batch
    pairs = [e for e in exs if e.text_pair is not None]
    assert 0.25 < len(pairs) / len(exs) < 0.55
    assert 0.4 < np.mean([e.label for e in exs]) < 0.6


def _write(tmp_path, lines):
    p = tmp_path / "d.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_jsonl_reader_accepts_pairs_and_string_labels(tmp_path):
    p = _write(tmp_path, [json.dumps({"text": "good", "label": "pos"}), "",
                          json.dumps({"text": "bad", "text_pair": "really", "label": "neg"})])
    exs = read_jsonl(p, 2)
    assert exs == [Example("good", None, 1), Example("bad", "really", 0)]


@pytest.mark.parametrize("line, message", [
    ("{not json", "line 2: not valid JSON"),
    ("[1, 2]", "line 2: expected a JSON object"),
    ('{"label": 1}', "line 2: 'text' must be a non-empty string"),
    ('{"text": "x", "text_pair": 3, "label": 1}', "line 2: 'text_pair' must be a string"),
    ('{"text": "x"}', "line 2: missing 'label'"),
    ('{"text": "x", "label": 1.5}', "line 2: 'label' must be an integer or a string"),
    ('{"text": "x", "label": 7}', "line 2: label 7 do(es) not fit --num-labels 2"),
    ('{"text": "x", "label": "pos"}', "line 2: labels mix integers and strings"),
])
def test_jsonl_errors_name_the_line(tmp_path, line, message):
    p = _write(tmp_path, [json.dumps({"text": "ok", "label": 0}), line])
    with pytest.raises(SpecError) as e:
        read_jsonl(p, 2)
    assert message in str(e.value) and "\n" not in str(e.value)
    assert str(e.value).startswith(f"--data {p} line 2")


def test_jsonl_missing_file(tmp_path):
    with pytest.raises(SpecError, match="no such file"):
        read_jsonl(tmp_path / "nope.jsonl", 2)


def test_compare_rejects_a_malformed_file_with_one_line(tmp_path):
    from typer.testing import CliRunner

    from twinbench.cli import app

    p = _write(tmp_path, [json.dumps({"text": "ok", "label": 0}), '{"text": "x"}'])
    res = CliRunner().invoke(app, ["compare", "--preset", "bert-tiny", "--task", "classify", "--data", str(p),
                                   "--strategies", "eager", "--out", str(tmp_path / "out")])
    assert res.exit_code == 2
    assert "line 2: missing 'label'" in res.output and "Traceback" not in res.output
