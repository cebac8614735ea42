"""Multi-device BERT fine-tuning (issue 11 item 5): where data parallelism starts to pay (claim C12).

For every per-device batch B and device count N it runs ``twinbench compare --preset bert-tiny --task classify``
with the global batch N x B: the data-parallel strategies of both frameworks (``mesh-dp``, ``ddp``; add more
with ``--strategies``) on N devices, and each framework's one-device baseline (``jit``, ``eager``) on the same
global batch. It prints, per strategy, tokens/s against the one-device run of the same global batch (the
speed-up) and the largest relative loss difference (the parity check, expected < 1e-5 in fp32).

    .venv/bin/python benchmarks/bert_dp_batch.py --devices 1,2,4 --per-device-batch 2,4,8,16 --out runs/bert-dp

The multi-device compare of every strategy at one size (all ok, losses equal to one device) is
``benchmarks/multidevice.py --preset bert-tiny --devices 4 --out runs/bert-multidevice --task classify``.
On a CPU the N devices are simulated and share the cores: the ratios show the overhead of each parallel
formulation, not a speed-up; run it on a multi-GPU machine for C12's answer.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

BASELINE = {"jax": "jit", "torch": "eager"}


def compare(devices: int, batch: int, strategies: str, out: Path, extra: list[str]) -> list[dict]:
    cmd = [str(Path(sys.executable).with_name("twinbench")), "compare", "--preset", "bert-tiny", "--task", "classify",
           "--devices", str(devices), "--batch", str(batch), "--strategies", strategies, "--out", str(out), *extra]
    print("$", " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=False)
    path = out / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="1,2,4")
    ap.add_argument("--per-device-batch", default="2,4,8,16")
    ap.add_argument("--strategies", default="mesh-dp,ddp")
    ap.add_argument("--out", type=Path, default=Path("runs/bert-dp"))
    args, extra = ap.parse_known_args()
    devices = [int(d) for d in args.devices.split(",")]
    rows = ["| per-device batch | devices | strategy | tokens/s | vs 1 device, same global batch | "
            "max rel. loss diff vs 1 device |", "|---|---|---|---|---|---|"]
    for b in (int(x) for x in args.per_device_batch.split(",")):
        for n in (d for d in devices if d > 1):
            one = compare(1, n * b, ",".join(BASELINE.values()), args.out / f"b{b}-d{n}-one", extra)
            many = compare(n, n * b, args.strategies, args.out / f"b{b}-d{n}", extra)
            base = {r["framework"]: r for r in one if r.get("status") == "ok"}
            for r in many:
                label = f"{r['framework']}/{r['strategy']}"
                ref = base.get(r["framework"])
                if r.get("status") != "ok" or ref is None:
                    rows.append(f"| {b} | {n} | {label} | FAILED: {r.get('error') or 'no 1-device baseline'} |||")
                    continue
                diff = max(abs(x - y) / abs(y) for x, y in zip(r["losses"], ref["losses"], strict=True))
                rows.append(f"| {b} | {n} | {label} | {r['tokens_per_s']:,.0f} | "
                            f"{r['tokens_per_s'] / ref['tokens_per_s']:.2f}x | {diff:.1e} |")
    print()
    print("\n".join(rows))


if __name__ == "__main__":
    main()
