"""Our JAX twin (twinbench's jax/jit step) against Hugging Face's Flax GPT-2 or BERT, like with like.

Usage (the Flax models need transformers < 5, not a twinbench dependency: a venv with the same jax, flax, optax
and numpy as twinbench's, or twinbench's own python where transformers < 5 is importable (a TPU VM); the child
finds twinbench itself, this checkout's ``src`` is put on its ``PYTHONPATH``):

    python3 -m venv /tmp/hfvenv && /tmp/hfvenv/bin/pip install 'transformers<5' \
        $(.venv/bin/pip freeze | grep -E '^(jax|jaxlib|flax|optax|numpy)==')
    .venv/bin/python benchmarks/jax_twin_vs_hf_flax.py /tmp/hfvenv/bin/python [--preset small|gpt2-124m|bert-base]
        [--precision fp32|bf16] [--rounds 3] [--steps 30] [--threads 2] [--attention-impl default|splash]
        [--trace DIR] [--out runs/hf-flax]

GPT presets against FlaxGPT2LMHeadModel, BERT presets against FlaxBertForSequenceClassification: the same
shape (layers, d_model, heads, vocab, context, batch, seq), tanh GELU for GPT-2 (HF "gelu_new"), exact GELU for
BERT, tied LM head, biases, no dropout; the same optimizer chain on both, the twin's own
(``Family.jax_optimizer``: clip by global norm 1.0, AdamW with the family's betas and eps, weight decay on rank >= 2
parameters only) under one `jax.jit` with the state donated; the same XLA_FLAGS (twinbench's tuned CPU flags unless
`--xla-cpu-flags xla-default`), the same matmul precision setting as a twinbench run of that precision on that
platform (``measure.device.set_fp32_matmul``: `highest` for fp32; JAX's default for bf16 on a TPU, as the twin's
record says), the same cores and the same token batches (BERT: full-length sequences, no padding).
`--precision bf16`: each side's own bf16 recipe, said in the summary: HF's `dtype=bfloat16` computes every
layer in bf16 (LayerNorm, residual stream, softmax and loss included); the twin's +bf16 is torch.autocast's
(bf16 matmuls, LayerNorm, residual stream, softmax statistics and loss in fp32). Parameters and optimizer
state stay fp32 on both.

Interleaved rounds, a fresh process per measured configuration: each round runs `ours` and `hf` (the order
alternates between rounds), each child compiles, warms up and times `--steps` steps and prints its median;
with `--trace DIR` it then records 3 steps with `jax.profiler.trace` into DIR/<ours|hf> (`twinbench explain
DIR/ours DIR/hf` says where the difference goes). Writes `results.jsonl` (one line per child) and
`summary.md` (median per configuration, the paired ours/hf ratio of each round) into `--out`. About 1 min
per round on `small` on an idle 2-core machine.
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


def optimizer(preset: str) -> Any:
    """The twin's own optimizer chain for the preset (``Family.jax_optimizer``: clip by global norm 1.0, then AdamW
    with the family's betas and eps, weight decay on rank >= 2 parameters only), applied to HF's parameters: the
    same function, not a copy of it."""
    from twinbench.models import family
    from twinbench.spec import from_preset

    spec = from_preset(preset)
    return family.get(spec).jax_optimizer(spec.train.lr, spec.train.weight_decay)


def hf_model(shape: dict[str, Any]) -> tuple[Any, Any]:
    """The Hugging Face Flax model of the shape, and its loss of (params, x, y)."""
    import jax.numpy as jnp
    import optax

    dtype = jnp.bfloat16 if shape["precision"] == "bf16" else jnp.float32
    if shape["family"] == "bert":
        from transformers import BertConfig, FlaxBertForSequenceClassification

        cfg = BertConfig(vocab_size=shape["vocab"], hidden_size=shape["d_model"], num_hidden_layers=shape["layers"],
                         num_attention_heads=shape["heads"], intermediate_size=shape["ff"],
                         max_position_embeddings=shape["context"], num_labels=shape["num_labels"],
                         hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, hidden_act="gelu")
        model = FlaxBertForSequenceClassification(cfg, input_shape=(1, shape["seq"]), seed=shape["seed"], dtype=dtype)

        def loss_of(params: Any, x: Any, y: Any) -> Any:
            ids, types, mask = x
            logits = model(ids, attention_mask=mask, token_type_ids=types, params=params, train=False).logits
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

        return model, loss_of
    from transformers import FlaxGPT2LMHeadModel, GPT2Config

    cfg = GPT2Config(vocab_size=shape["vocab"], n_positions=shape["context"], n_embd=shape["d_model"],
                     n_layer=shape["layers"], n_head=shape["heads"], activation_function="gelu_new",
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True)
    model = FlaxGPT2LMHeadModel(cfg, input_shape=(1, shape["seq"]), seed=shape["seed"], dtype=dtype)

    def loss_of(params: Any, x: Any, y: Any) -> Any:
        logits = model(x, params=params, train=False).logits
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    return model, loss_of


def hf_trainer(shape: dict[str, Any]) -> tuple[Any, Any]:
    """The Hugging Face Flax model with the optimizer chain under one jit; returns (step, sync)."""
    import jax
    import optax

    model, loss_of = hf_model(shape)
    tx = optimizer(shape["preset"])
    params = model.params

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
    """twinbench's jax/jit trainer (the measured strategy itself) on the family's twin."""
    from twinbench.models import family
    from twinbench.spec import from_preset, validate
    from twinbench.strategies import registry

    spec = validate(from_preset(preset, {"batch": shape["batch"], "seq": shape["seq"], "precision": shape["precision"],
                                         "attention_impl": shape["attention_impl"]}, framework="jax", strategy="jit"))
    fam = family.get(spec)
    trainer = registry.builder(spec)(spec, fam.init_weights(spec.model, spec.train.seed))
    return trainer.step, trainer.sync


def token_batches(shape: dict[str, Any], n: int = 8) -> list[tuple[Any, Any]]:
    """The same batches for both sides: LM windows (GPT), or full-length sequences and labels (BERT)."""
    import numpy as np

    rng = np.random.default_rng(0)
    b, t = shape["batch"], shape["seq"]
    ids = [rng.integers(0, shape["vocab"], (b, t), dtype=np.int32) for _ in range(n)]
    if shape["family"] == "bert":
        ones = np.ones((b, t), np.int32)
        return [((x, np.zeros_like(x), ones), rng.integers(0, shape["num_labels"], (b,), dtype=np.int32)) for x in ids]
    return [(x, rng.integers(0, shape["vocab"], (b, t), dtype=np.int32)) for x in ids]


def child(which: str, shape: dict[str, Any], steps: int, threads: int, trace: str | None) -> None:
    import jax

    if jax.default_backend() == "cpu":  # the same cores for both sides (an accelerator's host threads stay free)
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:threads])
    from twinbench.measure import device

    # the matmul precision a twinbench run sets for this precision on this platform (the twin's own record says
    # it): fp32 runs `highest` on both sides; bf16 runs on a TPU keep JAX's default (bf16 operands, one pass)
    matmul_precision = device.set_fp32_matmul("jax", precision=shape["precision"])
    step, sync = hf_trainer(shape) if which == "hf" else ours_trainer(shape["preset"], shape)
    batches = token_batches(shape)
    t0 = time.perf_counter()
    step(*batches[0])
    sync()
    compile_s = time.perf_counter() - t0
    from sitting import cpu_info, time_steps

    times, loss = time_steps(step, sync, batches, WARMUP, steps)
    if trace:  # after the timed steps, which stay unaffected; synchronised per step as they were timed (and as
        # twinbench's own --trace runs them), so the profile's idle time between steps means the same on both sides
        with jax.profiler.trace(str(Path(trace) / which)):
            for b in batches[:3]:
                step(*b)
                sync()

    print(json.dumps({**cpu_info(), "which": which, "step_ms": statistics.median(times), "p10": sorted(times)[len(times) // 10],
                      "p90": sorted(times)[(9 * len(times)) // 10], "compile_s": compile_s,
                      "loss": float(loss), "threads": threads, "matmul_precision": matmul_precision, "device": jax.devices()[0].device_kind,
                      "versions": {"jax": jax.__version__}, "xla_flags": os.environ.get("XLA_FLAGS", "")}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("hf_python", help="python of a venv with transformers<5 (FlaxGPT2LMHeadModel, FlaxBert...)")
    ap.add_argument("--preset", default="small")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--xla-cpu-flags", default="tuned", choices=("tuned", "xla-default"))
    ap.add_argument("--out", type=Path, default=Path("runs/hf-flax"))
    ap.add_argument("--attention-impl", default="default", help="our twin's attention (default | chunked | splash)")
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    ap.add_argument("--trace", help="also record 3 steps of each side with jax.profiler.trace into TRACE/<side>")
    ap.add_argument("--sides", default="ours,hf", help="which sides to run (ours,hf; hf alone when a twinbench "
                    "record of the same run exists already, e.g. in benchmarks/tpu_check.sh)")
    ap.add_argument("--child", choices=("ours", "hf"), help=argparse.SUPPRESS)
    ap.add_argument("--shape", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, json.loads(args.shape), args.steps, args.threads, args.trace)
        return

    from twinbench import xla_flags
    from twinbench.spec import from_preset

    xla_flags.apply(args.xla_cpu_flags)  # into os.environ: both children inherit the same XLA_FLAGS
    spec = from_preset(args.preset)
    m, t = spec.model, spec.train
    shape = {"preset": args.preset, "family": m.family, "ff": m.ff, "num_labels": m.num_labels,
             "precision": args.precision, "layers": m.layers, "d_model": m.d_model, "heads": m.heads, "vocab": m.vocab,
             "context": m.context, "batch": t.batch, "seq": t.seq, "lr": t.lr, "weight_decay": t.weight_decay,
             "seed": t.seed, "attention_impl": args.attention_impl}
    sides = tuple(args.sides.split(","))
    if not sides or set(sides) - {"ours", "hf"}:
        sys.exit(f"--sides {args.sides}: choose from ours,hf")
    pythons = {"ours": sys.executable, "hf": args.hf_python}
    import twinbench

    src = str(Path(twinbench.__file__).resolve().parents[1])  # the HF venv's child imports this twinbench
    child_env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    with open(args.out / "results.jsonl", "w") as f:
        for r in range(args.rounds):
            for which in (sides if r % 2 == 0 else sides[::-1]):
                cmd = [pythons[which], __file__, "--child", which, "--shape", json.dumps(shape), "--steps",
                       str(args.steps), "--threads", str(args.threads), args.hf_python]
                cmd += ["--trace", args.trace] if args.trace else []
                proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=child_env)
                if proc.returncode:
                    sys.exit(f"{which} failed: {proc.stderr.strip().splitlines()[-1:]}")
                row = json.loads(proc.stdout.strip().splitlines()[-1]) | {"round": r}
                rows.append(row)
                f.write(json.dumps(row) + "\n")
                print(f"round {r} {which}: {row['step_ms']:.1f} ms/step (compile {row['compile_s']:.1f} s, "
                      f"loss {row['loss']:.3f})", flush=True)
    med = {w: statistics.median(x["step_ms"] for x in rows if x["which"] == w) for w in sides}
    ratios = [next(x["step_ms"] for x in rows if x["round"] == r and x["which"] == "ours")
              / next(x["step_ms"] for x in rows if x["round"] == r and x["which"] == "hf")
              for r in range(args.rounds)] if len(sides) == 2 else []
    hf_name = "FlaxBertForSequenceClassification" if m.family == "bert" else "FlaxGPT2LMHeadModel"
    recipe = ("; bf16: HF computes every layer in bf16, the twin as torch.autocast (fp32 LayerNorm, residual, "
              "softmax statistics, loss)") if args.precision == "bf16" else ""
    md = [f"# jax/jit twin vs Hugging Face {hf_name} ({args.preset}, {args.precision}, {args.threads} threads, "
          f"XLA flags {args.xla_cpu_flags}, our attention {args.attention_impl}{recipe})", "",
          f"machine: {rows[0].get('device')} (host {rows[0].get('cpu', 'unknown')}), jax "
          f"{rows[0].get('versions', {}).get('jax')}, {time.strftime('%Y-%m-%d')}", "",
          "matmul precision: " + "; ".join(sorted({f"{r['which']}: {r.get('matmul_precision')}" for r in rows})),
          "optimizer: the twin's own (Family.jax_optimizer) on both sides", "",
          "| configuration | median step ms over rounds |", "|---|---|",
          *(f"| {'twinbench jax/jit' if w == 'ours' else 'HF ' + hf_name} | {med[w]:.1f} |" for w in sides), "",
          *([f"paired ours/hf per round: {', '.join(f'{x:.2f}x' for x in ratios)}; ours faster in "
             f"{sum(x < 1 for x in ratios)} of {len(ratios)} rounds", ""] if ratios else [])]
    (args.out / "summary.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
