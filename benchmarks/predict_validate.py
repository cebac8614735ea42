"""Predicted vs measured steps: how far ``twinbench predict`` is from the chip.

Usage:

    .venv/bin/python benchmarks/predict_validate.py [RESULTS.jsonl ...] [--shipped] [--write] [--add] [--json F]
        [--compile]

Each ``ok`` record of the given twinbench results files (their ``device`` names the datasheet: "TPU v5 lite"
-> tpu-v5e, "NVIDIA H200" -> h200, a CPU record -> here) and, with ``--shipped`` (the default when no file is
given), each measured point shipped in ``src/twinbench/predict/calibration.jsonl`` is predicted from this
machine (the program is lowered or traced here, no step runs) and printed beside its measured step with the
error (predicted / measured - 1), and where the point has a measured peak memory (a TPU's compiled program:
arguments + temporaries + code), the memory estimate beside it. ``--write`` stores each shipped point's
prediction back into calibration.jsonl (``predicted_ms``, ``predicted_memory_bytes``): the error bars
``twinbench predict`` prints are made of these.
``--add`` appends the given files' points (with their predictions) to calibration.jsonl: shipping a new
measured point is one run of this script.
``--compile`` also predicts each TPU point of a JAX strategy from its step compiled here by libtpu (``twinbench
predict --compile``; needs the libtpu package) and prints that prediction and its error beside the model's; the
model's predictions are stored as before, and with ``--write`` these beside them (``compiled_ms``: the error bar
``predict --compile`` prints).
Lowering GPT-2 124M takes about a minute on a 2-core machine; each distinct configuration is lowered once, and
compiled for a TPU in another minute or two.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

from twinbench.predict import calibration
from twinbench.predict.command import compiled, predicted
from twinbench.predict.tpu_compile import TpuCompileUnavailable


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="*", type=Path, help="twinbench results.jsonl files of measured runs")
    ap.add_argument("--shipped", action="store_true", help="also the points shipped with twinbench")
    ap.add_argument("--write", action="store_true", help="store the shipped points' predictions in the package")
    ap.add_argument("--add", action="store_true", help="append the given files' points to the shipped ones")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    ap.add_argument("--compile", action="store_true",
                    help="also predict the TPU points from the step compiled here by libtpu (predict --compile)")
    args = ap.parse_args(argv)
    shipped = calibration.shipped() if args.shipped or not args.results else []
    points = list(shipped)
    added: list[calibration.Point] = []
    for path in args.results:
        if not path.is_file():
            print(f"error: {path} is not a file", file=sys.stderr)
            return 2
        got, skipped = calibration.points_from_records(path)
        for p in got:
            p.source = f"twinbench compare ({path.name})"
        points += got
        added += got
        for s in skipped:
            print(f"{path}: left out {s}", file=sys.stderr)
    cache: dict = {}
    rows = []
    print(f"{'device':9s} {'framework':9s} {'strategy':14s} {'preset':10s} {'attention':9s} "
          f"{'measured':>9s} {'predicted':>9s} {'error':>7s}   {'memory GiB: measured':>20s} {'predicted':>9s} "
          f"{'error':>6s}")
    for p in points:
        try:
            pred = predicted(p, cache)
        except Exception as e:  # one point that cannot be predicted here must not hide the others
            print(f"{p.device} {p.framework} {p.strategy} {p.preset}: not predicted ({type(e).__name__}: {e})"[:200])
            continue
        p.predicted_ms = round(pred.roof.step_ms / pred.steps_per_call, 2)
        if p.memory_bytes:  # a memory estimate is stored only beside a measured peak
            p.predicted_memory_bytes = round(pred.memory_bytes)
        from_compiled = None
        if args.compile and pred.sheet.platform == "tpu" and p.framework == "jax":
            step = copy.copy(pred)  # the model's prediction stays as it is (stored, printed)
            try:
                compiled(step)
            except TpuCompileUnavailable as e:
                print(f"error: --compile: {e}", file=sys.stderr)
                return 2
            from_compiled = p.compiled_ms = round(step.roof.step_ms / step.steps_per_call, 2)
        rows.append({**json.loads(p.to_json()), "error": round(p.error or 0.0, 4),
                     "compiled_ms": from_compiled,
                     "compiled_error": None if from_compiled is None else round(from_compiled / p.step_ms - 1, 4),
                     "memory_error": None if p.memory_error is None else round(p.memory_error, 4),
                     "memory_bytes_range": list(pred.memory_range), "fits": pred.fits})
        memory = (f"{p.memory_bytes / 2**30:20.2f} {p.predicted_memory_bytes / 2**30:9.2f} {p.memory_error:+6.0%}"
                  if p.memory_bytes else f"{'-':>20s} {pred.memory_bytes / 2**30:9.2f}")
        also = f"   --compile {from_compiled:.1f} ({from_compiled / p.step_ms - 1:+.0%})" if from_compiled else ""
        print(f"{p.device:9s} {p.framework:9s} {p.strategy:14s} {p.preset:10s} {p.attention_impl:9s} "
              f"{p.step_ms:9.1f} {p.predicted_ms:9.1f} {p.error:+7.0%}   {memory}{also}", flush=True)
    target = Path(calibration.__file__).with_name("calibration.jsonl")
    if args.write and shipped:
        target.write_text("".join(p.to_json() + "\n" for p in shipped))
        print(f"wrote the predictions of {len(shipped)} shipped points to {target.name}")
    if args.add and added:
        with target.open("a") as f:
            f.write("".join(p.to_json() + "\n" for p in added if p.predicted_ms is not None))
        print(f"added {sum(p.predicted_ms is not None for p in added)} points to {target.name}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
