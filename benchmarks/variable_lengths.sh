#!/usr/bin/env bash
# Variable-length text on bert-tiny with the skewed lengths of the embedded classification task:
#  (1) pad-max vs bucket vs dynamic in both frameworks: compilations, total wall time with compiles, padding;
#  (2) input stall at --slow-input 20 ms per batch, without and with +prefetch.
# Usage: benchmarks/variable_lengths.sh [OUTDIR] [STEPS]   (default runs/bert-lengths, 24 steps)
set -euo pipefail
OUT=${1:-runs/bert-lengths}
STEPS=${2:-24}
TB=${TWINBENCH:-.venv/bin/twinbench}
$TB compare --preset bert-tiny --task classify --steps "$STEPS" --warmup 4 --out "$OUT/lengths" \
  --strategies torch:eager+pad-max,torch:eager+bucket,torch:eager+dynamic,torch:compile+pad-max,torch:compile+bucket,torch:compile+dynamic,torch:compile+dynamic+symbolic,jax:jit+pad-max,jax:jit+bucket,jax:jit+dynamic
$TB compare --preset bert-tiny --task classify --steps "$STEPS" --warmup 4 --slow-input 20 --out "$OUT/input" \
  --strategies torch:eager+bucket,torch:eager+bucket+prefetch,jax:jit+bucket,jax:jit+bucket+prefetch
