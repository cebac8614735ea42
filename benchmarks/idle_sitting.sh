#!/usr/bin/env bash
# The idle sitting behind the figures of benchmarks/RESULTS.md ("Sitting of 2026-12-03"): every configuration in
# its own process, the before/after pairs interleaved, 3 repeats. Run on an idle machine from the repo root:
#   benchmarks/idle_sitting.sh OUT [OLD_SRC]
# OLD_SRC: the src/ folder of the commit to compare against (e.g. a `git worktree add` of the previous main).
set -u
OUT=${1:?usage: idle_sitting.sh OUT [OLD_SRC]}; OLD_SRC=${2:-}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TB="$ROOT/.venv/bin/twinbench"
OLD="env PYTHONPATH=$OLD_SRC TWINBENCH_CACHE=$OUT/old-cache $TB"  # the old code with its own peak cache
mkdir -p "$OUT"
log() { echo "$(date +%T) load $(cut -d' ' -f1 /proc/loadavg) $*" | tee -a "$OUT/log"; }
log start
"$TB" peak --remeasure > "$OUT/peak.txt" 2>&1; log "peak rc=$?"
for r in 1 2 3; do  # make demo's compare: before/after, and JAX with XLA's own CPU flags
  if [[ -n $OLD_SRC ]]; then $OLD compare --out "$OUT/demo-old-$r" > "$OUT/demo-old-$r.log" 2>&1; log "demo-old $r"; fi
  "$TB" compare --out "$OUT/demo-new-$r" > "$OUT/demo-new-$r.log" 2>&1; log "demo-new $r"
  "$TB" compare --framework jax --strategies jit --xla-cpu-flags xla-default --out "$OUT/xladef-$r" \
    > "$OUT/xladef-$r.log" 2>&1; log "xla-default $r"
done
/usr/bin/time -v "$TB" claims --quick --json "$OUT/claims.json" --out "$OUT/claims" > "$OUT/claims.log" 2>&1
log "claims rc=$?"
for r in 1 2 3; do  # the JAX input pipeline before (thread pool) and after (Grain)
  args=(compare --preset bert-tiny --task classify --slow-input 20 --strategies jax:jit,jax:jit+prefetch)
  if [[ -n $OLD_SRC ]]; then $OLD "${args[@]}" --out "$OUT/stall-old-$r" > "$OUT/stall-old-$r.log" 2>&1; log "stall-old $r"; fi
  "$TB" "${args[@]}" --out "$OUT/stall-new-$r" > "$OUT/stall-new-$r.log" 2>&1; log "stall-new $r"
done
PYTHON="$ROOT/.venv/bin/python" "$ROOT/benchmarks/byo.sh" "$OUT/byo" > "$OUT/byo.log" 2>&1; log "byo rc=$?"
for s in compile compile-regional; do
  "$ROOT/.venv/bin/python" "$ROOT/benchmarks/torch_compile_backward.py" --preset small --strategy $s \
    > "$OUT/bwd-$s.log" 2>&1; log "bwd $s rc=$?"
done
log done
