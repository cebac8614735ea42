"""Many devices: params+optimizer bytes per device and step-time overhead of each strategy against 1 device.

Runs two ``twinbench compare`` (each run in its own process(es), as always): every multi-device strategy on
1 device and on N devices, plus the frameworks' single-device baselines (jax/jit, torch/eager), then prints
a Markdown table for ``benchmarks/RESULTS.md`` and the scaling lines of ``twinbench.report.scaling``.

    .venv/bin/python benchmarks/multidevice_overhead.py --preset small --devices 4 --out runs/multidevice

On a CPU the N devices are simulated (JAX host-platform devices, torchrun processes) and share the
machine's cores: the step-time ratios are the overhead of each parallel formulation, not a speed-up.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from twinbench.distributed.sharding_report import fmt_bytes
from twinbench.record import read_jsonl, typed  # read_jsonl: each line flat, whatever its version
from twinbench.report import scaling

STRATEGIES = "mesh-dp,mesh-fsdp,pmap,ddp,fsdp"
BASELINE = {"jax": "jit", "torch": "eager"}


def compare(preset: str, devices: int, strategies: str, out: Path, extra: list[str]) -> list[dict]:
    cmd = [str(Path(sys.executable).with_name("twinbench")), "compare", "--preset", preset, "--devices",
           str(devices), "--strategies", strategies, "--out", str(out), *extra]
    print("$", " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=False)
    return read_jsonl(out / "results.jsonl")


def table(one: list[dict], many: list[dict], n: int) -> list[str]:
    by1 = {(r["framework"], r["strategy"]): r for r in one if r["status"] == "ok"}
    rows = [f"| strategy | params+opt state per device, 1 dev | … at {n} dev | ratio | step ms, 1 dev | "
            f"step ms, {n} dev | {n} dev / 1 dev | {n} dev / baseline 1 dev | max rel. loss diff vs baseline |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in many:
        label = f"{r['framework']}/{r['strategy']}"
        if r["status"] != "ok":
            rows.append(f"| {label} | FAILED: {r['error']} |||||||")
            continue
        r1 = by1.get((r["framework"], r["strategy"]))
        base = by1.get((r["framework"], BASELINE[r["framework"]]))
        s1 = r1.get("state_bytes_per_device") if r1 else None
        sn = r["state_bytes_per_device"]
        diff = max(abs(a - b) / abs(b) for a, b in zip(r["losses"], base["losses"], strict=True)) if base else None
        rows.append(" | ".join([
            f"| {label}", fmt_bytes(s1), fmt_bytes(sn), f"{sn / s1:.3f}" if s1 else "—",
            f"{r1['step_ms']:.1f}" if r1 else "—", f"{r['step_ms']:.1f}",
            f"{r['step_ms'] / r1['step_ms']:.2f}x" if r1 else "—",
            f"{r['step_ms'] / base['step_ms']:.2f}x" if base else "—",
            f"{diff:.1e} |" if diff is not None else "— |"]))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="small")
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--out", type=Path, default=Path("runs/multidevice"))
    args, extra = ap.parse_known_args()
    one = compare(args.preset, 1, "jit,eager," + STRATEGIES, args.out / "devices1", extra)
    many = compare(args.preset, args.devices, STRATEGIES, args.out / f"devices{args.devices}",
                   ["--show-sharding", *extra])
    print()
    print("\n".join(table(one, many, args.devices)))
    print()
    for line in scaling.lines(typed(one + many)):
        print(f"- {line}")


if __name__ == "__main__":
    main()
