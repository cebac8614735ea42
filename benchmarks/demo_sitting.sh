#!/usr/bin/env bash
# The idle sitting behind "Sitting of 2026-12-03, afternoon" in benchmarks/RESULTS.md and the README's demo
# table: the matmul peaks measured again, make demo's compare three times, and the busy cores of torch/eager
# and jax/jit (benchmarks/cores_busy.py, 3 alternating repeats). Every configuration runs in its own process;
# each part starts once the 1-minute load average is below 0.3. Run on an idle machine from the repo root:
#   benchmarks/demo_sitting.sh OUT
#   .venv/bin/python benchmarks/summarize_sitting.py OUT     # the demo table: median (range) of the 3
set -u
OUT=${1:?usage: demo_sitting.sh OUT}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TB="$ROOT/.venv/bin/twinbench"
mkdir -p "$OUT"
log() { echo "$(date +%T) load $(cut -d' ' -f1 /proc/loadavg) $*" | tee -a "$OUT/log"; }
quiet() { while awk '{exit !($1 > 0.3)}' /proc/loadavg; do sleep 5; done; }
log start
quiet; "$TB" peak --remeasure > "$OUT/peak.txt" 2>&1; log "peak rc=$?"
for r in 1 2 3; do
  quiet; "$TB" compare --out "$OUT/demo-new-$r" > "$OUT/demo-new-$r.log" 2>&1; log "demo $r rc=$?"
done
quiet; "$ROOT/.venv/bin/python" "$ROOT/benchmarks/cores_busy.py" --repeats 3 > "$OUT/cores.md" 2> "$OUT/cores.log"
log "cores rc=$?"
log done
