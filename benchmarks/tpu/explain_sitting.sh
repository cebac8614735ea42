#!/usr/bin/env bash
# explain on the chip: the JAX twin's GPT-2 124M step (8 x 1024, bf16 compute, fp32 master weights, splash attention)
# traced beside Hugging Face's FlaxGPT2 with the same optax chain (benchmarks/jax_twin_vs_hf_flax.py), then
# `twinbench explain` of the pair (which rows the twin spends more on, on a TPU) and of the twin's trace alone by
# scope (where its step goes), written to OUT/explain-*.log and .json.
#   source benchmarks/tpu/setup.sh && benchmarks/tpu/explain_sitting.sh OUT
# Each step its own timeout; what finished is kept when a later one fails.
set -u
OUT=${1:?usage: explain_sitting.sh OUT}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
PY=${PY:-python3}
step() { local name=$1 limit=$2; shift 2; echo "== $name (limit ${limit}s)"; local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  echo "$name rc=$rc $((SECONDS - t0))s" | tee -a "$OUT/status.txt"; tail -n 25 "$OUT/$name.log"; }
SKIP="gpt-torchax" step check 420 "$ROOT/benchmarks/tpu_check.sh" "$OUT/chk" gpt
JAX_TRACE=$(ls -d "$OUT"/chk/traces/*jax* 2>/dev/null | head -1)
HF_TRACE=$OUT/chk/traces/hf-gpt
echo "twin trace: $JAX_TRACE; FlaxGPT2 trace: $HF_TRACE"; ls -R "$OUT/chk/traces" | head -40
step explain-pair 150 "$PY" -m twinbench.cli explain "$JAX_TRACE" "$HF_TRACE" --json "$OUT/explain-pair.json"
step explain-twin 150 "$PY" -m twinbench.cli explain "$JAX_TRACE" --scopes --json "$OUT/explain-twin.json"
