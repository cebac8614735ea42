"""benchmarks/check_summary.py: one page from a GPU check's OUTDIR and from a TPU check's, on written-out folders
(what gpu_check.sh and tpu_check.sh leave), in process."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("check_summary", ROOT / "benchmarks" / "check_summary.py")
check_summary = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_summary)


def record(framework: str, strategy: str, **over) -> dict:
    return {"framework": framework, "strategy": strategy, "status": "ok", "error": None, "platform": "gpu",
            "step_ms": 100.0, "step_ms_p10": 98.0, "step_ms_p90": 103.0, "tokens_per_s": 81920.0, "mfu": 0.41,
            "peak_tflops": 700.0, "mfu_datasheet": 0.3, "peak_tflops_datasheet": 989.4, "compile_s": 20.0,
            "peak_mem_bytes": 3 * 2**30, "attention_kernel": "sdpa-flash", **over}


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_gpu_check_folder(tmp_path, capsys):
    (tmp_path / "conditions.txt").write_text("# gpu_check conditions\ngpu: NVIDIA H200\n")
    write_jsonl(tmp_path / "results.jsonl", [record("torch", "eager+bf16"), record("jax", "jit+bf16")])
    write_jsonl(tmp_path / "cudnn" / "results.jsonl", [record("jax", "jit+bf16", attention_impl="cudnn",
                                                              status="failed", error="out of memory\nmore")])
    write_jsonl(tmp_path / "explain" / "results.jsonl", [record("torch", "compile+bf16")])  # explain's re-runs
    (tmp_path / "explain.json").write_text(json.dumps({
        "a": {"run": "torch/compile+bf16", "step_ms": 90.0}, "b": {"run": "jax/jit+bf16", "step_ms": 100.0},
        "gap_ms": 10.0, "summary": "attention is most of it",
        "rows": [{"row": "attention", "level": 1, "a_ms": 20.0, "b_ms": 28.0, "diff_ms": 8.0},
                 {"row": "total", "level": 0, "a_ms": 90.0, "b_ms": 100.0, "diff_ms": 10.0}]}))
    assert check_summary.main([str(tmp_path)]) == 0
    page = (tmp_path / "gpu_check.md").read_text()
    assert page.startswith("# GPU check") and page == capsys.readouterr().out.removesuffix("\n")
    rows = [line for line in page.splitlines() if line.startswith("| -") or line.startswith("| cudnn")]
    assert [r.split(" | ")[1] for r in rows] == ["torch/eager+bf16", "jax/jit+bf16", "jax/jit+bf16 (cudnn)"]
    assert "100.0 (98.0-103.0)" in rows[0] and "41.0% of 700" in rows[0] and "failed: out of memory |" in rows[2]
    assert "## explain: jax/jit+bf16 - torch/compile+bf16 = +10.0 ms" in page and "| attention | 20.00 |" in page
    assert "| total |" not in page  # the total is the heading, not a row
    saved = json.loads((tmp_path / "gpu_check.json").read_text())
    assert len(saved["runs"]) == 3 and saved["explain"]["gap_ms"] == 10.0


def test_a_tpu_check_folder(tmp_path):
    (tmp_path / "conditions.txt").write_text("# tpu_check conditions\ndevice: TPU v5 lite x 1 (tpu)\n")
    (tmp_path / "status.txt").write_text("gpt-jax rc=0 12s\ngpt-hf rc=124 170s\n")
    write_jsonl(tmp_path / "gpt-jax" / "results.jsonl",
                [record("jax", "jit+bf16", platform="tpu", compile_cache="warm", compile_cache_hits=3,
                        compiles_total=4, peak_mem_source="compiled step memory_analysis()")])
    write_jsonl(tmp_path / "gpt-hf" / "results.jsonl", [{"which": "FlaxGPT2", "step_ms": 120.0, "loss": 5.5}])
    (tmp_path / "traces").mkdir()
    assert check_summary.main([str(tmp_path)]) == 0
    page = (tmp_path / "tpu_check.md").read_text()
    assert page.startswith("# TPU check")
    assert "| gpt-jax | jax/jit+bf16 (warm cache: 3 of 4 programs from it) |" in page
    assert "3.00 (compiled step memory_analysis())" in page
    assert "| gpt-hf | jax/hf-flax (FlaxGPT2) | - | 120.0 |" in page
    assert "gpt-hf rc=124 170s" in page and "## explain" not in page


def test_no_folder_is_a_usage_error(tmp_path, capsys):
    assert check_summary.main([str(tmp_path / "missing")]) == 2
    assert "usage: python benchmarks/check_summary.py OUTDIR" in capsys.readouterr().err
