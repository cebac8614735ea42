#!/usr/bin/env bash
# Traces of the chip points predict misses or models from the kernel's grid, for reading each kernel's device time:
# BERT-base 64 x 128 and 32 x 512 (JAX twin), GPT-2 124M 8 x 1024 through torchax, splash attention, bf16.
#   source benchmarks/tpu/setup.sh && benchmarks/tpu_predict_traces.sh OUTDIR
# Each run is its own twinbench compare under its own timeout; OUTDIR/NAME holds its record and trace.
set -uo pipefail
OUT=${1:?usage: benchmarks/tpu_predict_traces.sh OUTDIR}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
run() {  # run NAME LIMIT ARGS...: one twinbench compare, its record and trace under OUTDIR/NAME
  local name=$1 limit=$2; shift 2
  mkdir -p "$OUT/$name"
  timeout --kill-after=15 "$limit" python3 -m twinbench.cli compare "$@" --steps 15 --warmup 3 \
    --attention-impl splash --trace "$OUT/$name/trace" --out "$OUT/$name" --timeout $((limit - 10)) \
    > "$OUT/$name.log" 2>&1
  echo "$name rc=$?" | tee -a "$OUT/status.txt"; tail -n 3 "$OUT/$name.log"
}
run bert-128 200 --preset bert-base --batch 64 --seq 128 --strategies jax:jit+bf16
run bert-512 200 --preset bert-base --batch 32 --seq 512 --strategies jax:jit+bf16
run gpt-torchax 260 --preset gpt2-124m --batch 8 --seq 1024 --strategies jax:torchax+bf16
