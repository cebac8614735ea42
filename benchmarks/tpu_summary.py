"""One page from a `benchmarks/tpu_check.sh OUTDIR` run: OUTDIR/tpu_check.json and OUTDIR/tpu_check.md.

Per run (every group's twinbench records, and the Hugging Face Flax rows of jax_twin_vs_hf_flax.py): step time,
tokens/s, MFU against the measured and the datasheet peak, the attention kernel, cold compile, peak memory and
where it comes from, status; then the conditions and each run's exit code. Reads only the files the check
wrote (data, never code).

    python benchmarks/tpu_summary.py OUTDIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

FIELDS = ("framework", "strategy", "preset", "batch", "seq", "status", "error", "device", "platform", "precision",
          "matmul_precision", "attention_impl", "attention_kernel", "step_ms", "step_ms_p10", "step_ms_p90",
          "tokens_per_s", "achieved_tflops", "peak_tflops", "mfu", "peak_tflops_datasheet", "mfu_datasheet",
          "compile_s", "first_step_s", "peak_mem_bytes", "peak_mem_source", "memory_breakdown", "versions",
          "loss_first", "loss_last", "n_params", "compile_cache", "compile_cache_hits", "compiles_total")


def _lines(path: Path) -> list[dict[str, Any]]:
    rows = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def runs(out: Path) -> list[dict[str, Any]]:
    """Every run of the check, in the order of its groups' folders: twinbench records and HF rows alike."""
    found = []
    for group in sorted(p for p in out.iterdir() if p.is_dir() and p.name != "traces"):
        for r in _lines(group / "results.jsonl"):
            if "which" in r:  # a jax_twin_vs_hf_flax.py child
                found.append({"group": group.name, "framework": "jax", "strategy": f"hf-flax ({r['which']})",
                              "status": "ok", "device": r.get("device"), "step_ms": r.get("step_ms"),
                              "compile_s": r.get("compile_s"), "versions": r.get("versions"), "loss_last": r.get("loss")})
            else:
                found.append({"group": group.name, **{k: r.get(k) for k in FIELDS}})
    return found


def _fmt(v: Any, spec: str = "") -> str:
    return "-" if v is None else format(v, spec)


def markdown(rows: list[dict[str, Any]], conditions: str, status: str) -> str:
    md = ["# TPU check", "", "```", conditions.strip(), "```", "",
          "| group | run | attention | step ms | tokens/s | TFLOP/s | MFU (measured peak) | MFU (datasheet) | "
          "compile s | peak mem GiB (source) | status |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        mem = r.get("peak_mem_bytes")
        mem_s = f"{mem / 2**30:.2f} ({r.get('peak_mem_source') or '-'})" if mem else "-"
        status_s = r["status"] if r["status"] == "ok" else f"{r['status']}: {(r.get('error') or '')[:80]}"
        warm = (f" (warm cache: {r.get('compile_cache_hits')} of {r.get('compiles_total')} programs from it)"
                if r.get("compile_cache") == "warm" else "")
        md.append(f"| {r['group']} | {r['framework']}/{r['strategy']}{warm} | {r.get('attention_kernel') or '-'} | "
                  f"{_fmt(r.get('step_ms'), '.1f')} | {_fmt(r.get('tokens_per_s'), ',.0f')} | "
                  f"{_fmt(r.get('achieved_tflops'), '.1f')} | {_fmt(r.get('mfu'), '.1%')} | "
                  f"{_fmt(r.get('mfu_datasheet'), '.1%')} | {_fmt(r.get('compile_s'), '.1f')} | {mem_s} | {status_s} |")
    md += ["", "Exit code of each run (a run that timed out has rc 124):", "", "```", status.strip(), "```", ""]
    return "\n".join(md)


def main() -> None:
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_dir():
        sys.exit("usage: python benchmarks/tpu_summary.py OUTDIR (a benchmarks/tpu_check.sh output folder)")
    out = Path(sys.argv[1])
    rows = runs(out)
    read = lambda name: (out / name).read_text() if (out / name).exists() else ""  # noqa: E731
    (out / "tpu_check.json").write_text(json.dumps({"conditions": read("conditions.txt"), "runs": rows,
                                                     "status": read("status.txt").splitlines()}, indent=1))
    (out / "tpu_check.md").write_text(markdown(rows, read("conditions.txt"), read("status.txt")))
    print(markdown(rows, read("conditions.txt"), read("status.txt")))


if __name__ == "__main__":
    main()
