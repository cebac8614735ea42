"""How much does the twinbench harness add to a step? Harness vs a bare hand-written loop of the same step.

For torch/eager and jax/jit on a preset (default ``small``), alternately, each in its own fresh process:
- harness: ``twinbench compare`` (per-step clock reads with a device sync before each, loss handles kept,
  batches fed by the worker), its mean steady-state step time ``step_ms_mean`` (the table shows the median);
- bare: the same model, optimizer and step function, a plain ``for`` loop over pre-made batches with ONE
  clock read and ONE sync around all steps (so JAX may even overlap dispatch across steps), mean step time;
- bare-sync: the same bare loop with a device sync after every step, as any per-step timing must do.

Prints both and the overhead in %. Speed is measured here, never asserted in tests.

    .venv/bin/python benchmarks/harness_overhead.py --preset small --steps 40 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def bare(framework: str, preset: str, steps: int, warmup: int, sync_each: bool = False) -> float:
    """Seconds per step of a hand-written loop (runs in a child process)."""
    import numpy as np

    from twinbench.data.text import batches, synthetic_corpus
    from twinbench.models.gpt import init_gpt
    from twinbench.spec import from_preset, validate

    spec = validate(from_preset(preset, {"steps": steps, "warmup": warmup}, framework=framework,
                                strategy="jit" if framework == "jax" else "eager"))
    weights = init_gpt(spec.model, 0)
    data = batches(synthetic_corpus(seed=1234), spec.train.batch, spec.train.seq, 0)
    host = [next(data) for _ in range(steps)]
    if framework == "jax":
        import jax

        from twinbench.models.gpt import FAMILY as GPT
        from twinbench.models.gpt import model_jax as gpt_jax
        from twinbench.strategies.jax_jit import Split, make_model, make_train_step, nnx_loss

        split, params = Split.of(make_model(spec, weights))
        tx = gpt_jax.make_optimizer(spec.train.lr, spec.train.weight_decay)
        opt_state = tx.init(params)
        step = jax.jit(make_train_step(nnx_loss(GPT, split), tx), donate_argnums=(0, 1))
        for x, y in host[:warmup]:
            params, opt_state, _ = step(params, opt_state, x, y)
        jax.block_until_ready(params)
        t0 = time.perf_counter()
        for x, y in host[warmup:]:
            params, opt_state, _loss = step(params, opt_state, x, y)
        jax.block_until_ready((params, opt_state))
    else:
        import os

        import torch

        from twinbench.models.gpt import model_torch as gpt_torch
        from twinbench.models.weights import canonical_to_torch

        torch.set_num_threads(len(os.sched_getaffinity(0)))
        model = gpt_torch.GPT(spec.model)
        canonical_to_torch(model, weights)
        opt = gpt_torch.make_optimizer(model, spec.train.lr, spec.train.weight_decay)

        def step(x: np.ndarray, y: np.ndarray) -> None:
            opt.zero_grad(set_to_none=True)
            gpt_torch.loss_fn(model, torch.from_numpy(x), torch.from_numpy(y)).backward()
            gpt_torch.clip_grads(model)
            opt.step()

        for x, y in host[:warmup]:
            step(x, y)
        t0 = time.perf_counter()
        for x, y in host[warmup:]:
            step(x, y)
    return (time.perf_counter() - t0) / (steps - warmup)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="small")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--child", choices=("torch", "jax"), help=argparse.SUPPRESS)
    ap.add_argument("--sync-each", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(bare(a.child, a.preset, a.steps, a.warmup, a.sync_each)))
        return
    results: dict[str, dict[str, list[float]]] = {fw: {"bare": [], "bare-sync": [], "harness": []}
                                                  for fw in ("torch", "jax")}
    for _ in range(a.repeats):
        for fw, strategy in (("torch", "eager"), ("jax", "jit")):
            for mode, extra in (("bare", []), ("bare-sync", ["--sync-each"])):
                child = subprocess.run([sys.executable, __file__, "--child", fw, "--preset", a.preset, "--steps",
                                        str(a.steps), "--warmup", str(a.warmup), *extra], capture_output=True,
                                       text=True, check=True)
                results[fw][mode].append(float(child.stdout.strip().splitlines()[-1]) * 1e3)
            with tempfile.TemporaryDirectory() as tmp:
                js = Path(tmp, "r.json")
                subprocess.run([sys.executable, "-m", "twinbench.cli", "compare", "--preset", a.preset,
                                "--framework", fw, "--strategies", strategy, "--steps", str(a.steps),
                                "--warmup", str(a.warmup), "--out", tmp, "--json", str(js)],
                               capture_output=True, check=True)
                results[fw]["harness"].append(json.loads(js.read_text())[0]["step_ms_mean"])
    print(f"preset {a.preset}, {a.steps} steps ({a.warmup} warm-up), {a.repeats} alternating repeats, "
          "each a fresh process; median over repeats")
    for fw, r in results.items():
        b, bs, h = (statistics.median(r[k]) for k in ("bare", "bare-sync", "harness"))
        print(f"{fw:6s} bare {b:7.2f}  bare-sync {bs:7.2f}  harness {h:7.2f} ms/step   harness overhead "
              f"{100 * (h / b - 1):+.1f}% vs bare, {100 * (h / bs - 1):+.1f}% vs bare-sync   "
              + "  ".join(f"{k} {[f'{v:.1f}' for v in vals]}" for k, vals in r.items()))


if __name__ == "__main__":
    main()
