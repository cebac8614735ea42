#!/usr/bin/env bash
# The same BERT padding mask applied three ways (--mask-impl where | mul | cond), step times.
# where: boolean mask into the fused attention (a select); mul: 0/1 mask times the most negative float, added
# as a bias; cond: per batch, lax.cond (JAX, on the device) / a Python `if` (torch, a host sync per layer)
# between no mask (no padding in the batch) and the masked attention.
# Usage: benchmarks/mask_variants.sh [OUTDIR] [STEPS]   (default runs/bert-masks, 24 steps)
set -euo pipefail
OUT=${1:-runs/bert-masks}
STEPS=${2:-24}
TB=${TWINBENCH:-.venv/bin/twinbench}
$TB sweep --preset bert-tiny --task classify --steps "$STEPS" --warmup 4 --over mask_impl=where,mul,cond \
  --strategies torch:eager+bucket,jax:jit+bucket --out "$OUT"
