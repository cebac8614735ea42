"""The table of benchmarks/input_stall.sh: input wait, stall share and step time per run, every round and median.

Reads only results.jsonl (plain JSON), so it summarises runs made by any twinbench version.
Usage: python benchmarks/input_stall_table.py OUTDIR   (the OUTDIR given to input_stall.sh)
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from twinbench.record import read_jsonl  # every line in the flat layout, whatever its version


def _cell(values: list[float | None], fmt: str) -> str:
    """``median (round 1 / round 2 / ...)``; a run that failed in a round shows ``—`` there."""
    got = [v for v in values if v is not None]
    each = " / ".join("—" if v is None else format(v, fmt) for v in values)
    return f"{format(statistics.median(got), fmt)} ({each})" if got else "—"


def table(root: Path, model: str) -> list[str]:
    rounds = sorted(root.glob(f"r*/{model}/results.jsonl"), key=lambda p: int(p.parent.parent.name[1:]))
    runs: dict[str, list[dict | None]] = {}
    for n, path in enumerate(rounds):
        for r in read_jsonl(path):
            runs.setdefault(f"{r['framework']}/{r['strategy']}", [None] * len(rounds))[n] = r
    out = [f"### {model}: {len(rounds)} rounds, --slow-input 20 ms; each cell: median of the rounds (each round)\n",
           "| run | input wait ms (median step) | input stall % | step ms (median) |", "|---|---|---|---|"]
    for name, recs in runs.items():
        ok = [r if r and r.get("status") == "ok" else None for r in recs]
        fields = [[r and r.get(f) for r in ok] for f in ("input_wait_ms", "input_stall_pct", "step_ms")]
        out.append(f"| {name} | {_cell(fields[0], '.2f')} | {_cell(fields[1], '.1f')} | {_cell(fields[2], '.0f')} |")
    return out


def main(root: Path) -> None:
    for model in ("bert", "gpt"):
        print("\n".join(table(root, model)) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/input-stall"))
