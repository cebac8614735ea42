#!/usr/bin/env bash
# The twins against the public models on a quiet machine's CPU: the JAX twin (twinbench's jax/jit) against Hugging
# Face's FlaxGPT2LMHeadModel with the same optax chain under one jit, and the torch twin (torch/eager) against
# nanoGPT's model.py trained as its train.py trains it; `small` (4 layers, d 256, 4 heads, vocab 256, ctx 128,
# batch 8), fp32, 2 threads pinned to the same two cores (taskset), the default host for both sides (XLA's own CPU
# flags, glibc's malloc as it comes), interleaved rounds, each run a fresh process. Written for the TPU VM's host
# (13 cores, nothing else running there), whose chip stays untouched (JAX_PLATFORMS=cpu); runs on any Linux machine.
#
#   benchmarks/tpu/fetch-wheels.sh here with WITH_HF=1 (transformers < 5), nanoGPT's model.py in runs/public/nanoGPT/
#   and the twin before a change as a source tree (optional): mkdir -p runs/before-src && git archive REV src/twinbench
#   | tar -x -C runs/before-src --strip-components=1; carry .whl-tpu, runs/public and runs/before-src; then on the VM:
#   source benchmarks/tpu/setup.sh && BEFORE_SRC=runs/before-src benchmarks/tpu/twins_vs_public.sh OUTDIR [STAGE ...]
#
# Stages, in this order by default: `programs` (benchmarks/twin_programs.py: the compiled steps compared, JAX and
# torch; counts, no timing), `rounds` (ROUNDS interleaved rounds: round r runs the JAX sides, then the torch sides,
# each benchmark adding its round r to the rows kept in STATE).
# ROUNDS (5), STEPS (20 timed steps a run, after 5 of warm-up), CPUS (0,1: the cores every run is pinned to).
# BEFORE_SRC: a copy of src/ before a change of the twin (its twinbench/ inside): the JAX rounds then add the side
#   `before`, the twin of that tree, so the change is timed against the twin without it in the same rounds.
# JAX_TIMEOUT (240), TORCH_TIMEOUT (180): seconds one run may take (a loaded machine needs more).
# BUDGET (540): seconds from this script's start; no run starts with less than 45 s left and none runs past it.
# STATE (/tmp/twins_vs_public): the rows of every run, kept while the VM stays warm: called again with the same
#   STATE, the script runs only the rounds missing (a second call continues the first); a fresh sitting: remove it.
# OUTDIR gets machine.txt (the CPU model and its instruction set: every figure's machine), the programs' tables,
# each benchmark's summary.md and results.jsonl, log.txt; and all of it as twins_vs_public.tar.gz.
set -u
OUT=${1:?usage: twins_vs_public.sh OUTDIR [programs] [rounds]}
shift
STAGES=${*:-programs rounds}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PY=${PY:-python3}
HF_PY=${HF_PY:-$PY}  # a python with transformers < 5 (on the VM: the same, setup.sh installs it from .whl-tpu)
ROUNDS=${ROUNDS:-5}
STEPS=${STEPS:-20}
CPUS=${CPUS:-0,1}
BUDGET=${BUDGET:-540}
STATE=${STATE:-/tmp/twins_vs_public}
NANOGPT=${NANOGPT:-$ROOT/runs/public/nanoGPT/model.py}
DEADLINE=$(( $(date +%s) + BUDGET ))
export JAX_PLATFORMS=cpu  # the host's CPU: the chip stays free (and both sides run where they are compared)
mkdir -p "$OUT" "$STATE"
LOG=$STATE/log.txt

left() { echo $(( DEADLINE - $(date +%s) )); }

machine() {  # the CPU model and its vector/matrix extensions, beside every figure
  {
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA node\(s\)|L2|L3|Vendor ID|CPU family|Model:)'
    echo "instruction set: $(grep -o -w -E 'avx2|fma|avx512f|avx512bw|avx512_vnni|avx512_bf16|amx_tile|amx_bf16|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' ')"
    echo "pinned to cores: $CPUS (taskset), 2 threads a run; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
    "$PY" -c 'import importlib.metadata as m
print("versions:", ", ".join(f"{p} {m.version(p)}" for p in ("jax", "jaxlib", "flax", "optax", "numpy", "torch")))'
    "$HF_PY" -c 'import importlib.metadata as m; print("the Hugging Face side: transformers", m.version("transformers"))'
  } > "$STATE/machine.txt" 2>&1
}

programs() {
  [ "$(left)" -gt 90 ] || { echo "programs: skipped, $(left) s left" | tee -a "$LOG"; return; }
  timeout --kill-after=10 $(( $(left) - 30 )) "$PY" "$ROOT/benchmarks/twin_programs.py" "$HF_PY" \
    --json "$STATE/programs.json" > "$STATE/programs.md" 2>> "$LOG" || echo "programs (jax): rc $?" >> "$LOG"
  [ -f "$NANOGPT" ] && timeout --kill-after=10 $(( $(left) - 30 )) "$PY" "$ROOT/benchmarks/twin_programs.py" \
    --torch "$NANOGPT" > "$STATE/torch_programs.md" 2>> "$LOG" || echo "programs (torch): rc $?" >> "$LOG"
}

rounds() {
  local sides=hf,ours extra=()
  if [ -n "${BEFORE_SRC:-}" ]; then sides=hf,ours,before; extra=(--before-src "$BEFORE_SRC"); fi
  local r
  for r in $(seq 1 "$ROUNDS"); do
    [ "$(left)" -gt 60 ] || break
    taskset -c "$CPUS" "$PY" "$ROOT/benchmarks/jax_twin_vs_hf_flax.py" "$HF_PY" --preset small --rounds "$r" \
      --steps "$STEPS" --threads 2 --xla-cpu-flags xla-default --host-malloc system --sides "$sides" "${extra[@]}" \
      --out "$STATE/jax" --resume --deadline "$DEADLINE" --min-left 45 --timeout "${JAX_TIMEOUT:-240}" >> "$LOG" 2>&1 \
      || echo "jax round $r: rc $?" >> "$LOG"
    [ -f "$NANOGPT" ] || { echo "no nanoGPT model.py at $NANOGPT: torch rounds skipped" >> "$LOG"; continue; }
    [ "$(left)" -gt 45 ] || break
    taskset -c "$CPUS" "$PY" "$ROOT/benchmarks/torch_twin_vs_nanogpt.py" "$NANOGPT" --preset small --rounds "$r" \
      --steps "$STEPS" --threads 2 --which ours,nanogpt --out "$STATE/torch" --resume --deadline "$DEADLINE" \
      --min-left 30 --timeout "${TORCH_TIMEOUT:-180}" >> "$LOG" 2>&1 || echo "torch round $r: rc $?" >> "$LOG"
  done
}

[ -f "$STATE/machine.txt" ] || machine
for stage in $STAGES; do
  case $stage in
    programs) programs ;;
    rounds) rounds ;;
    *) echo "unknown stage $stage (programs, rounds)" >&2; exit 2 ;;
  esac
done
cp "$STATE/machine.txt" "$LOG" "$OUT/" 2>/dev/null
for f in programs.md torch_programs.md; do [ -f "$STATE/$f" ] && cp "$STATE/$f" "$OUT/"; done
for b in jax torch; do [ -f "$STATE/$b/summary.md" ] && cp "$STATE/$b/summary.md" "$OUT/${b}_summary.md"; done
tar -czf "$OUT/twins_vs_public.tar.gz" -C "$STATE" . 2>/dev/null
cat "$STATE/machine.txt"
for b in jax torch; do [ -f "$STATE/$b/summary.md" ] && cat "$STATE/$b/summary.md"; done
tail -n 5 "$LOG"
