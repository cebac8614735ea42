"""Print the figures of benchmarks/RESULTS.md ("What does compilation cost") from the results of compile_time.sh.

    python benchmarks/compile_time_table.py OUTDIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def load(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def pick(records: list[dict], **want) -> dict | None:
    for r in records:
        if r.get("status") == "ok" and all(r.get(k) == v for k, v in want.items()):
            return r
    return None


def fmt(r: dict | None, key: str, unit: str = "s") -> str:
    return "failed/missing" if r is None else f"{r[key]:.2f} {unit}"


def ratio(a: dict | None, b: dict | None, key: str) -> str:
    return "—" if a is None or b is None else f"{a[key] / b[key]:.2f}x"


def main(out: Path) -> None:
    a = load(out / "a" / "results.jsonl")
    jit, scan = pick(a, strategy="jit"), pick(a, strategy="scan-layers")
    print("(a) 12 layers, compile_s: jit", fmt(jit, "compile_s"), "| scan-layers", fmt(scan, "compile_s"),
          "| ratio", ratio(scan, jit, "compile_s"), "| first_step_s ratio", ratio(scan, jit, "first_step_s"))
    print("(d) 12 layers, step_ms: jit", fmt(jit, "step_ms", "ms"), "| scan-layers", fmt(scan, "step_ms", "ms"),
          "| ratio", ratio(scan, jit, "step_ms"))
    b = load(out / "b" / "results.jsonl")
    for s in ("jit", "scan-layers"):
        cold, warm = pick(b, strategy=s, compile_cache="cold"), pick(b, strategy=s, compile_cache="warm")
        print(f"(b) jax/{s}: compile_s cold", fmt(cold, "compile_s"), "| warm", fmt(warm, "compile_s"),
              "| ratio", ratio(warm, cold, "compile_s"), "| first_step_s cold", fmt(cold, "first_step_s"),
              "warm", fmt(warm, "first_step_s"), "ratio", ratio(warm, cold, "first_step_s"),
              "| cache hits", None if warm is None else warm.get("compile_cache_hits"))
    c = load(out / "c" / "results.jsonl")
    full_c, reg_c = pick(c, strategy="compile", compile_cache="cold"), pick(c, strategy="compile-regional",
                                                                          compile_cache="cold")
    full_w, reg_w = pick(c, strategy="compile", compile_cache="warm"), pick(c, strategy="compile-regional",
                                                                          compile_cache="warm")
    print("(c) torch cold compile_s: compile", fmt(full_c, "compile_s"), "| compile-regional",
          fmt(reg_c, "compile_s"), "| ratio", ratio(reg_c, full_c, "compile_s"))
    print("(c) torch warm compile_s: compile", fmt(full_w, "compile_s"), f"({ratio(full_w, full_c, 'compile_s')} of cold)",
          "| compile-regional", fmt(reg_w, "compile_s"), f"({ratio(reg_w, reg_c, 'compile_s')} of cold)",
          "| step_ms compile", fmt(full_c, "step_ms", "ms"), "regional", fmt(reg_c, "step_ms", "ms"))
    c12 = load(out / "c12" / "results.jsonl")
    full12, reg12 = pick(c12, strategy="compile"), pick(c12, strategy="compile-regional")
    print("(c12) 12 layers, torch cold compile_s: compile", fmt(full12, "compile_s"), "| compile-regional",
          fmt(reg12, "compile_s"), "| ratio", ratio(reg12, full12, "compile_s"))
    for r in load(out / "d-unroll" / "results.jsonl"):
        if r.get("status") == "ok":
            print(f"(d) scan-layers unroll {r['spec']['scan_unroll']}: step_ms {r['step_ms']:.2f} ms, "
                  f"compile_s {r['compile_s']:.2f} s | vs unrolled jit", ratio(r, jit, "step_ms"))
    for preset in ("tiny", "small"):
        e = load(out / f"e-{preset}" / "results.jsonl")
        for batch in (1, 2, 8):
            j, s = pick(e, strategy="jit", batch=batch), pick(e, strategy="scan-steps", batch=batch)
            print(f"(e) {preset} batch {batch}: step_ms jit", fmt(j, "step_ms", "ms"), "| scan-steps (K=8)",
                  fmt(s, "step_ms", "ms"), "| ratio", ratio(s, j, "step_ms"))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
