"""Multi-device BERT fine-tuning: where data parallelism starts to pay (claim C12).

For each repeat and each global batch (8, 32, 128) it runs ``twinbench sweep --preset bert-tiny --over
devices=1,4 --strategies mesh-dp,ddp`` at that batch, so that each one-device run and its 4-device counterpart run
next to each other (the device order alternates between repeats, against drift of the shared machine), each a
fresh process. A repeat's records are gathered in ``OUT/repeat-K/results.jsonl`` and ``twinbench report`` writes
its report.html there (the "Where data parallelism pays" plot). Then it prints, per strategy and batch per
device, the speed-up of 4 devices over one device on the same global batch (report/scaling.py ``payoff``) as
the median and range of the repeats, and the largest relative loss difference against one device (fp32 parity).

    .venv/bin/python benchmarks/data_parallel_payoff.py --out runs/bert-dp [--repeats 3] [-- extra sweep flags]

The multi-device compare of every strategy at one size (all ok, losses equal to one device) is
``benchmarks/multidevice_overhead.py --preset bert-tiny --devices 4 --out runs/bert-multidevice --task classify``.
On a CPU the devices are simulated and share the cores: the speed-ups show the overhead of each parallel
formulation, not a gain of data parallelism (a ratio above 1 there says that 4 XLA devices or 4 torch ranks kept
the 2 cores busier than one process's intra-op threads did); run it on a multi-GPU machine for C12's answer.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from twinbench.record import read_jsonl, typed  # read_jsonl: each line flat, whatever its version
from twinbench.report.scaling import Row, payoff, pays_from

TWINBENCH = str(Path(sys.executable).with_name("twinbench"))


def sweep(out: Path, devices: str, batch: int, strategies: str, extra: list[str]) -> list[dict]:
    cmd = [TWINBENCH, "sweep", "--preset", "bert-tiny", "--over", f"devices={devices}", "--batch", str(batch),
           "--strategies", strategies, "--out", str(out), *extra]
    print("$", " ".join(["twinbench", *cmd[1:]]), flush=True)
    subprocess.run(cmd, check=False)
    path = out / "results.jsonl"
    return read_jsonl(path)


def repeat(out: Path, devices: list[str], batches: list[int], strategies: str, extra: list[str]) -> list[dict]:
    """One repeat: a sweep over the device counts at each global batch; every record, and the report, in out."""
    records = []
    for b in batches:
        records += sweep(out / f"batch-{b}", ",".join(devices), b, strategies, extra)
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    subprocess.run([TWINBENCH, "report", str(out)], check=False)
    return records


def loss_diff(records: list[dict]) -> dict[tuple, float]:
    """Largest relative loss difference of each multi-device run against the same strategy on one device."""
    one = {(r["framework"], r["strategy"], r["batch"]): r for r in records
           if r.get("status") == "ok" and r.get("device_count") == 1}
    out = {}
    for r in records:
        ref = one.get((r["framework"], r["strategy"], r["batch"]))
        if r.get("status") == "ok" and r.get("device_count", 1) > 1 and ref:
            out[(r["framework"], r["strategy"], r["device_count"], r["batch"] // r["device_count"])] = max(
                abs(x - y) / abs(y) for x, y in zip(r["losses"], ref["losses"], strict=True))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="1,4")
    ap.add_argument("--batch", default="8,32,128", help="global batches (per device: batch / devices)")
    ap.add_argument("--strategies", default="mesh-dp,ddp")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("runs/bert-dp"))
    args, extra = ap.parse_known_args()
    extra = [x for x in extra if x != "--"]
    speedups: dict[tuple, list[float]] = {}
    diffs: dict[tuple, float] = {}
    failed: list[str] = []
    devices = args.devices.split(",")
    batches = [int(b) for b in args.batch.split(",")]
    for k in range(1, args.repeats + 1):
        order = devices if k % 2 else devices[::-1]  # alternate which device count runs first
        records = repeat(args.out / f"repeat-{k}", order, batches, args.strategies, extra)
        failed += [f"repeat {k}: {r['framework']}/{r['strategy']} devices {r.get('devices')} batch {r['batch']}: "
                   f"{r.get('error')}" for r in records if r.get("status") != "ok"]
        for row in payoff(typed(records)):
            speedups.setdefault((row.framework, row.strategy, row.devices, row.batch_per_device),
                                []).append(row.speedup)
        for key, d in loss_diff(records).items():
            diffs[key] = max(diffs.get(key, 0.0), d)
    medians = [Row(framework=fw, strategy=st, devices=n, batch=n * b, batch_per_device=b, step_ms=0.0,
                   speedup=statistics.median(v)) for (fw, st, n, b), v in speedups.items()]
    starts = pays_from(medians)
    print()
    print(f"| strategy | devices | batch per device | speed-up over 1 device, same global batch: median "
          f"(range), {args.repeats} repeats | max rel. loss diff vs 1 device |")
    print("|---|---:|---:|---|---:|")
    for (fw, st, n, b), v in sorted(speedups.items()):
        print(f"| {fw}/{st} | {n} | {b} | {statistics.median(v):.2f}x ({min(v):.2f}-{max(v):.2f}) | "
              f"{diffs.get((fw, st, n, b), float('nan')):.1e} |")
    print()
    for (fw, st, n), b in starts.items():
        print(f"{fw}/{st} on {n} devices: " + (f"pays from {b} per device" if b is not None
                                               else "does not pay at any batch per device measured"))
    for line in failed:
        print("FAILED", line)


if __name__ == "__main__":
    main()
