#!/usr/bin/env bash
# twinbench diff end to end: the same code run as A and B alternately (A B A B A B), then again with a planted
# slowdown on the B side (--threads 1). The first diff must say "no detectable change" for every run, the
# second "slower", and --fail-above 5 must exit 0 and 1.
#
#   benchmarks/diff_end_to_end.sh OUTDIR [ROUNDS]     # ~6 min on an idle 2-core CPU with 3 rounds
#
# Waits for a quiet machine first (1-minute load below 0.3 per core). TWINBENCH selects the command
# (default: .venv/bin/twinbench).
set -euo pipefail
[[ $# -ge 1 && $# -le 2 ]] || { echo "usage: benchmarks/diff_end_to_end.sh OUTDIR [ROUNDS]" >&2; exit 2; }
OUT=$1; ROUNDS=${2:-3}
TB=${TWINBENCH:-.venv/bin/twinbench}
RUN=(compare --preset small --strategies torch:eager,jax:jit --steps 15 --warmup 3 --plan-steps 1000)
mkdir -p "$OUT"
python3 "$(dirname "$0")/sitting.py" --wait
for k in $(seq 1 "$ROUNDS"); do
  python3 "$(dirname "$0")/sitting.py" --wait  # every round starts on a quiet machine
  for side in A B; do "$TB" "${RUN[@]}" --out "$OUT/same/$side/$k" > /dev/null; done
  "$TB" "${RUN[@]}" --out "$OUT/planted/A/$k" > /dev/null
  "$TB" "${RUN[@]}" --threads 1 --out "$OUT/planted/B/$k" > /dev/null
done
for exp in same planted; do
  for side in A B; do cat "$OUT/$exp/$side"/*/results.jsonl > "$OUT/$exp-$side.jsonl"; done
  echo "== $exp: twinbench diff $exp-A.jsonl $exp-B.jsonl --fail-above 5"
  set +e
  "$TB" diff "$OUT/$exp-A.jsonl" "$OUT/$exp-B.jsonl" --fail-above 5 --json "$OUT/$exp-diff.json" | tee "$OUT/$exp-diff.txt"
  echo "exit code: ${PIPESTATUS[0]}" | tee -a "$OUT/$exp-diff.txt"
  set -e
done
