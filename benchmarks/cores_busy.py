"""Is the JAX step slower because it leaves cores idle? CPU cores kept busy during the steady-state steps.

For torch/eager and jax/jit on a preset (default ``small``), alternately, each in its own fresh process set up
as the worker sets up a run (threads, XLA flags, fp32 matmuls): warm-up steps, then the steady steps timed
with the device synchronised after each; busy cores = the process's CPU time (all threads) / wall time over
the steady steps. A framework that keeps both threads busy for the whole step gets ~2.0 on 2 threads; one
whose step has single-threaded stretches gets less. Speed is measured here, never asserted in tests.

    .venv/bin/python benchmarks/cores_busy.py --preset small --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

RUNS = (("torch", "eager"), ("jax", "jit"))


def child(framework: str, strategy: str, preset: str, steps: int, warmup: int) -> dict[str, float]:
    """One run's steady-state step time and busy cores (runs in a fresh process)."""
    from twinbench import worker
    from twinbench.spec import from_preset, validate, with_precision

    spec = validate(with_precision(from_preset(preset, {"steps": steps, "warmup": warmup}, framework=framework,
                                               strategy=strategy)))
    threads = worker.prepare_process(spec)  # before any framework import, as in a measured run
    worker.setup(spec, threads)
    built = worker.build(spec)
    batches, trainer = built.run_data.batches, built.trainer
    for i in range(warmup):  # the run's batches are indexed one at a time (data/pipeline.py)
        trainer.step(*batches[i])
    trainer.sync()
    cpu0, t0 = time.process_time(), time.perf_counter()
    for i in range(warmup, steps):
        trainer.step(*batches[i])
        trainer.sync()
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    return {"step_ms": 1e3 * wall / (steps - warmup), "busy_cores": cpu / wall, "threads": threads}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="small")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--child", nargs=2, metavar=("FRAMEWORK", "STRATEGY"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(*args.child, args.preset, args.steps, args.warmup)))
        return
    results: dict[str, list[dict[str, float]]] = {f"{fw}/{st}": [] for fw, st in RUNS}
    for r in range(args.repeats):
        for fw, st in RUNS if r % 2 == 0 else RUNS[::-1]:  # alternate which goes first
            out = subprocess.run([sys.executable, __file__, "--preset", args.preset, "--steps", str(args.steps),
                                  "--warmup", str(args.warmup), "--child", fw, st],
                                 capture_output=True, text=True, check=True)
            results[f"{fw}/{st}"].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"repeat {r + 1} {fw}/{st}: {results[f'{fw}/{st}'][-1]}", file=sys.stderr)
    print(f"{args.preset}, {args.steps - args.warmup} steady steps after {args.warmup} warm-up, fp32; "
          f"median (range) of {args.repeats} fresh processes each\n")
    print("| run | threads | step ms | busy cores |\n|---|---|---|---|")
    for run, rs in results.items():
        cells = [f"{statistics.median(v):.3g} ({min(v):.3g}-{max(v):.3g})"
                 for v in ([x["step_ms"] for x in rs], [x["busy_cores"] for x in rs])]
        print(f"| {run} | {int(rs[0]['threads'])} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
