"""Print the figures of benchmarks/RESULTS.md ("What does compilation cost") from the results of compile_time.sh.

    python benchmarks/compile_time_table.py OUTDIR

With repeats (``REPEATS=3 benchmarks/compile_time.sh ...``) every figure is the median (min-max, n) over them,
and every ratio the median (min-max) of the ratios within each repeat (the runs of a repeat ran side by side).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from twinbench.record import read_jsonl  # every line in the flat layout, whatever its version


def load(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return read_jsonl(path)


def pick(records: list[dict], **want) -> list[dict]:
    """Every ok record with these fields, one per repeat."""
    return [r for r in records if r.get("status") == "ok" and all(r.get(k) == v for k, v in want.items())]


def _spread(values: list[float], unit: str = "") -> str:
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:.2f}{unit}"
    return f"{med:.2f}{unit} ({min(values):.2f}-{max(values):.2f}, n={len(values)})"


def fmt(rs: list[dict], key: str, unit: str = "s") -> str:
    return "failed/missing" if not rs else _spread([r[key] for r in rs], f" {unit}")


def ratio(a: list[dict], b: list[dict], key: str) -> str:
    """a / b within each repeat both have."""
    bs = {r.get("repeat", 0): r for r in b}
    vals = [r[key] / bs[r.get("repeat", 0)][key] for r in a if r.get("repeat", 0) in bs]
    return "—" if not vals else _spread(vals, "x")


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
              "| cache hits", sorted({r.get("compile_cache_hits") for r in warm}))
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
                  f"compile_s {r['compile_s']:.2f} s | vs unrolled jit", ratio([r], jit, "step_ms"))
    for preset in ("tiny", "small"):
        e = load(out / f"e-{preset}" / "results.jsonl")
        for batch in (1, 2, 8):
            j, s = pick(e, strategy="jit", batch=batch), pick(e, strategy="scan-steps", batch=batch)
            print(f"(e) {preset} batch {batch}: step_ms jit", fmt(j, "step_ms", "ms"), "| scan-steps (K=8)",
                  fmt(s, "step_ms", "ms"), "| ratio", ratio(s, j, "step_ms"))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
