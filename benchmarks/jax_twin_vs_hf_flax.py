"""Our JAX twin (twinbench's jax/jit step) against Hugging Face's Flax GPT-2 or BERT, like with like.

Usage (the Flax models need transformers < 5, not a twinbench dependency: a venv with the same jax, flax, optax
and numpy as twinbench's, or twinbench's own python where transformers < 5 is importable (a TPU VM); the child
finds twinbench itself, this checkout's ``src`` is put on its ``PYTHONPATH``):

    python3 -m venv /tmp/hfvenv && /tmp/hfvenv/bin/pip install 'transformers<5' \
        $(.venv/bin/pip freeze | grep -E '^(jax|jaxlib|flax|optax|numpy)==')
    .venv/bin/python benchmarks/jax_twin_vs_hf_flax.py /tmp/hfvenv/bin/python [--preset small|gpt2-124m|bert-base]
        [--precision fp32|bf16] [--rounds 3] [--steps 30] [--threads 2] [--attention-impl default|splash]
        [--host-malloc tuned|system]
        [--trace DIR] [--out runs/hf-flax] [--sides ours,hf] [--compile-cache DIR] [--timeout S]
        [--deadline UNIX_TIME] [--resume] [--before-src DIR (adds the side `before`: the twin of that source tree)]

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

`--sides` may also name any JAX strategy twinbench runs on the preset: `torchax` (the PyTorch twin through torchax,
torchax's own lowering of every op: what a plain torchax user gets), `torchax+fused-loss` (its F.cross_entropy
lowered as the JAX twin's loss), `jit+...`: the trainer twinbench measures, timed here the same way as the others
(benchmarks/tpu_twins.sh runs the twins' sitting on a TPU so). A twin side may carry spec options after `@`, as
twinbench's flags name them: `ours@mask-impl=cond` (BERT's padding mask by `lax.cond`: no mask in a batch without
padding). The first side is the reference of the ratios.

Interleaved rounds, a fresh process per measured configuration: each round runs every side (the order
reversed every other round), each child compiles, warms up and times `--steps` steps (synchronised per step)
and prints its median, tokens/s, TFLOP/s (the twin's FLOPs per token on every side: the same model) and MFU
against twinbench's measured matmul peak (cached per machine) and the datasheet's; with `--trace DIR` it then
records 3 steps with `jax.profiler.trace` into DIR/<side> (`twinbench explain DIR/ours DIR/hf` says where the
difference goes). `--compile-cache DIR`: JAX's persistent compilation cache for every child (later runs of a side
load its programs). `--deadline`: no child starts with less than `--min-left` seconds before it (nor runs past it);
`--resume` keeps `--out`'s rows and runs only the missing ones. Each row also carries its process's page faults and
CPU-seconds (all threads, user and kernel) per step over its synchronised steps: the summary gives both per side and
the CPU-seconds' ratio per round, a proxy that other jobs on the machine disturb much less than wall time. Writes `results.jsonl` (one line per child) and
`summary.md` (per side: runs, median step, MFU, compile; the paired ratios of each round) into `--out`. About 1 min
per round on `small` on an idle 2-core machine.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
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


def side_strategy(side: str) -> tuple[str, dict[str, Any]]:
    """A twin side's JAX strategy (``ours``: ``jit``) and the spec options it carries after ``@``
    (``ours@mask-impl=cond`` -> ``("jit", {"mask_impl": "cond"})``; each value of its option's type, as twinbench's
    flags take it)."""
    from twinbench.spec import SpecError, option_value

    name, *opts = side.split("@")
    overrides: dict[str, Any] = {}
    for opt in opts:
        key, sep, value = opt.partition("=")
        if not sep or not key:
            sys.exit(f"--sides {side}: {opt!r} is not OPTION=VALUE")
        try:
            overrides[key.replace("-", "_")] = option_value(key.replace("-", "_"), value)
        except SpecError as e:
            sys.exit(f"--sides {side}: {e}")
    return ("jit" if name in ("ours", "before") else name), overrides


def twin_spec(shape: dict[str, Any], strategy: str, options: dict[str, Any] | None = None) -> Any:
    """The twinbench RunSpec of a side: the preset at the shape's batch, seq, precision and attention, as the JAX
    ``strategy`` (``jit``: the JAX twin; ``torchax``, ``torchax+fused-loss``: the PyTorch twin through torchax)."""
    from twinbench.spec import from_preset, validate

    return validate(from_preset(shape["preset"], {"batch": shape["batch"], "seq": shape["seq"],
                                                  "precision": shape["precision"],
                                                  "attention_impl": shape["attention_impl"], **(options or {})},
                                framework="jax", strategy=strategy))


def ours_trainer(shape: dict[str, Any], side: str = "ours") -> tuple[Any, Any]:
    """twinbench's trainer of the side's JAX strategy (the measured strategy itself, with the side's options) on the
    family's twin."""
    from twinbench.models import family
    from twinbench.strategies import registry

    spec = twin_spec(shape, *side_strategy(side))
    fam = family.get(spec)
    trainer = registry.builder(spec)(spec, fam.init_weights(spec.model, spec.train.seed))
    return trainer.step, trainer.sync


def flops_and_peak(shape: dict[str, Any], device_kind: str, platform: str, threads: int) -> dict[str, Any]:
    """The twin's training FLOPs per token for the shape (both sides train the same model: HF's TFLOP/s are counted
    with them), the measured matmul peak of this device and dtype (twinbench's, cached per machine; measured by the
    first child that asks) and the datasheet's, as a twinbench record gives them."""
    from twinbench.measure import peak
    from twinbench.models import family

    spec = twin_spec(shape, "jit")
    dtype = "bf16" if shape["precision"] == "bf16" else "fp32"
    out: dict[str, Any] = {"flops_per_token": family.get(spec).flops_per_token(spec.model, shape["seq"])}
    try:
        out["peak_tflops"] = peak.measured_tflops("jax", platform, device_kind, dtype, threads)
    except Exception as e:  # a peak that cannot be measured must not cost the run
        out["peak_error"] = f"{type(e).__name__}: {e}"
    out["peak_tflops_datasheet"] = peak.datasheet_tflops(device_kind, dtype) if platform != "cpu" else None
    return out


def shape_of(preset: str, precision: str, attention_impl: str) -> dict[str, Any]:
    """What both sides build from: the preset's model and training shape, the precision and the twins' attention
    (a plain dict: it crosses to the children as JSON)."""
    from twinbench.spec import from_preset

    spec = from_preset(preset)
    m, t = spec.model, spec.train
    return {"preset": preset, "family": m.family, "ff": m.ff, "num_labels": m.num_labels, "precision": precision,
            "layers": m.layers, "d_model": m.d_model, "heads": m.heads, "vocab": m.vocab, "context": m.context,
            "batch": t.batch, "seq": t.seq, "lr": t.lr, "weight_decay": t.weight_decay, "seed": t.seed,
            "attention_impl": attention_impl}


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
    cache_dir = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    if cache_dir:  # --compile-cache: JAX's persistent cache, every program (what twinbench's --cache warm sets)
        jax.config.update("jax_compilation_cache_dir", cache_dir)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    from twinbench.measure import device

    # the matmul precision a twinbench run sets for this precision on this platform (the twin's own record says
    # it): fp32 runs `highest` on both sides; bf16 runs on a TPU keep JAX's default (bf16 operands, one pass)
    matmul_precision = device.set_fp32_matmul("jax", precision=shape["precision"])
    step, sync = hf_trainer(shape) if which == "hf" else ours_trainer(shape, which)
    batches = token_batches(shape)
    t0 = time.perf_counter()
    step(*batches[0])
    sync()
    compile_s = time.perf_counter() - t0
    from sitting import cpu_info, time_steps

    from twinbench.measure import page_faults
    from twinbench.measure.clock import time_window
    from twinbench.measure.compiles import JaxCompiles

    compiles = JaxCompiles()  # a program compiled inside the window makes it no steady-state time (None)
    before = page_faults.usage()
    times, loss = time_steps(step, sync, batches, WARMUP, steps)
    # what the operating system saw over those steps (warm-up included: every one is past the compile): page faults
    # and the process's CPU-seconds per step, which other jobs on the machine disturb much less than wall time
    after = page_faults.usage()
    host: dict[str, Any] = dataclasses.asdict(page_faults.per_step(before, after, WARMUP + steps))
    if before is not None and after is not None:
        host["cpu_s_per_step"] = (after.user_s - before.user_s + after.system_s - before.system_s) / (WARMUP + steps)
    # the same number of steps again, dispatched back to back, synchronised at the window's two ends only
    window_s = time_window(lambda i: step(*batches[i % len(batches)]), sync, steps, compiles)
    window_ms = window_s * 1e3 if window_s is not None else None
    if trace:  # after the timed steps, which stay unaffected; synchronised per step as they were timed (and as
        # twinbench's own --trace runs them), so the profile's idle time between steps means the same on both sides
        with jax.profiler.trace(str(Path(trace) / which)):
            for b in batches[:3]:
                step(*b)
                sync()

    step_ms = statistics.median(times)
    from twinbench import backends

    # the device's name as twinbench's own runs key their peak by it (a CPU: the host's model, not 'cpu', whose
    # cached peak here was measured under a load of 4.7 a core and made every MFU of this benchmark 359-394%)
    platform, kind, _ = backends.get("jax").describe()
    speed = flops_and_peak(shape, kind, platform, threads)
    tflops = speed["flops_per_token"] * shape["batch"] * shape["seq"] / (step_ms / 1e3) / 1e12
    speed |= {"achieved_tflops": tflops, "tokens_per_s": shape["batch"] * shape["seq"] / (step_ms / 1e3),
              "mfu": tflops / speed["peak_tflops"] if speed.get("peak_tflops") else None,
              "mfu_datasheet": tflops / speed["peak_tflops_datasheet"] if speed.get("peak_tflops_datasheet") else None}
    window_tflops = tflops * step_ms / window_ms if window_ms else None  # the same work in the window's time
    speed |= {"window_ms": window_ms, "window_tflops": window_tflops,
              "mfu_window": window_tflops / speed["peak_tflops"] if window_tflops and speed.get("peak_tflops") else None,
              "mfu_datasheet_window": (window_tflops / speed["peak_tflops_datasheet"]
                                       if window_tflops and speed.get("peak_tflops_datasheet") else None)}
    import importlib.metadata as md

    versions = {"jax": jax.__version__}
    for pkg in ("jaxlib", "libtpu", "flax", "optax", "torch", "torchax", "transformers"):
        with contextlib.suppress(md.PackageNotFoundError):
            versions[pkg] = md.version(pkg)
    print(json.dumps({**cpu_info(), "which": which, "step_ms": step_ms, "p10": sorted(times)[len(times) // 10],
                      "p90": sorted(times)[(9 * len(times)) // 10], "compile_s": compile_s, **speed, **host,
                      "compile_cache": "persistent" if cache_dir else "none", "platform": platform,
                      "loss": float(loss), "threads": threads, "matmul_precision": matmul_precision, "device": kind, "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                      "versions": versions, "xla_flags": os.environ.get("XLA_FLAGS", ""),
                      "glibc_tunables": os.environ.get("GLIBC_TUNABLES")}))


def side_name(which: str, family: str) -> str:
    """What a side is, in a table: the HF model, or the twinbench strategy it runs."""
    if which == "hf":
        return "HF " + ("FlaxBertForSequenceClassification" if family == "bert" else "FlaxGPT2LMHeadModel")
    if which.split("@")[0] == "before":
        return "the twin before the change (--before-src): jax:jit"
    strategy, options = side_strategy(which)
    return "twinbench jax:" + strategy + "".join(f" --{k.replace('_', '-')} {v}" for k, v in options.items())


def check_sides(sides: tuple[str, ...], shape: dict[str, Any]) -> None:
    """Each side is ``hf``, ``ours`` (the JAX twin's jit) or a JAX strategy twinbench runs on this preset."""
    from twinbench.config import SpecError

    if not sides:
        sys.exit("--sides: name at least one side")
    for side in sides:
        if side == "hf":
            if shape["family"] not in ("gpt", "bert"):
                sys.exit(f"--sides hf: no Hugging Face Flax model here for the {shape['family']} family (gpt, bert)")
            continue
        try:
            twin_spec(shape, *side_strategy(side))
        except SpecError as e:
            sys.exit(f"--sides {side}: {e}")


def versions_line(rows: list[dict[str, Any]]) -> str:
    """The package versions the runs used: those every side shared, then any a side had of its own (the Hugging
    Face side may run in another environment, with another transformers)."""
    per_side: dict[str, dict[str, str]] = {}
    for r in rows:
        per_side.setdefault(r["which"], r.get("versions", {}))
    shared = {k: v for k, v in next(iter(per_side.values()), {}).items()
              if all(vs.get(k) == v for vs in per_side.values())}
    own = [f"{w}: " + ", ".join(f"{k} {v}" for k, v in vs.items() if k not in shared)
           for w, vs in per_side.items() if set(vs) - set(shared)]
    return ", ".join(f"{k} {v}" for k, v in shared.items()) + "".join(f"; {o}" for o in own)


def faults(mine: list[dict[str, Any]]) -> str:
    """The runs' median page faults a step (``-`` where not measured)."""
    vals = [r["page_faults_per_step"] for r in mine if r.get("page_faults_per_step") is not None]
    return f"{statistics.median(vals):,.0f}" if vals else "-"


def spread3(key: str, mine: list[dict[str, Any]]) -> str:
    """The runs' median of ``key`` and its range, to three decimals (``-`` where not measured)."""
    vals = [r[key] for r in mine if r.get(key) is not None]
    return f"{statistics.median(vals):.3f} ({min(vals):.3f}-{max(vals):.3f})" if vals else "-"


def summary(rows: list[dict[str, Any]], sides: tuple[str, ...], args: argparse.Namespace,
            family: str) -> list[str]:
    """The summary's lines: per side the runs' medians, MFU and compile; per round each side over the first."""
    ok = [r for r in rows if r.get("status", "ok") == "ok"]
    first = ok[0] if ok else {}
    recipe = ("; bf16: HF computes every layer in bf16, the twins as torch.autocast (fp32 LayerNorm, residual, "
              "softmax statistics, loss)") if args.precision == "bf16" else ""
    md = [f"# {', '.join(side_name(w, family) for w in sides)} ({args.preset}, {args.precision}, "
          f"{args.threads} threads, XLA_FLAGS {first.get('xla_flags') or '(none)'}, "
          f"GLIBC_TUNABLES {first.get('glibc_tunables') or '(none)'}, the twins' attention {args.attention_impl}{recipe})",
          "", f"machine: {first.get('device')} (host {first.get('cpu', 'unknown')}), versions "
          f"{versions_line(ok)}; runs "
          f"{min((r.get('date_utc', '') for r in ok), default='')} to {max((r.get('date_utc', '') for r in ok), default='')} UTC",
          "", "matmul precision: " + "; ".join(sorted({f"{r['which']}: {r.get('matmul_precision')}" for r in ok})),
          "optimizer: the twin's own (Family.jax_optimizer) on every side; compile cache: "
          + ", ".join(sorted({str(r.get("compile_cache")) for r in ok})), "",
          "Each run times its steps twice: synchronised after every step (the device idles while the host dispatches "
          "the next), then the same number again dispatched back to back and synchronised at the window's two ends "
          "(the host's work overlaps the device's, as in a training loop that reads nothing back per step).", "",
          "| configuration | runs | median step ms, synchronised per step (range of the runs' medians) | MFU, "
          "measured peak | MFU, datasheet | ms per step, back to back (range) | MFU back to back, measured peak "
          "(datasheet) | first-step compile s (each run) | last loss | page faults a step | CPU-s a step, all threads "
          "(range) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for w in sides:
        mine = [r for r in ok if r["which"] == w]
        failed = [r for r in rows if r["which"] == w and r.get("status", "ok") != "ok"]
        if not mine:
            md.append(f"| {side_name(w, family)} | 0 | - | - | - | - | - | - | "
                      f"{failed[-1].get('error', '') if failed else ''} | - | - |")
            continue

        def spread(key: str, mine: list[dict[str, Any]] = mine) -> str:
            vals = [r[key] for r in mine if r.get(key) is not None]
            return f"{statistics.median(vals):.1f} ({min(vals):.1f}-{max(vals):.1f})" if vals else "-"

        def pct(key: str, mine: list[dict[str, Any]] = mine) -> str:
            vals = [r[key] for r in mine if r.get(key) is not None]
            return f"{100 * statistics.median(vals):.1f}%" if vals else "-"

        md.append(f"| {side_name(w, family)} | {len(mine)}{f' (+{len(failed)} failed)' if failed else ''} | "
                  f"{spread('step_ms')} | {pct('mfu')} | {pct('mfu_datasheet')} | {spread('window_ms')} | "
                  f"{pct('mfu_window')} ({pct('mfu_datasheet_window')}) | "
                  f"{', '.join(format(r['compile_s'], '.0f') for r in mine)} | {mine[-1]['loss']:.3f} | "
                  f"{faults(mine)} | {spread3('cpu_s_per_step', mine)} |")
    ref = sides[0]
    for w in sides[1:]:
        for key, how in (("step_ms", "synchronised per step"), ("window_ms", "back to back"),
                         ("cpu_s_per_step", "CPU-seconds a step (all threads; a proxy, less disturbed by other jobs)")):
            ratios = []
            for r in sorted({x["round"] for x in ok}):
                a = [x[key] for x in ok if x["round"] == r and x["which"] == w and x.get(key) is not None]
                b = [x[key] for x in ok if x["round"] == r and x["which"] == ref and x.get(key) is not None]
                if a and b:
                    ratios.append(a[0] / b[0])
            if ratios:
                md += ["", f"{side_name(w, family)} / {side_name(ref, family)}, {how}, paired per round: "
                       f"{', '.join(f'{x:.3f}' for x in ratios)}; median {statistics.median(ratios):.3f}, "
                       f"largest {max(ratios):.3f}"]
    return [*md, ""]


def main() -> None:
    from twinbench import host_malloc, xla_flags

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("hf_python", help="python of a venv with transformers<5 (FlaxGPT2LMHeadModel, FlaxBert...)")
    ap.add_argument("--preset", default="small")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--xla-cpu-flags", default="tuned", choices=xla_flags.CHOICES)
    ap.add_argument("--host-malloc", default="tuned", choices=host_malloc.CHOICES,
                    help="glibc malloc tunables for both sides' processes, as twinbench's own runs have them")
    ap.add_argument("--out", type=Path, default=Path("runs/hf-flax"))
    ap.add_argument("--attention-impl", default="default", help="the twins' attention (default | chunked | splash)")
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    ap.add_argument("--trace", help="also record 3 steps of each side with jax.profiler.trace into TRACE/<side>")
    ap.add_argument("--sides", default="ours,hf", help="the sides, comma-separated, the first the reference of the "
                    "ratios: hf (Hugging Face's Flax model), ours (the JAX twin, jax:jit) or any JAX strategy "
                    "twinbench runs on the preset (torchax, torchax+fused-loss: the PyTorch twin through torchax)")
    ap.add_argument("--compile-cache", type=Path, help="JAX's persistent compilation cache for every child (the "
                    "first run of a side fills it, later ones load from it: their first-step compile says so)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds one child may run before it is stopped "
                    "(its row says so, the others go on)")
    ap.add_argument("--deadline", type=float, help="Unix time after which no child starts (--min-left before it), "
                    "and no child runs past; the summary covers the runs done")
    ap.add_argument("--min-left", type=float, default=60.0, help="with --deadline: seconds a child needs at least")
    ap.add_argument("--min-left-cold", type=float, default=None, help="with --deadline: the same for the first run "
                    "of a side (a cold compile; default --min-left)")
    ap.add_argument("--resume", action="store_true", help="keep --out's results.jsonl and run only the (round, "
                    "side) runs it lacks")
    ap.add_argument("--before-src", type=Path, help="the side `before`: the JAX twin (jax:jit) of another source tree "
                    "(a copy of src/ at an earlier commit, e.g. `git archive REV src | tar -x -C DIR`), so a change of "
                    "the twin is timed against the twin before it in the same interleaved rounds")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--shape", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, json.loads(args.shape), args.steps, args.threads, args.trace)
        return

    xla_flags.apply(args.xla_cpu_flags)  # into os.environ: both children inherit the same XLA_FLAGS
    shape = shape_of(args.preset, args.precision, args.attention_impl)
    sides = tuple(s for s in args.sides.split(",") if s)
    check_sides(sides, shape)
    if any(s.split("@")[0] == "before" for s in sides) and not (args.before_src and (args.before_src / "twinbench").is_dir()):
        sys.exit("--sides before: --before-src must name a source tree holding twinbench/ (a copy of src/)")
    import twinbench

    src = str(Path(twinbench.__file__).resolve().parents[1])  # the HF venv's child imports this twinbench
    child_env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])),
                 **host_malloc.worker_env(args.host_malloc)}  # the same allocator settings on both sides
    if args.compile_cache:
        child_env["JAX_COMPILATION_CACHE_DIR"] = str(args.compile_cache.resolve())
    args.out.mkdir(parents=True, exist_ok=True)
    results = args.out / "results.jsonl"
    rows: list[dict[str, Any]] = []
    if args.resume and results.exists():
        rows = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    done = {(r["round"], r["which"]) for r in rows if r.get("status", "ok") == "ok"}
    with open(results, "a" if args.resume else "w") as f:
        for r in range(args.rounds):
            for which in (sides if r % 2 == 0 else sides[::-1]):
                if (r, which) in done:
                    continue
                limit = args.timeout
                if args.deadline is not None:
                    left = args.deadline - time.time()
                    ran = any(x["which"] == which and x.get("status", "ok") == "ok" for x in rows)
                    need = args.min_left if ran or args.min_left_cold is None else args.min_left_cold
                    if left < need:
                        print(f"round {r} {which}: not started, {left:.0f} s left before the deadline", flush=True)
                        continue
                    limit = min(limit, left)
                env = child_env
                if which.split("@")[0] == "before":  # that tree's twinbench first on the path
                    env = {**child_env, "PYTHONPATH": os.pathsep.join([str(args.before_src.resolve()),
                                                                        child_env["PYTHONPATH"]])}
                cmd = [sys.executable if which != "hf" else args.hf_python, __file__, "--child", which, "--shape",
                       json.dumps(shape), "--steps", str(args.steps), "--threads", str(args.threads), args.hf_python]
                cmd += ["--trace", args.trace] if args.trace else []
                try:
                    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env,
                                          timeout=limit)
                    lines = proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"]
                    error = lines[-1] if proc.returncode else None
                except subprocess.TimeoutExpired:
                    proc, error = None, f"stopped after {limit:.0f} s"
                if error:
                    row = {"which": which, "round": r, "status": "failed", "error": error}
                else:
                    row = json.loads(proc.stdout.strip().splitlines()[-1]) | {"round": r, "status": "ok"}
                rows.append(row)
                f.write(json.dumps(row) + "\n")
                f.flush()
                print(f"round {r} {which}: " + (f"{row['step_ms']:.1f} ms/step ({row.get('window_ms') or 0:.1f} "
                      f"back to back), MFU "
                      f"{100 * (row.get('mfu') or 0):.1f}% (first step {row['compile_s']:.1f} s, loss {row['loss']:.3f})"
                      if not error else f"failed: {error}"), flush=True)
    md = summary(rows, sides, args, shape["family"])
    (args.out / "summary.md").write_text("\n".join(md))
    print("\n".join(md))
    if not any(r.get("status", "ok") == "ok" for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
