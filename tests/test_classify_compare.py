"""`twinbench compare --preset bert-tiny --task classify` end to end: records carry the new fields, the table shows them."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from twinbench.cli import app


def test_compare_classify_fills_the_new_fields(tmp_path):
    out = tmp_path / "run"
    args = ["compare", "--preset", "bert-tiny", "--task", "classify", "--strategies",
            "torch:eager+dynamic+prefetch,jax:jit+bucket", "--layers", "1", "--d-model", "32", "--heads", "2",
            "--context", "64", "--seq", "64", "--batch", "4", "--steps", "4", "--warmup", "1", "--slow-input", "2",
            "--out", str(out), "--json", str(tmp_path / "r.json"), "--timeout", "300"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    records = {r["strategy"]: r for r in json.loads((tmp_path / "r.json").read_text())}
    assert set(records) == {"eager+dynamic+prefetch", "jit+bucket"}
    for r in records.values():
        assert r["status"] == "ok", r.get("error")
        assert r["task"] == "classify" and 0 < r["pad_pct"] < 100 and r["real_tokens_per_s"] > 0
        assert r["input_wait_ms"] is not None and r["input_stall_pct"] is not None
        assert 0 <= r["accuracy_first"] <= 1 and 0 <= r["accuracy_last"] <= 1
    assert records["jit+bucket"]["compiles_in_loop"] <= records["jit+bucket"]["distinct_lengths"]
    assert records["eager+dynamic+prefetch"]["compiles_in_loop"] == 0
    assert records["eager+dynamic+prefetch"]["pad_pct"] < records["jit+bucket"]["pad_pct"]
    summary = (out / "summary.md").read_text()
    for header in ("pad %", "real tok/s", "input stall %", "acc first→last"):
        assert header in summary
