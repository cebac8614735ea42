#!/usr/bin/env bash
# GPU check: GPT-2 124M (8 x 1024) on one CUDA device, in at most ~8 minutes: torch eager+bf16 and jax jit+bf16
# (MFU against the measured and the datasheet peak, attention kernel, memory breakdown, cold compile), JAX's
# cuDNN fused attention row, and `explain` of torch compile+bf16 against jax jit+bf16. Everything lands in
# OUTDIR: records (results.jsonl, records.json), summary.md, report.html, explain.json/.txt, the profiler traces
# of the explained runs (traces/, readable later by `twinbench explain TRACE_A TRACE_B`), conditions.txt, and
# gpu_check.json + gpu_check.md (the one-page summary: benchmarks/check_summary.py).
#
#   benchmarks/gpu_check.sh OUTDIR            # on a CUDA machine (python3 has torch, jax[cuda], flax, optax)
#   benchmarks/gpu_check.sh OUTDIR --dry-run  # the same commands on the tiny preset, CPU, no torch.compile
#
# Installs nothing: when twinbench is not importable it runs from this checkout's src/ (PYTHONPATH), so a GPU
# machine without a package registry needs no build step. A preflight (python -m twinbench.environment) first
# checks imports, version floors and, for the real run, that torch AND jax both see the GPU: if JAX's CUDA
# plugin failed to load, JAX would silently run on the CPU and every comparison would be meaningless, so the
# script stops in seconds saying why. PYTHON selects the interpreter (default: python3).
set -euo pipefail

usage() { echo "usage: benchmarks/gpu_check.sh OUTDIR [--dry-run]" >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 ]] || usage
OUT=$1
DRY=0
if [[ $# -eq 2 ]]; then [[ $2 == --dry-run ]] || usage; DRY=1; fi
[[ $OUT != -* ]] || usage

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# JAX takes 75% of every visible GPU at start-up unless told otherwise: the frameworks' peaks must be theirs.
export XLA_PYTHON_CLIENT_PREALLOCATE=false

if ! "$PY" -c "import twinbench" 2>/dev/null; then
  export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
fi

if [[ $DRY -eq 1 ]]; then
  # CPU rehearsal: same flow, tiny model, one fp32 and one bf16 run, no cold torch.compile (20-40 s each on a
  # small CPU).
  PRESET=(--preset tiny --steps 4 --warmup 1)
  STRATEGIES=torch:eager,jax:jit+bf16
  EXPLAIN=(torch:eager jax:jit)
  TIMEOUT=300
  TRACE=()
  "$PY" -m twinbench.environment || { echo "error: preflight failed (above)" >&2; exit 2; }
else
  "$PY" -m twinbench.environment --gpu || {
    echo "error: preflight failed (above): both frameworks must see the GPU; use --dry-run on a CPU machine" >&2
    exit 2; }
  # 5 runs: ~15 s start-up each, torch.compile of GPT-2 ~1 min cold, jit ~20-30 s, 30 steps of ~0.1 s.
  PRESET=(--preset gpt2-124m --batch 8 --seq 1024 --steps 30 --warmup 5)
  STRATEGIES=torch:eager+bf16,jax:jit+bf16
  EXPLAIN=(torch:compile+bf16 jax:jit+bf16)
  TIMEOUT=240
  TRACE=(--trace "$OUT/traces")  # the compare runs' own traces too: real H200 traces for `explain TRACE`
fi

{
  echo "# gpu_check conditions"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(hostname)"
  echo "git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "python: $("$PY" --version 2>&1)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ //' || echo unknown)"
  { command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
    | sed 's/^/gpu: /'; } || echo "gpu: none (dry run on CPU)"
  echo "command: twinbench compare ${PRESET[*]} --strategies $STRATEGIES --cache cold"
} > "$OUT/conditions.txt"
cat "$OUT/conditions.txt"

cd "$OUT"  # runs/ and caches stay out of the repository
"$PY" -m twinbench.cli compare "${PRESET[@]}" --strategies "$STRATEGIES" --cache cold \
  --cache-dir "$OUT/compile-cache" --timeout "$TIMEOUT" --plan-steps 5000 ${TRACE[@]+"${TRACE[@]}"} \
  --out "$OUT" --json "$OUT/records.json" | tee "$OUT/table.txt"
rm -rf "$OUT/compile-cache"
if [[ $DRY -eq 0 ]]; then
  # JAX's fused attention (cuDNN, bf16) beside the XLA default above: torch's SDPA picks fused kernels on CUDA
  # by itself, so this is the like-for-like JAX row (attention_kernel in every record says which ran).
  "$PY" -m twinbench.cli compare "${PRESET[@]}" --strategies jax:jit+bf16 --attention-impl cudnn --cache cold "${TRACE[@]}" \
    --cache-dir "$OUT/compile-cache" --timeout "$TIMEOUT" --out "$OUT/cudnn" --json "$OUT/cudnn/records.json" \
    | tee "$OUT/table-cudnn.txt" || echo "gpu_check: the cuDNN attention run failed (see above)" >&2
  rm -rf "$OUT/compile-cache"
fi
echo "gpu_check: records in $OUT/results.jsonl and $OUT/records.json, summary in $OUT/summary.md"
# where the step goes on the device: kernels on the GPU tracks (torch: by launching op; XLA: by hlo_op)
"$PY" -m twinbench.cli explain "${EXPLAIN[@]}" "${PRESET[@]}" --timeout "$TIMEOUT" --out "$OUT/explain" \
  --json "$OUT/explain.json" | tee "$OUT/explain.txt" || echo "gpu_check: explain failed (see above)"
"$PY" "$ROOT/benchmarks/check_summary.py" "$OUT" || echo "gpu_check: the summary failed (see above)" >&2
