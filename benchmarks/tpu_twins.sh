#!/usr/bin/env bash
# The twins against their peers on one TPU chip, same sitting, each configuration in its own process, rounds
# interleaved: GPT-2 124M and Llama-300M at 8 x 1024, BERT-base at 32 x 512, bf16 compute with fp32 master
# weights and optimizer state, splash attention for the twins:
#   the JAX twin (jax:jit), the PyTorch twin through torchax with torchax's own F.cross_entropy (jax:torchax, what a
#   plain torchax user gets) and with +fused-loss (the JAX twin's loss), and for BERT Hugging Face's
#   FlaxBertForSequenceClassification with the twin's own optimizer and matmul precision setting.
# Every run is a child of benchmarks/jax_twin_vs_hf_flax.py: the trainer twinbench measures, timed synchronised per
# step, its median step, tokens/s and MFU against twinbench's measured bf16 peak and the datasheet's.
#
#   source benchmarks/tpu/setup.sh && benchmarks/tpu_twins.sh OUTDIR [GROUP ...]
#   benchmarks/tpu_twins.sh OUTDIR --dry-run      # the same flow on tiny presets on this machine's JAX (no splash)
#
# Groups, in this order by default (the order is the priority when time runs out):
#   gpt     gpt2-124m 8 x 1024: jit, torchax+fused-loss, torchax
#   bert    bert-base 32 x 512: jit, hf (FlaxBert), torchax+fused-loss
#   llama   llama-300m 8 x 1024: jit, torchax+fused-loss, torchax
#   extra   bert-base: jit, torchax (torchax's own loss: 2 labels, expected level with +fused-loss)
#   lever   (only when named) bert-base: jit against jit with --splash-layout head-dim-minor (the kernel's own
#           layout, which `auto` replaced for BERT's heads-first projections: 110.1 against 107.2 ms back to back).
#           SIDES_gpt=ours,ours@splash-layout=seq-minor (and for llama, or torchax@splash-layout=seq-minor): the
#           A/B of the sequence-minor layout where q, k, v come through a transpose, not yet run on the chip.
#           Measured slower on BERT-base (benchmarks/RESULTS.md): ours@mask-impl=cond (no segment ids, the mask
#           chosen per batch on the device: 1.007x) and, compiled without the chip, jit+fused-qkv (XLA's estimate
#           139.2 against 105.2 ms).
# SIDES_<group> (e.g. SIDES_llama=ours,torchax+fused-loss): the sides of that group instead of the ones above; a twin
#   side may carry spec options after @ (ours@mask-impl=cond), as benchmarks/jax_twin_vs_hf_flax.py says.
# ROUNDS (default 3): runs per configuration, interleaved (round r runs every side, the order reversed every other
#   round); the ratios are paired per round against the JAX twin.
# BUDGET (default 450): seconds from this script's start; no run starts with less than MIN_LEFT (default 60) s left,
#   a configuration's first (cold) run with less than MIN_LEFT_COLD (150), and none runs past it, so a session with a
#   10-minute limit per command (setup.sh's ~90 s included) always gets its results back.
# STATE (default /tmp/tpu_twins): kept on the VM for as long as it stays warm: JAX's persistent compilation cache
#   (the first run of a configuration compiles cold, the later ones load its programs: their first-step compile
#   says so) and every finished run. Calling the script again with the same STATE runs only what is missing
#   (rounds not yet run, runs that failed): a second call on the warm VM continues the first. A fresh sitting:
#   remove STATE (or name another).
# Cost on a v5e, estimated from the sittings (not yet measured this way): a cold run 45-90 s (compile 45-72 s), a
#   warm one 20-35 s; gpt ~5.5 min, bert ~6 min, llama ~7 min: one call does gpt and starts bert.
# OUTDIR gets each group's results.jsonl and summary.md, conditions.txt, status.txt and twins.md (all summaries).
set -uo pipefail

usage() { echo "usage: benchmarks/tpu_twins.sh OUTDIR [--dry-run | GROUP ...] (groups: gpt bert llama lever extra)" >&2; exit 2; }
[[ $# -ge 1 && $1 != -* ]] || usage
OUT=$1; shift
T0=$SECONDS
DRY=0; GROUPS_=()
for a in "$@"; do
  case $a in
    --dry-run) DRY=1 ;;
    gpt|bert|llama|lever|extra) GROUPS_+=("$a") ;;
    *) usage ;;
  esac
done
[[ ${#GROUPS_[@]} -gt 0 ]] || GROUPS_=(gpt bert llama extra)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}; [[ $PY == */* ]] && PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
STATE=${STATE:-/tmp/tpu_twins}; [[ $DRY -eq 1 ]] && STATE=$OUT/state
mkdir -p "$STATE"; STATE=$(cd "$STATE" && pwd)
"$PY" -c "import twinbench" 2>/dev/null || export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
ROUNDS=${ROUNDS:-3}; BUDGET=${BUDGET:-450}; MIN_LEFT=${MIN_LEFT:-60}; MIN_LEFT_COLD=${MIN_LEFT_COLD:-150}
DEADLINE=$(( $(date +%s) + BUDGET ))

if [[ $DRY -eq 1 ]]; then  # rehearsal: tiny shapes, the default attention (splash is TPU-only)
  declare -A PRESET=([gpt]=tiny [bert]=bert-tiny [llama]=llama-tiny [lever]=bert-tiny [extra]=bert-tiny)
  ATTN=default; STEPS=6; LIMIT=300
else
  "$PY" -m twinbench.environment --tpu || { echo "error: preflight failed (above); see docs/tpu.md" >&2; exit 2; }
  "$PY" -c 'import transformers, sys; sys.exit(int(transformers.__version__.split(".")[0]) >= 5)' 2>/dev/null ||
    echo "warning: no transformers < 5 here (Flax models): the hf runs will fail; carry .whl-tpu (benchmarks/tpu/fetch-wheels.sh WITH_HF=1) before setup.sh" >&2
  declare -A PRESET=([gpt]=gpt2-124m [bert]=bert-base [llama]=llama-300m [lever]=bert-base [extra]=bert-base)
  ATTN=splash; STEPS=15; LIMIT=240
fi
declare -A SIDES=([gpt]=ours,torchax+fused-loss,torchax [bert]=ours,hf,torchax+fused-loss
                  [llama]=ours,torchax+fused-loss,torchax [lever]=ours,ours@splash-layout=head-dim-minor [extra]=ours,torchax)
# the rehearsal has no splash kernel, so no --splash-layout: its lever runs a side with another spec option instead
[[ $DRY -eq 1 ]] && SIDES[lever]=ours,ours@mask-impl=cond

{
  echo "# tpu_twins conditions"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "git: $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
  "$PY" -c 'import hashlib, pathlib, twinbench; p = pathlib.Path(twinbench.__file__).parent; h = hashlib.sha1(); [h.update(f.read_bytes()) for f in sorted(p.rglob("*.py"))]; print(f"twinbench: {p} (sources sha1 {h.hexdigest()[:12]})")'
  echo "python: $("$PY" --version 2>&1)"
  "$PY" -c 'import importlib.metadata as m; print("versions:", ", ".join(f"{p} {m.version(p)}" for p in ("jax", "jaxlib", "libtpu", "flax", "optax", "torch", "torchax", "transformers") if __import__("importlib.util").util.find_spec(p) or p == "libtpu"))' 2>/dev/null || true
  echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "groups: ${GROUPS_[*]}; rounds $ROUNDS; budget ${BUDGET}s; state $STATE ($(ls "$STATE"/*/results.jsonl 2>/dev/null | wc -l) groups begun before)"
} > "$OUT/conditions.txt"
cat "$OUT/conditions.txt"
cd "$STATE"  # caches and runs stay out of the repository

collect() {  # every group's results and summary into OUTDIR, and one page of them all
  for g in gpt bert llama lever extra; do
    [[ -f $STATE/$g/results.jsonl ]] || continue
    mkdir -p "$OUT/$g"; cp "$STATE/$g/results.jsonl" "$OUT/$g/"; cp "$STATE/$g/summary.md" "$OUT/$g/" 2>/dev/null
  done
  cat "$OUT"/*/summary.md > "$OUT/twins.md" 2>/dev/null || true
}
trap collect EXIT

for g in "${GROUPS_[@]}"; do
  left=$(( DEADLINE - $(date +%s) ))
  if (( left < MIN_LEFT )); then echo "== $g not started: ${left}s left of the budget" | tee -a "$OUT/status.txt"; continue; fi
  var=SIDES_$g; sides=${!var:-${SIDES[$g]}}  # SIDES_gpt=ours,torchax+fused-loss ...: another set of sides
  echo "== $g ($sides, ${left}s left)"
  t0=$SECONDS
  # the script stops its own children at the deadline; the outer timeout is a backstop
  timeout --kill-after=10 $(( left + 20 )) "$PY" "$ROOT/benchmarks/jax_twin_vs_hf_flax.py" "${HF_PYTHON:-$PY}" \
    --preset "${PRESET[$g]}" --precision bf16 --attention-impl "$ATTN" --sides "$sides" --rounds "$ROUNDS" \
    --steps "$STEPS" --threads "$(nproc)" --timeout "$LIMIT" --deadline "$DEADLINE" --min-left "$MIN_LEFT" \
    --min-left-cold "$MIN_LEFT_COLD" \
    --compile-cache "$STATE/cache" --resume --out "$STATE/$g" 2>&1 | tee "$OUT/$g.log"
  echo "$g rc=${PIPESTATUS[0]} $((SECONDS - t0))s" | tee -a "$OUT/status.txt"
  collect
done
echo "total $((SECONDS - T0))s" | tee -a "$OUT/status.txt"
