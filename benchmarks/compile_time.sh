#!/usr/bin/env bash
# What does compilation cost (benchmarks/RESULTS.md)? Compile time cut down, and what the execution strategies cost
# or buy per step. Every configuration runs in its own process through `twinbench compare` / `sweep`.
#
#   benchmarks/compile_time.sh OUTDIR [a b c c12 d d-unroll e]     (default: a b c d e)
#   REPEATS=3 benchmarks/compile_time.sh ...   every compare N times, interleaved (the table gives median and range)
#
#   a  scan-layers vs unrolled jit: compile time at 12 layers              (goal: <= 0.5x)
#   b  JAX persistent compilation cache: warm vs cold compile              (goal: <= 0.3x)
#   c  torch compile-regional vs compile: cold compile, and the warm Inductor cache (goal: <= 0.5x);
#      c12: the same cold comparison at 12 layers
#   d  scan-layers vs unrolled: steady-state step time (from a)            (goal: <= +10%)
#   e  scan-steps vs per-step jit at batch 1, 2, 8 on tiny and small
set -euo pipefail
OUT=${1:?usage: benchmarks/compile_time.sh OUTDIR [a b c d e]}
shift
ITEMS=${*:-a b c d e}
TB=${TWINBENCH:-twinbench}
R=(--repeats "${REPEATS:-1}")
mkdir -p "$OUT"

for item in $ITEMS; do
  case $item in
    a|d)  # d reads the step times of the same runs
      [[ -e $OUT/a/results.jsonl ]] && continue
      $TB compare --preset small --layers 12 --framework jax --strategies jit,scan-layers \
        "${R[@]}" --steps 30 --warmup 10 --out "$OUT/a" ;;
    b)
      $TB compare --preset small --framework jax --strategies jit,scan-layers --cache both \
        "${R[@]}" --steps 20 --warmup 5 --out "$OUT/b" ;;
    c)
      $TB compare --preset small --framework torch --strategies compile,compile-regional --cache both \
        "${R[@]}" --steps 20 --warmup 5 --out "$OUT/c" ;;
    c12)
      $TB compare --preset small --layers 12 --framework torch --strategies compile,compile-regional \
        "${R[@]}" --steps 20 --warmup 5 --out "$OUT/c12" ;;
    e)
      for preset in tiny small; do
        $TB sweep --preset $preset --framework jax --strategies jit,scan-steps --over batch=1,2,8 \
          --steps 48 --warmup 8 --scan-k 8 --out "$OUT/e-$preset"
      done ;;
    d-unroll)  # investigation of d: unroll the layer scan
      $TB sweep --preset small --layers 12 --framework jax --strategies scan-layers --over scan_unroll=2,4 \
        --steps 30 --warmup 10 --out "$OUT/d-unroll" ;;
    *) echo "unknown item $item (a b c c12 d d-unroll e)" >&2; exit 2 ;;
  esac
done
