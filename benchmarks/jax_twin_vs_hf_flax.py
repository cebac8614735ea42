"""Our JAX twin (twinbench's jax/jit step) against Hugging Face's FlaxGPT2LMHeadModel, like with like.

Usage (the Flax model needs transformers < 5, not a twinbench dependency: a separate venv with the same jax,
flax, optax and numpy as twinbench's; the child finds twinbench itself, this checkout's ``src`` is put on its
``PYTHONPATH``):

    python3 -m venv /tmp/hfvenv && /tmp/hfvenv/bin/pip install 'transformers<5' \
        $(.venv/bin/pip freeze | grep -E '^(jax|jaxlib|flax|optax|numpy)==')
    .venv/bin/python benchmarks/jax_twin_vs_hf_flax.py /tmp/hfvenv/bin/python [--preset small] \
        [--rounds 3] [--steps 30] [--threads 2] [--attention-impl default] [--out runs/hf-flax]

Same shape (a preset's layers, d_model, heads, vocab, context, batch, seq), fp32, tanh GELU (HF
"gelu_new"), tied LM head, biases, no dropout; the same optimizer chain on both (clip by global norm 1.0,
AdamW b1 0.9, b2 0.95, eps 1e-8, weight decay on rank >= 2 parameters only) under one `jax.jit` with the
state donated; the same XLA_FLAGS (twinbench's tuned CPU flags unless `--xla-cpu-flags xla-default`), the
same fp32 matmul precision, the same cores and the same token batches.

Interleaved rounds, a fresh process per measured configuration: each round runs `ours` and `hf` (the order
alternates between rounds), each child compiles, warms up and times `--steps` steps and prints its median.
Writes `results.jsonl` (one line per child) and `summary.md` (median per configuration, the paired
ours/hf ratio of each round) into `--out`. About 1 min per round on `small` on an idle 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

WARMUP = 5


def decay_mask(params: Any) -> Any:
    import jax

    return jax.tree.map(lambda p: p.ndim >= 2, params)


def optimizer(lr: float, weight_decay: float) -> Any:
    import optax

    return optax.chain(optax.clip_by_global_norm(1.0),
                       optax.adamw(lr, b1=0.9, b2=0.95, eps=1e-8, weight_decay=weight_decay, mask=decay_mask))


def hf_trainer(shape: dict[str, Any]) -> tuple[Any, Any]:
    """FlaxGPT2LMHeadModel with the optimizer chain under one jit; returns (step, state)."""
    import jax
    import optax
    from transformers import FlaxGPT2LMHeadModel, GPT2Config

    cfg = GPT2Config(vocab_size=shape["vocab"], n_positions=shape["context"], n_embd=shape["d_model"],
                     n_layer=shape["layers"], n_head=shape["heads"], activation_function="gelu_new",
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True)
    model = FlaxGPT2LMHeadModel(cfg, input_shape=(1, shape["seq"]), seed=shape["seed"])
    tx = optimizer(shape["lr"], shape["weight_decay"])
    params = model.params

    def loss_of(params: Any, x: Any, y: Any) -> Any:
        logits = model(x, params=params, train=False).logits
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    def step(params: Any, opt_state: Any, x: Any, y: Any) -> Any:
        loss, grads = jax.value_and_grad(loss_of)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    jitted = jax.jit(step, donate_argnums=(0, 1))
    state = [params, tx.init(params)]

    def run(x: Any, y: Any) -> Any:
        state[0], state[1], loss = jitted(state[0], state[1], x, y)
        return loss

    return run, lambda: jax.block_until_ready(state)


def ours_trainer(preset: str, shape: dict[str, Any]) -> tuple[Any, Any]:
    """twinbench's jax/jit trainer (the measured strategy itself) on the twin's GPT."""
    from twinbench.models import family
    from twinbench.spec import from_preset, validate
    from twinbench.strategies import registry

    spec = validate(from_preset(preset, {"batch": shape["batch"], "seq": shape["seq"],
                                         "attention_impl": shape["attention_impl"]}, framework="jax", strategy="jit"))
    fam = family.get(spec)
    trainer = registry.builder(spec)(spec, fam.init_weights(spec.model, spec.train.seed))
    return trainer.step, trainer.sync


def child(which: str, shape: dict[str, Any], steps: int, threads: int) -> None:
    cpus = sorted(os.sched_getaffinity(0))[:threads]
    os.sched_setaffinity(0, cpus)
    import jax
    import numpy as np

    jax.config.update("jax_default_matmul_precision", "highest")  # twinbench's fp32 (set_fp32_matmul)
    step, sync = hf_trainer(shape) if which == "hf" else ours_trainer(shape["preset"], shape)
    rng = np.random.default_rng(0)
    batches = [(rng.integers(0, shape["vocab"], (shape["batch"], shape["seq"]), dtype=np.int32),
                rng.integers(0, shape["vocab"], (shape["batch"], shape["seq"]), dtype=np.int32))
               for _ in range(8)]
    t0 = time.perf_counter()
    step(*batches[0])
    sync()
    compile_s = time.perf_counter() - t0
    from sitting import cpu_info, time_steps

    times, loss = time_steps(step, sync, batches, WARMUP, steps)

    print(json.dumps({**cpu_info(), "which": which, "step_ms": statistics.median(times), "p10": sorted(times)[len(times) // 10],
                      "p90": sorted(times)[(9 * len(times)) // 10], "compile_s": compile_s,
                      "loss": float(loss), "threads": len(cpus), "xla_flags": os.environ.get("XLA_FLAGS", "")}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("hf_python", help="python of a venv with transformers<5 (FlaxGPT2LMHeadModel)")
    ap.add_argument("--preset", default="small")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--xla-cpu-flags", default="tuned", choices=("tuned", "xla-default"))
    ap.add_argument("--out", type=Path, default=Path("runs/hf-flax"))
    ap.add_argument("--attention-impl", default="default", help="our twin's attention (default | chunked)")
    ap.add_argument("--child", choices=("ours", "hf"), help=argparse.SUPPRESS)
    ap.add_argument("--shape", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, json.loads(args.shape), args.steps, args.threads)
        return

    from twinbench import xla_flags
    from twinbench.spec import from_preset

    xla_flags.apply(args.xla_cpu_flags)  # into os.environ: both children inherit the same XLA_FLAGS
    spec = from_preset(args.preset)
    m, t = spec.model, spec.train
    shape = {"preset": args.preset, "layers": m.layers, "d_model": m.d_model, "heads": m.heads, "vocab": m.vocab,
             "context": m.context, "batch": t.batch, "seq": t.seq, "lr": t.lr, "weight_decay": t.weight_decay,
             "seed": t.seed, "attention_impl": args.attention_impl}
    pythons = {"ours": sys.executable, "hf": args.hf_python}
    import twinbench

    src = str(Path(twinbench.__file__).resolve().parents[1])  # the HF venv's child imports this twinbench
    child_env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    with open(args.out / "results.jsonl", "w") as f:
        for r in range(args.rounds):
            for which in (("ours", "hf") if r % 2 == 0 else ("hf", "ours")):
                cmd = [pythons[which], __file__, "--child", which, "--shape", json.dumps(shape), "--steps",
                       str(args.steps), "--threads", str(args.threads), args.hf_python]
                proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=child_env)
                if proc.returncode:
                    sys.exit(f"{which} failed: {proc.stderr.strip().splitlines()[-1:]}")
                row = json.loads(proc.stdout.strip().splitlines()[-1]) | {"round": r}
                rows.append(row)
                f.write(json.dumps(row) + "\n")
                print(f"round {r} {which}: {row['step_ms']:.1f} ms/step (compile {row['compile_s']:.1f} s, "
                      f"loss {row['loss']:.3f})", flush=True)
    med = {w: statistics.median(x["step_ms"] for x in rows if x["which"] == w) for w in pythons}
    ratios = [next(x["step_ms"] for x in rows if x["round"] == r and x["which"] == "ours")
              / next(x["step_ms"] for x in rows if x["round"] == r and x["which"] == "hf") for r in range(args.rounds)]
    md = [f"# jax/jit twin vs Hugging Face FlaxGPT2LMHeadModel ({args.preset}, fp32, {args.threads} threads, "
          f"XLA flags {args.xla_cpu_flags}, our attention {args.attention_impl})", "",
          f"machine: {rows[0].get('cpu', 'unknown')}", "",
          "| configuration | median step ms over rounds |", "|---|---|",
          f"| twinbench jax/jit | {med['ours']:.1f} |", f"| HF FlaxGPT2LMHeadModel | {med['hf']:.1f} |", "",
          f"paired ours/hf per round: {', '.join(f'{x:.2f}x' for x in ratios)}; ours faster in "
          f"{sum(x < 1 for x in ratios)} of {len(ratios)} rounds", ""]
    (args.out / "summary.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
