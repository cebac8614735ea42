"""Diagnostic for item (d): scan-layers vs unrolled jit step time, interleaved A/B in one process.

The headline numbers come from `twinbench compare` (one process per configuration). On a shared CPU whose
load drifts over minutes, those two processes see different machines; this script alternates one step of
each trainer, so both see the same load, and reports the median of each and their ratio. Both trainers
are built (and compiled) before any timed step.

    python benchmarks/scan_layers_ab.py [--layers 12] [--steps 40] [--unroll 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

from twinbench.data.text import batches, synthetic_corpus
from twinbench.measure.device import set_fp32_matmul
from twinbench.models.gpt import init_gpt
from twinbench.spec import from_preset, validate
from twinbench.strategies import registry


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--unroll", type=int, default=1)
    args = ap.parse_args()
    set_fp32_matmul("jax")
    base = from_preset("small", {"layers": args.layers, "scan_unroll": args.unroll})
    weights = init_gpt(base.model, 0)
    data = batches(synthetic_corpus(), base.train.batch, base.train.seq, 0)
    host = [next(data) for _ in range(args.steps)]
    trainers = {}
    for name in ("jit", "scan-layers"):
        spec = validate(base.evolve(framework="jax", strategy=name))
        t = registry.get("jax", name).load()(spec, weights)
        for x, y in host[:3]:  # compile and warm up
            t.step(x, y)
        t.sync()
        trainers[name] = t
    times: dict[str, list[float]] = {n: [] for n in trainers}
    for x, y in host:
        for name, t in trainers.items():
            t0 = time.perf_counter()
            t.step(x, y)
            t.sync()
            times[name].append(time.perf_counter() - t0)
    med = {n: statistics.median(v) * 1e3 for n, v in times.items()}
    print(f"small preset, {args.layers} layers, batch {base.train.batch} x seq {base.train.seq}, "
          f"{args.steps} interleaved steps, scan unroll {args.unroll}")
    for n, m in med.items():
        print(f"  {n:12s} median {m:8.1f} ms")
    print(f"  scan-layers / jit = {med['scan-layers'] / med['jit']:.3f}")


if __name__ == "__main__":
    main()
