"""How much slower (or faster) is each framework's default strategy than torch eager here, over repeats?

    .venv/bin/python benchmarks/framework_gap.py OUT [--repeats 3] [-- COMPARE FLAGS]   # ~4 min per repeat, small
    .venv/bin/python benchmarks/framework_gap.py OUT -- --host-malloc system   # glibc's own allocator settings

Waits for a quiet machine, measures the matmul peaks again (`twinbench peak --remeasure`), then runs
`twinbench compare --repeats N` (make demo's compare, each configuration N times, interleaved, each a fresh
process) and prints, per run, the median over the repeats of each repeat's median step (with their range),
compile time, MFU and peak memory, and each run's step time against torch/eager's paired repeat by repeat.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

from sitting import cpu_info, median_range, records, wait_quiet

TB = str(Path(sys.executable).with_name("twinbench"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("extra", nargs="*", help="flags for twinbench compare (after --)")
    a, rest = p.parse_known_args()  # argparse gives ``extra`` nothing once ``out`` matched: the rest is compare's
    a.extra = [*a.extra, *(x for x in rest if x != "--")]
    wait_quiet()
    subprocess.run([TB, "peak", "--remeasure"], check=False)
    wait_quiet()
    subprocess.run([TB, "compare", "--repeats", str(a.repeats), "--out", str(a.out), *a.extra], check=True)
    recs = [r for r in records(a.out) if r.get("status") == "ok"]
    runs = list(dict.fromkeys(f"{r['framework']}/{r['strategy']}" for r in recs))
    by = {run: sorted((r for r in recs if f"{r['framework']}/{r['strategy']}" == run), key=lambda r: r["repeat"])
          for run in runs}
    base = {r["repeat"]: r["step_ms"] for r in by.get("torch/eager", [])}
    print(f"\nmachine: {cpu_info()['cpu']}, {cpu_info()['cores']} core(s); host allocator: "  # the gap differs per machine
          + ", ".join(sorted({str(r.get('glibc_tunables') or "glibc's own") for r in recs})))
    print(f"\n| run | step ms | vs torch/eager (paired) | compile s | MFU | peak mem MiB | page faults a step | "
          f"kernel share of CPU | loss last |\n|{'---|' * 9}")
    for run, rs in by.items():
        ratios = [r["step_ms"] / base[r["repeat"]] for r in rs if r["repeat"] in base]
        print(f"| {run} | {median_range([r['step_ms'] for r in rs])} | {median_range(ratios, '{:.2f}x')} | "
              f"{median_range([r['compile_s'] for r in rs], '{:.1f}')} | "
              f"{median_range([100 * (r['mfu'] or 0) for r in rs], '{:.0f}%')} | "
              f"{statistics.median(r['peak_mem_bytes'] for r in rs) / 2**20:.0f} | "
              f"{median_range([r.get('page_faults_per_step') or 0 for r in rs], '{:,.0f}')} | "
              f"{median_range([100 * (r.get('kernel_cpu_share') or 0) for r in rs], '{:.0f}%')} | "
              f"{', '.join(sorted({'%.6f' % r['loss_last'] for r in rs}))} |")  # noqa: UP031
    loads = [r.get("interference_cores") for r in recs if r.get("interference_cores") is not None]
    if loads:
        print(f"\nother processes during the timed steps: {min(loads):.2f}-{max(loads):.2f} core(s) busy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
