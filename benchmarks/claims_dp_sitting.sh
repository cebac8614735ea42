#!/usr/bin/env bash
# The idle sitting behind "Sitting of 2026-12-03, 10:37-11:30" in benchmarks/RESULTS.md: the wall time of
# `twinbench claims --quick` (issue 10: 21 verdicts in <= 15 min on 2 cores), the per-device batch sweep of
# multi-device BERT fine-tuning (issue 11, benchmarks/bert_dp_batch.py: 3 interleaved repeats), and make demo's
# compare. Every configuration runs in its own process; each part starts once the 1-minute load average is
# below 0.6 (the runs before it, above all the 4-process ones, leave the load average high for a minute or two).
# Run on an idle machine from the repo root:
#   benchmarks/claims_dp_sitting.sh OUT [claims] [dp] [demo]     (default: all three)
set -u
OUT=${1:?usage: claims_dp_sitting.sh OUT [claims] [dp] [demo]}; shift
PARTS=${*:-claims dp demo}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TB="$ROOT/.venv/bin/twinbench"
mkdir -p "$OUT"
log() { echo "$(date +%T) load $(cut -d' ' -f1 /proc/loadavg) $*" | tee -a "$OUT/log"; }
quiet() { while awk '{exit !($1 > 0.6)}' /proc/loadavg; do sleep 5; done; }
log "start: $PARTS"
"$TB" peak > "$OUT/peak.txt" 2>&1; log "peak rc=$?"
for part in $PARTS; do
  quiet
  case $part in
    claims)
      /usr/bin/time -f "claims wall %e s" "$TB" claims --quick --json "$OUT/claims.json" --out "$OUT/claims" \
        > "$OUT/claims.log" 2>&1
      log "claims rc=$? $(tail -1 "$OUT/claims.log")" ;;
    dp)
      "$ROOT/.venv/bin/python" "$ROOT/benchmarks/bert_dp_batch.py" --out "$OUT/dp" -- --steps 20 --warmup 5 \
        > "$OUT/dp.log" 2>&1
      log "dp rc=$?" ;;
    demo)
      "$TB" compare --out "$OUT/demo" > "$OUT/demo.log" 2>&1; log "demo rc=$?" ;;
  esac
done
log done
