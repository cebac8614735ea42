#!/usr/bin/env bash
# Input stall with --slow-input 20 ms of simulated host work per batch, without and with +prefetch, in both
# frameworks (JAX's +prefetch pipeline is Grain's).
# REPEATS rounds, interleaved: each round runs the BERT compare, then the GPT one, each run in its own process:
#   twinbench compare --preset bert-tiny --task classify --slow-input 20 --strategies STRATS
#   twinbench compare --preset small --slow-input 20 --strategies STRATS
#   STRATS = jax:jit,jax:jit+prefetch,torch:eager,torch:eager+prefetch
# then prints input wait, stall share and step time of every run, each round's figure and their median.
#
# Usage: benchmarks/input_stall.sh [OUTDIR] [REPEATS]   (default runs/input-stall, 3 rounds)
# Before/after on one machine: the same script against another tree's sources, e.g. the commit before Grain:
#   git worktree add /tmp/tb-old <commit>
#   TWINBENCH="env PYTHONPATH=/tmp/tb-old/src .venv/bin/twinbench" benchmarks/input_stall.sh runs/stall-old
#   benchmarks/input_stall.sh runs/stall-new
set -euo pipefail
OUT=${1:-runs/input-stall}
REPEATS=${2:-3}
TB=${TWINBENCH:-.venv/bin/twinbench}
PY=${PYTHON:-.venv/bin/python}
STRATS=jax:jit,jax:jit+prefetch,torch:eager,torch:eager+prefetch
for r in $(seq 1 "$REPEATS"); do
  $TB compare --preset bert-tiny --task classify --slow-input 20 --strategies "$STRATS" --out "$OUT/r$r/bert"
  $TB compare --preset small --slow-input 20 --strategies "$STRATS" --out "$OUT/r$r/gpt"
done
"$PY" "$(dirname "$0")/input_stall_table.py" "$OUT"
