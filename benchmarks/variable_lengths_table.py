"""Markdown tables of the variable-length and mask benchmark runs (benchmarks/variable_lengths.sh, mask_variants.sh).

Usage: python benchmarks/variable_lengths_table.py OUTDIR   (the OUTDIR given to the scripts; default runs/bert-lengths)
"""

from __future__ import annotations

import sys
from pathlib import Path

from twinbench.record import read_jsonl


def _f(v: float | None, fmt: str) -> str:
    return "—" if v is None else format(v, fmt)


def lengths(records: list[dict]) -> list[str]:
    out = ["| run | compiles in loop | distinct lengths | compile s | total wall s (incl. compiles) | "
           "median step ms | pad % | real tokens/s | accuracy first→last |", "|" + "---|" * 9]
    for r in records:
        if r["status"] != "ok":
            out.append(f"| {r['framework']}/{r['strategy']} | failed: {r.get('error')} |" + " |" * 7)
            continue
        out.append(f"| {r['framework']}/{r['strategy']} | {r['compiles_in_loop']} | {r['distinct_lengths']} | "
                   f"{r['compile_s']:.1f} | {r['wall_s']:.1f} | {r['step_ms']:.0f} | {r['pad_pct']:.0f} | "
                   f"{r['real_tokens_per_s']:,.0f} | {r['accuracy_first']:.2f}→{r['accuracy_last']:.2f} |")
    return out


def inputs(records: list[dict]) -> list[str]:
    out = ["| run | input wait ms (median) | input stall % | median step ms | total wall s |", "|" + "---|" * 5]
    for r in records:
        if r["status"] == "ok":
            out.append(f"| {r['framework']}/{r['strategy']} | {r['input_wait_ms']:.2f} | "
                       f"{r['input_stall_pct']:.1f} | {r['step_ms']:.0f} | {r['wall_s']:.1f} |")
    return out


def masks(records: list[dict]) -> list[str]:
    out = ["| mask impl | run | median step ms (p10-p90) | loss last |", "|" + "---|" * 4]
    for r in records:
        if r["status"] == "ok":
            impl = r["spec"]["model"]["mask_impl"]
            out.append(f"| {impl} | {r['framework']}/{r['strategy']} | {r['step_ms']:.0f} "
                       f"({r['step_ms_p10']:.0f}-{r['step_ms_p90']:.0f}) | {r['loss_last']:.4f} |")
    return out


def main(root: Path) -> None:
    for name, fn in (("lengths", lengths), ("input", inputs), ("masks", masks)):
        path = root / name / "results.jsonl"
        if path.exists():
            print(f"### {name}\n")
            print("\n".join(fn(read_jsonl(path))) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/bert-lengths"))
