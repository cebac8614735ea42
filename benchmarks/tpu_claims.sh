#!/usr/bin/env bash
# The claims suite on one TPU chip: `twinbench claims --quick` at the seeds' sizes (GPT-2 124M and Llama-300M at
# 8 x 1024, BERT-base 32 x 128, bf16, splash attention; torch through torchax on the chip), in two sittings of at
# most 9 minutes each: the suite stops itself before LIMIT seconds (SIGTERM: the finished runs are kept as they
# end) and the second sitting continues it with `twinbench claims --resume`.
#
#   benchmarks/tpu_claims.sh RESULTS LIMIT_S     # on the TPU VM, from the repository root
#
# RESULTS: the claims results directory, relative to the repository root (e.g. runs/tpu-claims: ignored by git,
# kept on a warm machine between sittings). It is resumed when it holds a claims run, else started. LIMIT_S: the
# seconds the suite may take in this sitting (420 leaves setup and copying inside 9 minutes). When $OUT is set,
# RESULTS (without C22's profiles, which stay on the VM), the plan, the conditions, the log and the summary table
# are copied there.
#
# torchax and grain come from ./.whl-tpu (benchmarks/tpu/fetch-wheels.sh), copied to the VM beside the checkout:
# without them every torchax run and the +prefetch run fail.
# Two sittings on one VM, from the repository root:
#   1: source benchmarks/tpu/setup.sh > /dev/null && bash benchmarks/tpu_claims.sh runs/tpu-claims 420
#   2: source benchmarks/tpu/setup.sh > /dev/null && bash benchmarks/tpu_claims.sh runs/tpu-claims 470
#      (sourced again, setup.sh installs nothing it has installed; it keeps the VM's own PYTHONPATH first, where
#      its JAX and libtpu live: a PYTHONPATH set by hand to this checkout and the site alone imports a JAX without
#      libtpu, and every run of the sitting fails with "Failed to open libtpu.so" or runs on the host CPU)
#      On a fresh VM, copy the first sitting's runs/tpu-claims into the checkout first; `--resume` continues it.
# `twinbench claims --quick --plan --device tpu-v5e` predicts about 860 s of device time for the suite (11 runs, 2
# probes; compiles about 590 s of it): the two limits give 890 s; if the second call ends before the suite does,
# the same command again finishes it.
# Every run has its own timeout (--timeout 240: the costliest, Llama-300M through torchax, is planned at ~90 s).
set -uo pipefail

[[ $# -eq 2 && $2 =~ ^[0-9]+$ ]] || { echo "usage: benchmarks/tpu_claims.sh RESULTS LIMIT_S" >&2; exit 2; }
RESULTS=$1 LIMIT=$2
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PY=${PYTHON:-python3}
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's code, whatever else is installed
export PYTHONUNBUFFERED=1
# the chip of these sittings is a v5e: the many-device claims' predictions name its datasheet
export TPU_ACCELERATOR_TYPE=${TPU_ACCELERATOR_TYPE:-v5litepod-1}
TB=("$PY" -m twinbench.cli)
LOGS=${OUT:-$ROOT/$RESULTS-logs}
mkdir -p "$RESULTS" "$LOGS"
SITTING=$([[ -f $RESULTS/claims-settings.json ]] && echo 2 || echo 1)

{
  echo "# tpu_claims conditions, sitting $SITTING"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "git: $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
  "$PY" -c 'import hashlib, pathlib, twinbench; p = pathlib.Path(twinbench.__file__).parent; h = hashlib.sha1(); [h.update(f.read_bytes()) for f in sorted(p.rglob("*.py"))]; print(f"twinbench sources sha1 {h.hexdigest()[:12]}")'
  echo "host: $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
  "$PY" -c 'import importlib.metadata as m; print("versions:", ", ".join(f"{p} {m.version(p)}" for p in ("jax", "jaxlib", "libtpu", "flax", "optax", "torch", "torchax")))' 2>/dev/null || true
} > "$LOGS/conditions-$SITTING.txt"
cat "$LOGS/conditions-$SITTING.txt"

if [[ $SITTING -eq 1 ]]; then  # the plan and its predicted device time, before any spend (no device used)
  JAX_PLATFORMS=cpu "${TB[@]}" claims --quick --plan --device tpu-v5e --json "$LOGS/plan.json" > "$LOGS/plan.txt" 2>&1
  tail -n 2 "$LOGS/plan.txt"
  CMD=("${TB[@]}" claims --quick --out "$RESULTS" --timeout 240 --json "$RESULTS/verdicts.json")
else
  CMD=("${TB[@]}" claims --resume "$RESULTS" --timeout 240 --json "$RESULTS/verdicts.json")
fi
echo "== ${CMD[*]} (limit ${LIMIT}s)"
T0=$SECONDS
timeout --signal=TERM --kill-after=30 "$LIMIT" "${CMD[@]}" > "$LOGS/claims-$SITTING.log" 2>&1
RC=$?
echo "claims sitting $SITTING rc=$RC $((SECONDS - T0))s" | tee -a "$LOGS/status.txt"
grep -E "^run [0-9]+/|interrupted|error" "$LOGS/claims-$SITTING.log" | tail -n 30
if [[ -f $RESULTS/claims.json ]]; then
  "$PY" "$ROOT/benchmarks/claims_table.py" "$RESULTS" > "$LOGS/claims_table.md" 2>&1 && cat "$LOGS/claims_table.md"
  tail -n 25 "$LOGS/claims-$SITTING.log"
else
  echo "not finished in this sitting: run the same command again to continue (twinbench claims --resume $RESULTS)"
fi
if [[ -n ${OUT:-} ]]; then
  # the results come back with the call; C22's profiles (traces/, tens of MB) stay on the VM, listed
  mkdir -p "$OUT/tpu-claims" && tar -C "$RESULTS" --exclude=./traces -cf - . | tar -C "$OUT/tpu-claims" -xf -
  [[ -d $RESULTS/traces ]] && du -ah "$RESULTS/traces" | tail -n 12 > "$OUT/traces-listing.txt"
fi
exit 0
