#!/usr/bin/env bash
# Bring your own model: the Llama-style example of examples/byo under torch (eager,
# compile-regional, compile) and JAX (torchax, and the hand-written port after its parity check), on the
# small preset's shape. Records, summary.md and report.html land in OUTDIR (default runs/byo-<timestamp>).
#
#   benchmarks/own_model.sh [OUTDIR]          # ~5-10 min on an idle 2-core CPU (two cold torch.compile runs)
#
# PYTHON selects the interpreter (default: .venv/bin/python if it exists, else python3).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-$([[ -x $ROOT/.venv/bin/python ]] && echo "$ROOT/.venv/bin/python" || echo python3)}
OUT=${1:-runs/byo-$(date +%Y%m%d-%H%M%S)}
"$PY" -m twinbench.cli compare --preset small \
  --model "$ROOT/examples/byo/llama.py:build" --jax-model "$ROOT/examples/byo/llama_jax.py:build_jax" \
  --strategies eager,compile-regional,compile,torchax,port --out "$OUT" --json "$OUT/records.json"
