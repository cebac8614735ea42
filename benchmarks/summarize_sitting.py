"""Markdown tables of an idle sitting (benchmarks/idle_sitting.sh OUT): per run, the median over the repeats of
each repeat's median step time, with the range of the repeats, and the fields that must not change.

    .venv/bin/python benchmarks/summarize_sitting.py OUT
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def records(folder: Path) -> list[dict]:
    f = folder / "results.jsonl"
    return [json.loads(line) for line in f.read_text().splitlines() if line.strip()] if f.exists() else []


def table(out: Path, prefixes: list[str], fields: list[str]) -> None:
    rows: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for prefix in prefixes:
        for d in sorted(out.glob(f"{prefix}-[0-9]*")):
            if d.is_dir():
                for r in records(d):
                    rows[(prefix, f"{r['framework']}/{r['strategy']}")].append(r)
    print("| tree | run | n | " + " | ".join(fields) + " |")
    print("|---|---|---|" + "---|" * len(fields))
    for (prefix, run), rs in rows.items():
        ok = [r for r in rs if r.get("status") == "ok"]
        cells = []
        for f in fields:
            vals = [r.get(f) for r in ok if isinstance(r.get(f), (int, float))]
            if not vals:
                cells.append("—")
            elif f in ("loss_last", "flops_per_token", "compiles_total"):
                cells.append(", ".join(sorted({f"{v:.6g}" for v in vals})))
            else:
                cells.append(f"{statistics.median(vals):.3g} ({min(vals):.3g}-{max(vals):.3g})")
        print(f"| {prefix} | {run} | {len(ok)}/{len(rs)} | " + " | ".join(cells) + " |")
    print()


def main() -> None:
    out = Path(sys.argv[1])
    print("## make demo's compare: before (old) / after (new) / JAX with XLA's own CPU flags (xladef)\n")
    table(out, ["demo-old", "demo-new", "xladef"],
          ["step_ms", "compile_s", "mfu", "peak_mem_bytes", "loss_last", "flops_per_token", "compiles_total"])
    print("## input stall, bert-tiny, --slow-input 20: thread pool (old) / Grain (new)\n")
    table(out, ["stall-old", "stall-new"], ["input_wait_ms", "input_stall_pct", "step_ms", "loss_last"])
    loads = [r.get("load_avg_1m_external") for d in out.glob("*-[0-9]") for r in records(d)]
    loads = [x for x in loads if isinstance(x, (int, float))]
    if loads:
        print(f"load_avg_1m_external over the new runs: {min(loads):.2f}-{max(loads):.2f}\n")


if __name__ == "__main__":
    main()
