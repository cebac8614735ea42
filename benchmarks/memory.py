"""Peak memory and its breakdown for both twins, on `small` and `gpt2-124m` (batch 8, seq 1024, fp32).

Runs `twinbench compare` once per preset (fresh processes, as always), for torch eager, jax/jit with the
default attention and jax/jit with `--attention-impl chunked`, and writes one Markdown table per preset
with each run's peak, the JAX/torch ratio and the parts of the breakdown (measure/memory.py).

    python benchmarks/memory.py [--presets small,gpt2-124m] [--out runs/memory] [--steps 3]

`--attention-impl` is one spec field of a whole compare, so each preset runs two compares: one with the
default (torch eager + jax/jit) and one with `chunked` (jax/jit only). On gpt2-124m the default JAX run is
expected to be skipped by the preflight on a machine with less than ~26 GiB free; `--no-preflight` is not
passed, so it costs seconds, not an out-of-memory crash. Duration on an idle 2-core machine: small ~2 min;
gpt2-124m ~15 min (torch eager ~1 min per step: 4 steps, one forward and one profiled step for the breakdown).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

GiB = 2**30
RUNS = (("default", "torch:eager,jax:jit"), ("chunked", "jax:jit"))


def run(preset: str, impl: str, strategies: str, steps: int, out: Path) -> list[dict[str, Any]]:
    d = out / f"{preset}-{impl}"
    cmd = [str(Path(sys.executable).parent / "twinbench"), "compare", "--preset", preset, "--strategies", strategies,
           "--steps", str(steps), "--warmup", "1", "--attention-impl", impl, "--out", str(d),
           "--json", str(d / "records.json")]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=False)
    path = d / "records.json"
    return json.loads(path.read_text()) if path.exists() else []


def table(preset: str, records: list[dict[str, Any]]) -> list[str]:
    torch_peak = next((r["peak_mem_bytes"] for r in records if r["framework"] == "torch" and r["status"] == "ok"), None)
    parts = ("runtime", "params", "optimizer_state", "gradients", "activations", "temporaries", "inputs")
    lines = [f"### {preset}", "", "| run | attention | status | peak GiB | / torch | "
             + " | ".join(parts) + " | unaccounted | accounted |", "|" + "---|" * (len(parts) + 7)]
    for r in records:
        mb = r.get("memory_breakdown") or {}
        p = mb.get("parts") or {}
        peak = r.get("peak_mem_bytes")
        ratio = f"{peak / torch_peak:.2f}x" if peak and torch_peak else "—"
        status = r["status"] if r["status"] == "ok" else f"{r['status']}: {(r.get('error') or '')[:70]}"
        cells = [f"{p[k] / GiB:.2f}" if k in p else "—" for k in parts]
        acc = mb.get("accounted")
        lines.append(f"| {r['framework']}/{r['strategy']} | {r.get('attention_impl', 'default')} | {status} | "
                     f"{peak / GiB:.2f} | {ratio} | " if peak else
                     f"| {r['framework']}/{r['strategy']} | {r.get('attention_impl', 'default')} | {status} | — | — | ")
        lines[-1] += " | ".join(cells) + f" | {mb.get('unaccounted_bytes', 0) / GiB:.2f} | " + (
            f"{acc:.0%} |" if acc is not None else "— |")
    return [*lines, ""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default="small,gpt2-124m")
    ap.add_argument("--out", type=Path, default=Path("runs/memory"))
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    md = ["# Peak memory and its breakdown (benchmarks/memory.py)", ""]
    for preset in args.presets.split(","):
        records = [r for impl, strategies in RUNS for r in run(preset, impl, strategies, args.steps, args.out)]
        md += table(preset, records)
    (args.out / "memory.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
