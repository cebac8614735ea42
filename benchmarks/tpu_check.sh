#!/usr/bin/env bash
# TPU check: the twins on one TPU chip, JAX against PyTorch (through torchax) and against Hugging Face's Flax
# models, one program on the chip at a time, each run under its own timeout. Every figure lands in OUTDIR:
# each group's records (GROUP/results.jsonl, summary.md), the profiler traces of the gpt and bert groups (traces/,
# readable later by `twinbench explain TRACE_A TRACE_B` on any machine), conditions.txt, status.txt (one line
# per run: its exit code) and tpu_check.json + tpu_check.md (one page: benchmarks/check_summary.py).
#
#   benchmarks/tpu_check.sh OUTDIR [GROUP ...]   # on a TPU VM, after `source benchmarks/tpu/setup.sh`
#   benchmarks/tpu_check.sh OUTDIR --dry-run     # the same flow on tiny presets, on this machine's JAX platform
# SKIP: names of runs to leave out (e.g. SKIP="gpt-hf llama-torchax": figures an earlier sitting has); SCAN_LAYERS:
# the depths of the scan group (default "12 24"). PYTHON: the interpreter (default python3); HF_PYTHON: one with transformers < 5 for the Flax models (default
# PYTHON, as on a TPU VM set up by benchmarks/tpu/setup.sh).
#
# Groups, run in the order given (default: gpt llama bert, about 8 minutes on a v5e: mostly compiling):
#   gpt    gpt2-124m 8 x 1024 bf16: jax jit (splash attention), torch through torchax, HF FlaxGPT2 (traces of all)
#   bert   bert-base 32 x 512 bf16: jax jit (splash attention), HF FlaxBert (traces of both)
#   llama  llama-300m 8 x 1024 bf16: jax jit (splash attention), with +remat if that does not fit
#   torchax  bert-base and llama-300m through torchax, splash attention as the twins' (traces; about 3 minutes)
#   torchax-own  gpt2-124m through torchax with torchax's own attention lowering (what a plain torchax user gets)
#   refuse the preflight on llama-300m with the written-out attention (too large for 16 GiB): a skipped record
#   scan   gpt2 at 12 and 24 layers, unrolled against scan-layers: compile and step (about 4 minutes)
#   doctor the doctor on examples/doctor's host sync, recompile, no-donation and clean JAX scripts (~2 minutes)
#   before gpt2-124m jit+bf16 with the default (einsum) attention: the figure before the fused kernel
#   cache  gpt2-124m jax jit+bf16 and through torchax, each --cache both: cold compile, then a second process on
#          the persistent compilation cache the first one filled (about 5 minutes)
#   points predict's held-out chip points: gpt-350m 4 x 1024, llama-300m 4 x 2048, bert-base 64 x 128 (jax jit,
#          splash) and gpt2-124m 16 x 512 through torchax, with a trace of each (about 7 minutes)
#   predict  the traces predict --compile is checked against, kernel by kernel: bert-base 64 x 128 and 32 x 512 (jax
#          jit, splash) and gpt2-124m 8 x 1024 through torchax (about 5 minutes)
set -uo pipefail

usage() { echo "usage: benchmarks/tpu_check.sh OUTDIR [--dry-run | GROUP ...]" >&2; exit 2; }
[[ $# -ge 1 && $1 != -* ]] || usage
OUT=$1; shift
DRY=0; GROUPS_=()
for a in "$@"; do
  case $a in
    --dry-run) DRY=1 ;;
    gpt|bert|llama|torchax|torchax-own|refuse|scan|doctor|before|cache|points|predict) GROUPS_+=("$a") ;;
    *) usage ;;
  esac
done
[[ ${#GROUPS_[@]} -gt 0 ]] || GROUPS_=(gpt llama bert)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}; [[ $PY == */* ]] && PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
"$PY" -c "import twinbench" 2>/dev/null || export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
TB=("$PY" -m twinbench.cli)
HF=("$PY" "$ROOT/benchmarks/jax_twin_vs_hf_flax.py" "${HF_PYTHON:-$PY}")  # a python with transformers < 5
TORCHAX=jax:torchax

if [[ $DRY -eq 1 ]]; then  # rehearsal: tiny shapes, the default attention (splash is TPU-only), short timeouts
  GPT=(--preset tiny --steps 4 --warmup 1); BERT=(--preset bert-tiny --steps 4 --warmup 1)
  LLAMA=(--preset llama-tiny --steps 4 --warmup 1); ATTN=(); LIMIT=300; TXLIMIT=300; HFPRESET=(--preset tiny)
else
  "$PY" -m twinbench.environment --tpu || { echo "error: preflight failed (above); see docs/tpu.md" >&2; exit 2; }
  GPT=(--preset gpt2-124m --batch 8 --seq 1024 --steps 15 --warmup 3)
  BERT=(--preset bert-base --batch 32 --seq 512 --steps 15 --warmup 3)
  LLAMA=(--preset llama-300m --batch 8 --seq 1024 --steps 15 --warmup 3)
  ATTN=(--attention-impl splash); LIMIT=170; HFPRESET=(--preset gpt2-124m)
  TXLIMIT=240  # torchax traces the torch module op by op before XLA compiles: a longer first step
fi

{
  echo "# tpu_check conditions"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "git: $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
  # the code the runs import (PYTHONPATH may point at another checkout) and a digest of it: a copied working tree
  # can carry a .git that is not the code's
  "$PY" -c 'import hashlib, pathlib, twinbench; p = pathlib.Path(twinbench.__file__).parent; h = hashlib.sha1(); [h.update(f.read_bytes()) for f in sorted(p.rglob("*.py"))]; print(f"twinbench: {p} (sources sha1 {h.hexdigest()[:12]})")' 
  echo "python: $("$PY" --version 2>&1)"
  "$PY" -c 'import jax; d = jax.devices()[0]; print(f"device: {d.device_kind} x {jax.device_count()} ({d.platform}), jax {jax.__version__}")'
  "$PY" -c 'import importlib.metadata as m; print("versions:", ", ".join(f"{p} {m.version(p)}" for p in ("jaxlib", "libtpu", "flax", "optax", "torch", "torchax", "transformers") if __import__("importlib.util").util.find_spec(p.replace("-", "_")) or p == "libtpu"))' 2>/dev/null || true
  echo "groups: ${GROUPS_[*]}"
} > "$OUT/conditions.txt"
cat "$OUT/conditions.txt"
cd "$OUT"  # runs/ and caches stay out of the repository

# run NAME SECONDS CMD...: one program, its own timeout; its exit code into status.txt, its output into NAME.log
run() {
  local name=$1 limit=$2; shift 2
  if [[ " ${SKIP:-} " == *" $name "* ]]; then echo "== $name skipped (SKIP)"; return; fi
  echo "== $name (limit ${limit}s)"
  local t0=$SECONDS
  timeout --kill-after=15 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc ${SECONDS}s-${t0}s=$((SECONDS - t0))s" | tee -a "$OUT/status.txt"
  tail -n 4 "$OUT/$name.log"
}
compare() {  # compare NAME EXTRA...: a twinbench compare into OUTDIR/NAME, under LIMIT seconds
  local name=$1; shift
  mkdir -p "$OUT/$name"
  run "$name" "$LIMIT" "${TB[@]}" compare "$@" --timeout $((LIMIT - 10)) --out "$OUT/$name" --json "$OUT/$name/records.json" --wide
}
txcompare() { local LIMIT=$TXLIMIT; compare "$@"; }  # a torchax run: its own, longer limit

for g in "${GROUPS_[@]}"; do
  case $g in
    gpt)
      compare gpt-jax "${GPT[@]}" --strategies jax:jit+bf16 "${ATTN[@]}" --trace "$OUT/traces"
      txcompare gpt-torchax "${GPT[@]}" --strategies "$TORCHAX+bf16" "${ATTN[@]}" --trace "$OUT/traces"
      run gpt-hf "$LIMIT" "${HF[@]}" "${HFPRESET[@]}" --precision bf16 --sides hf --rounds 1 --steps 15 \
        --trace "$OUT/traces/hf-gpt" --out "$OUT/gpt-hf" ;;
    bert)
      compare bert-jax "${BERT[@]}" --strategies jax:jit+bf16 "${ATTN[@]}" --trace "$OUT/traces"
      [[ $DRY -eq 1 ]] && continue
      run bert-hf "$LIMIT" "${HF[@]}" --preset bert-base --precision bf16 --sides hf --rounds 1 --steps 15 \
        --trace "$OUT/traces/hf-bert" --out "$OUT/bert-hf" ;;
    llama)
      compare llama-jax "${LLAMA[@]}" --strategies jax:jit+bf16 "${ATTN[@]}"
      if ! grep -q '"status": "ok"' "$OUT/llama-jax/results.jsonl" 2>/dev/null; then  # skipped or failed: remat
        compare llama-jax-remat "${LLAMA[@]}" --strategies jax:jit+bf16+remat "${ATTN[@]}"
      fi ;;
    torchax)
      txcompare bert-torchax "${BERT[@]}" --strategies "$TORCHAX+bf16" "${ATTN[@]}" --trace "$OUT/traces"
      txcompare llama-torchax "${LLAMA[@]}" --strategies "$TORCHAX+bf16" "${ATTN[@]}" --trace "$OUT/traces" ;;
    points)  # predict's held-out chip points: shapes its calibration never saw (a trace of each for explain)
      compare pt-gpt350m --preset gpt-350m --batch 4 --seq 1024 --steps 15 --warmup 3 --strategies jax:jit+bf16 \
        "${ATTN[@]}" --trace "$OUT/traces"
      compare pt-llama-2048 --preset llama-300m --batch 4 --seq 2048 --context 2048 --steps 15 --warmup 3 \
        --strategies jax:jit+bf16 "${ATTN[@]}" --trace "$OUT/traces"
      compare pt-bert-128 --preset bert-base --batch 64 --seq 128 --steps 15 --warmup 3 --strategies jax:jit+bf16 \
        "${ATTN[@]}" --trace "$OUT/traces"
      txcompare pt-gpt-torchax-512 --preset gpt2-124m --batch 16 --seq 512 --steps 15 --warmup 3 \
        --strategies "$TORCHAX+bf16" "${ATTN[@]}" --trace "$OUT/traces" ;;
    predict)  # each kernel's device time, to join to the kernels predict --compile costs
      compare pr-bert-128 --preset bert-base --batch 64 --seq 128 --steps 15 --warmup 3 --strategies jax:jit+bf16 \
        "${ATTN[@]}" --trace "$OUT/traces"
      compare pr-bert-512 "${BERT[@]}" --strategies jax:jit+bf16 "${ATTN[@]}" --trace "$OUT/traces"
      txcompare pr-gpt-torchax "${GPT[@]}" --strategies "$TORCHAX+bf16" "${ATTN[@]}" --trace "$OUT/traces" ;;
    torchax-own)
      txcompare gpt-torchax-own "${GPT[@]}" --strategies "$TORCHAX+bf16" --trace "$OUT/traces" ;;
    refuse)  # seconds, not a compile: the preflight sizes the step against the chip's memory and skips it
      [[ $DRY -eq 1 ]] && continue
      compare llama-refused "${LLAMA[@]}" --strategies jax:jit+bf16 ;;
    before)
      compare gpt-jax-einsum "${GPT[@]}" --strategies jax:jit+bf16 ;;
    scan)
      for L in ${SCAN_LAYERS:-12 24}; do
        compare "scan-$L" "${GPT[@]}" --layers "$L" --steps 6 --warmup 2 --strategies jax:jit+bf16,jax:scan-layers+bf16 "${ATTN[@]}"
      done ;;
    cache)  # two processes a configuration (cold, then warm on the cache the cold one filled): twice the limit
      LIMIT=$((2 * LIMIT)) compare cache-gpt-jax "${GPT[@]}" --strategies jax:jit+bf16 "${ATTN[@]}" --cache both \
        --cache-dir "$OUT/compile-cache"
      LIMIT=$((2 * TXLIMIT)) compare cache-gpt-torchax "${GPT[@]}" --strategies "$TORCHAX+bf16" "${ATTN[@]}" \
        --cache both --cache-dir "$OUT/compile-cache" ;;
    doctor)
      for ex in jax_host_sync jax_recompile jax_no_donation clean_jax; do  # each finding's cost, measured on the chip
        run "doctor-$ex" 120 "${TB[@]}" doctor "$ROOT/examples/doctor/$ex.py" --json "$OUT/doctor-$ex.json"
      done ;;
  esac
done
"$PY" "$ROOT/benchmarks/check_summary.py" "$OUT" || true
