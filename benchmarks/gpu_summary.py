"""One page from a `benchmarks/gpu_check.sh OUTDIR` run: OUTDIR/gpu_check.json and OUTDIR/gpu_check.md.

Per run: step time, tokens/s, MFU against the measured and the datasheet peak, the attention kernel, cold
compile, peak memory and its breakdown; then the explain gap's largest rows. Reads only the records and the
explain JSON the check wrote (data, never code).

    python benchmarks/gpu_summary.py OUTDIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

FIELDS = ("framework", "strategy", "status", "error", "device", "platform", "precision", "matmul_precision",
          "step_ms", "step_ms_p10", "step_ms_p90", "tokens_per_s", "achieved_tflops", "peak_tflops", "mfu",
          "peak_tflops_datasheet", "mfu_datasheet", "attention_kernel", "compile_s", "first_step_s",
          "peak_mem_bytes", "memory_breakdown", "versions", "loss_first", "loss_last", "attention_impl")


def _records(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return [r for r in data if isinstance(r, dict)] if isinstance(data, list) else []


def _fmt(v: Any, spec: str = "") -> str:
    return "-" if v is None else format(v, spec)


def summarize(out: Path) -> dict[str, Any]:
    runs = [{k: r.get(k) for k in FIELDS} for r in _records(out / "records.json")
            + _records(out / "cudnn" / "records.json")]
    conditions = (out / "conditions.txt").read_text() if (out / "conditions.txt").exists() else ""
    try:
        explain = json.loads((out / "explain.json").read_text())
    except (OSError, ValueError):
        explain = None
    gap = None
    if isinstance(explain, dict) and "rows" in explain:
        rows = sorted((r for r in explain["rows"] if r.get("level")), key=lambda r: -abs(r.get("diff_ms", 0.0)))
        gap = {"a": explain["a"]["run"], "b": explain["b"]["run"], "a_step_ms": explain["a"]["step_ms"],
               "b_step_ms": explain["b"]["step_ms"], "gap_ms": explain.get("gap_ms"), "summary": explain.get("summary"),
               "top_rows": rows[:8], "categorized": [explain["a"].get("categorized_share"),
                                                     explain["b"].get("categorized_share")]}
    return {"conditions": conditions, "runs": runs, "explain": gap}


def markdown(s: dict[str, Any]) -> str:
    lines = ["# GPU check", "", "```", s["conditions"].strip(), "```", "",
             "| run | status | step ms (p10-p90) | tokens/s | TFLOP/s | MFU measured | MFU datasheet | attention | "
             "compile s | peak mem GiB |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in s["runs"]:
        name = f"{r['framework']}/{r['strategy']}" + (f" ({r['attention_impl']})" if r.get("attention_impl") else "")
        mem = None if r["peak_mem_bytes"] is None else r["peak_mem_bytes"] / 2**30
        lines.append(f"| {name} | {r['status']} | {_fmt(r['step_ms'], '.1f')} ({_fmt(r['step_ms_p10'], '.1f')}-"
                     f"{_fmt(r['step_ms_p90'], '.1f')}) | {_fmt(r['tokens_per_s'], ',.0f')} | "
                     f"{_fmt(r['achieved_tflops'], '.1f')} | {_fmt(r['mfu'], '.0%')} of {_fmt(r['peak_tflops'], '.3g')} | "
                     f"{_fmt(r['mfu_datasheet'], '.0%')} of {_fmt(r['peak_tflops_datasheet'], '.3g')} | "
                     f"{r['attention_kernel'] or '-'} | {_fmt(r['compile_s'], '.1f')} | {_fmt(mem, '.2f')} |")
        if r["error"]:
            lines.append(f"|  error: {str(r['error']).splitlines()[0][:200]} |||||||||")
    g = s["explain"]
    if g:
        lines += ["", f"## explain: {g['b']} - {g['a']} = {_fmt(g['gap_ms'], '+.1f')} ms per step "
                      f"({g['a_step_ms']:.1f} vs {g['b_step_ms']:.1f} ms)", "", "| row | A ms | B ms | B-A ms |",
                  "|---|---|---|---|"]
        lines += [f"| {r['row']} | {r['a_ms']:.2f} | {r['b_ms']:.2f} | {r['diff_ms']:+.2f} |" for r in g["top_rows"]]
        lines += ["", str(g["summary"])]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python benchmarks/gpu_summary.py OUTDIR", file=sys.stderr)
        return 2
    out = Path(argv[0])
    s = summarize(out)
    (out / "gpu_check.json").write_text(json.dumps(s, indent=1, default=str))
    (out / "gpu_check.md").write_text(markdown(s))
    print(markdown(s))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
