"""The "Measured here" table of docs/claims.md from the verdicts of a claims run (``--json FILE`` or
``RESULTS_DIR/claims.json``): one row per claim with its verdict, repeats and finding, and the conditions
(load average per core of its records, versions) under it.

    .venv/bin/python benchmarks/claims_table.py runs/claims-quick
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from twinbench.record import read_jsonl


def main(path: Path) -> None:
    directory = path if path.is_dir() else path.parent
    results = json.loads((path / "claims.json" if path.is_dir() else path).read_text())
    records = read_jsonl(directory / "results.jsonl")
    for extra in sorted((directory / "repeats").glob("*/results.jsonl")):
        records += read_jsonl(extra)
    print("| claim | verdict | repeats | finding |")
    print("|---|---|---:|---|")
    for r in results:
        finding = r["finding"].replace("|", "/")
        print(f"| {r['claim']} | {r['verdict']} | {r.get('repeats', 1)} | {finding} |")
    loads = [x["load_avg_1m"] / x["cpu_count"] for x in records if x.get("load_avg_1m") is not None and x.get("cpu_count")]
    versions = next((x.get("versions") for x in records if x.get("versions")), {})
    print()
    print(f"{len(records)} runs; load average per core while they ran: "
          + (f"{min(loads):.2f}-{max(loads):.2f}" if loads else "not recorded")
          + "; " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items()) if k in ("jax", "torch", "flax")))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
