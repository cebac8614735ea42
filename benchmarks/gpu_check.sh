#!/usr/bin/env bash
# GPU check: GPT-2 124M trained in both frameworks with the main strategies, in fp32 and bf16, on one CUDA
# device, in about 8 minutes; records (results.jsonl, records.json), summary.md, report.html and the
# machine's conditions land in OUTDIR.
#
#   benchmarks/gpu_check.sh OUTDIR            # on a CUDA machine (python3 has torch, jax[cuda], flax, optax)
#   benchmarks/gpu_check.sh OUTDIR --dry-run  # the same commands on the tiny preset, CPU, no torch.compile
#
# Installs nothing but twinbench itself (`pip install --no-deps -e .`, only if it is not importable).
# PYTHON selects the interpreter (default: python3).
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

if ! "$PY" -c "import twinbench" 2>/dev/null; then
  (cd "$ROOT" && "$PY" -m pip install --quiet --no-deps -e .)
fi

if [[ $DRY -eq 1 ]]; then
  # CPU rehearsal: same flow, tiny model, no cold torch.compile (20-40 s each on a small CPU).
  PRESET=(--preset tiny --steps 4 --warmup 1)
  STRATEGIES=torch:eager,torch:eager+bf16,jax:jit,jax:jit+bf16
  TIMEOUT=300
else
  if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "error: no CUDA device visible to torch; use --dry-run on a CPU machine" >&2; exit 2
  fi
  # 9 runs: ~15 s start-up each, torch.compile of GPT-2 ~1 min cold, jit ~20-30 s, 20 steps of ~0.1 s.
  PRESET=(--preset gpt2-124m --batch 8 --seq 1024 --steps 20 --warmup 5)
  STRATEGIES=torch:eager,torch:compile-regional,torch:compile,jax:jit,jax:scan-layers
  STRATEGIES+=,torch:eager+bf16,torch:compile+bf16,jax:jit+bf16,jax:scan-layers+bf16
  TIMEOUT=240
fi

{
  echo "# gpu_check conditions"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(hostname)"
  echo "git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "python: $("$PY" --version 2>&1)"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
    | sed 's/^/gpu: /' || echo "gpu: none (dry run on CPU)"
  echo "command: twinbench compare ${PRESET[*]} --strategies $STRATEGIES --cache cold"
} > "$OUT/conditions.txt"
cat "$OUT/conditions.txt"

cd "$OUT"  # runs/ and caches stay out of the repository
"$PY" -m twinbench.cli compare "${PRESET[@]}" --strategies "$STRATEGIES" --cache cold \
  --cache-dir "$OUT/compile-cache" --timeout "$TIMEOUT" --plan-steps 5000 \
  --out "$OUT" --json "$OUT/records.json" | tee "$OUT/table.txt"
rm -rf "$OUT/compile-cache"
echo "gpu_check: records in $OUT/results.jsonl and $OUT/records.json, summary in $OUT/summary.md"
# where the step goes on the device: kernels on the GPU tracks (torch: by launching op; XLA: by hlo_op)
"$PY" -m twinbench.cli explain torch:eager jax:jit "${PRESET[@]}" --timeout "$TIMEOUT" --out "$OUT/explain" \
  --json "$OUT/explain.json" | tee "$OUT/explain.txt" || echo "gpu_check: explain failed (see above)"
