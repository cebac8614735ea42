"""Our torch twin (twinbench's torch/eager step) against nanoGPT's ``model.py`` trained as nanoGPT's
``train.py`` trains it, clipping included.

    .venv/bin/python benchmarks/torch_twin_vs_nanogpt.py NANOGPT/model.py [--rounds 3] [--out runs/nanogpt]

- ``ours``: the twin's GPT and twinbench's eager step (zero_grad, loss, backward, clip by global norm 1.0,
  AdamW betas 0.9/0.95, decay on rank >= 2 parameters);
- ``nanogpt``: nanoGPT's ``GPT`` (biases, dropout 0, tied head, exact erf GELU) with its own
  ``configure_optimizers`` (AdamW, the same decay groups) and ``train.py``'s loop: ``model(X, Y)``,
  ``backward``, ``clip_grad_norm_(1.0)``, ``step``, ``zero_grad(set_to_none=True)``;
- ``nanogpt-tanh``: the same, its GELU switched to the tanh approximation the twins use (GPT-2's
  ``gelu_new``): nanoGPT computing what the twin computes. ``nanogpt`` against ``nanogpt-tanh`` measures the
  one difference in what the two compute; ``ours`` against ``nanogpt-tanh`` is the rest (code, not maths).

Interleaved rounds, a fresh process per configuration, the order rotating between rounds; each child warms
up and times ``--steps`` steps on the preset's shape and prints its median, then runs as many again and prints
the median of its own CPU time per step (on a machine other processes load, with ``--threads 1``, the figure that
does not count the waits). Every row records the CPU model, its instruction-set extensions and the load. nanoGPT (MIT) is not part of twinbench: pass its ``model.py``
(https://github.com/karpathy/nanoGPT)::

    .venv/bin/python benchmarks/sitting.py --wait      # an idle machine first
    .venv/bin/python benchmarks/torch_twin_vs_nanogpt.py /path/to/nanoGPT/model.py [--preset small] \\
        [--rounds 3] [--steps 30] [--threads 2] [--out runs/nanogpt]

Writes ``results.jsonl`` and ``summary.md`` (medians, the paired ratios of each round, the machine).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

WARMUP = 5
WHICH = ("ours", "nanogpt", "nanogpt-tanh", "nanogpt-fused")
DEFAULT_WHICH = ("ours", "nanogpt", "nanogpt-tanh")


def nanogpt_step(model_py: str, shape: dict[str, Any], tanh: bool, fused: bool = False) -> tuple[Any, Any]:
    import torch
    from torch import nn

    spec = importlib.util.spec_from_file_location("nanogpt_model", model_py)
    assert spec and spec.loader
    ng = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ng)
    torch.manual_seed(shape["seed"])
    conf = ng.GPTConfig(block_size=shape["context"], vocab_size=shape["vocab"], n_layer=shape["layers"],
                        n_head=shape["heads"], n_embd=shape["d_model"], dropout=0.0, bias=True)
    model = ng.GPT(conf)
    if tanh:
        for block in model.transformer.h:
            block.mlp.gelu = nn.GELU(approximate="tanh")
    model.train()
    optimizer = model.configure_optimizers(shape["weight_decay"], shape["lr"], (0.9, 0.95), "cpu")
    if fused:  # nanoGPT asks for torch's fused AdamW on CUDA only; on a CPU it gets the per-tensor loop
        optimizer = torch.optim.AdamW(optimizer.param_groups, lr=shape["lr"], betas=(0.9, 0.95), fused=True)

    def step(x: Any, y: Any) -> Any:  # nanoGPT train.py's loop, one micro-step per step
        _, loss = model(torch.from_numpy(x), torch.from_numpy(y))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step, lambda: None


def ours_step(preset: str, shape: dict[str, Any]) -> tuple[Any, Any]:
    from twinbench.models import family
    from twinbench.spec import from_preset, validate
    from twinbench.strategies import registry

    spec = validate(from_preset(preset, {"batch": shape["batch"], "seq": shape["seq"]}, framework="torch",
                                strategy="eager"))
    trainer = registry.builder(spec)(spec, family.get(spec).init_weights(spec.model, spec.train.seed))
    return trainer.step, trainer.sync


def child(which: str, model_py: str, shape: dict[str, Any], steps: int, threads: int, trace: str | None) -> None:
    cpus = sorted(os.sched_getaffinity(0))[:threads]
    os.sched_setaffinity(0, cpus)
    import numpy as np
    import torch
    from sitting import cpu_info, time_steps

    torch.set_num_threads(len(cpus))
    load_before = os.getloadavg()[0]
    step, sync = ours_step(shape["preset"], shape) if which == "ours" else nanogpt_step(
        model_py, shape, which == "nanogpt-tanh", which == "nanogpt-fused")
    rng = np.random.default_rng(0)
    batches = [(rng.integers(0, shape["vocab"], (shape["batch"], shape["seq"]), dtype=np.int64),
                rng.integers(0, shape["vocab"], (shape["batch"], shape["seq"]), dtype=np.int64)) for _ in range(8)]
    times, loss = time_steps(step, sync, batches, WARMUP, steps)
    cpu_ms = []  # the same steps again, this process's CPU time per step: what a step costs whatever else runs
    for i in range(steps):  # (one thread: no spinning worker threads counted; a loaded machine's robust figure)
        c = time.process_time()
        step(*batches[i % len(batches)])
        sync()
        cpu_ms.append((time.process_time() - c) * 1e3)
    if trace:  # after the timed steps: 3 steps under torch.profiler, one ProfilerStep each (twinbench explain)
        from torch.profiler import ProfilerActivity, profile, record_function

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for i in range(3):
                with record_function(f"ProfilerStep#{i}"):
                    step(*batches[i])
        Path(trace).mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(Path(trace) / f"{which}.json"))
    print(json.dumps({**cpu_info(), "which": which, "step_ms": statistics.median(times),
                      "cpu_ms": statistics.median(cpu_ms),
                      "p10": sorted(times)[len(times) // 10], "p90": sorted(times)[(9 * len(times)) // 10],
                      "loss": float(loss), "threads": len(cpus), "torch": torch.__version__,
                      "load_avg_1m": os.getloadavg()[0], "load_avg_1m_before": load_before,
                      "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_py", help="nanoGPT's model.py")
    ap.add_argument("--preset", default="small")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("runs/nanogpt"))
    ap.add_argument("--which", default=",".join(DEFAULT_WHICH), help="configurations, comma-separated: ours, "
                    "nanogpt, nanogpt-tanh (its GELU as the twin's), nanogpt-fused (torch's fused AdamW, which "
                    "nanoGPT's configure_optimizers asks for on CUDA only)")
    ap.add_argument("--trace", help="also record 3 steps of each configuration with torch.profiler into "
                    "TRACE/<which>.json, after the timed steps (the last round's traces are kept)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds one child may run before it is stopped "
                    "(its round then has no row for it)")
    ap.add_argument("--deadline", type=float, help="Unix time after which no child starts (--min-left before it) "
                    "and none runs past it; the summary covers the rounds done")
    ap.add_argument("--min-left", type=float, default=45.0, help="with --deadline: seconds a child needs at least")
    ap.add_argument("--resume", action="store_true", help="keep --out's results.jsonl and run only the (round, "
                    "configuration) runs it lacks (rounds added by a larger --rounds)")
    ap.add_argument("--child", choices=WHICH, help=argparse.SUPPRESS)
    ap.add_argument("--shape", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.model_py, json.loads(args.shape), args.steps, args.threads, args.trace)
        return
    which_all = tuple(w for w in args.which.split(",") if w)
    if not which_all or set(which_all) - set(WHICH) or "ours" not in which_all:
        sys.exit(f"--which {args.which}: choose from {', '.join(WHICH)}, ours included")

    from twinbench.spec import from_preset

    spec = from_preset(args.preset)
    m, t = spec.model, spec.train
    shape = {"preset": args.preset, "layers": m.layers, "d_model": m.d_model, "heads": m.heads, "vocab": m.vocab,
             "context": m.context, "batch": t.batch, "seq": t.seq, "lr": t.lr, "weight_decay": t.weight_decay,
             "seed": t.seed}
    args.out.mkdir(parents=True, exist_ok=True)
    results = args.out / "results.jsonl"
    rows: list[dict[str, Any]] = []
    if args.resume and results.exists():
        rows = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    done = {(x["round"], x["which"]) for x in rows}
    with open(results, "a" if args.resume else "w") as f:
        for r in range(args.rounds):
            n = len(which_all)
            order = which_all[r % n:] + which_all[:r % n]
            for which in order:
                if (r, which) in done:
                    continue
                limit = args.timeout
                if args.deadline is not None:
                    left = args.deadline - time.time()
                    if left < args.min_left:
                        print(f"round {r} {which}: not started, {left:.0f} s left before the deadline", flush=True)
                        continue
                    limit = min(limit, left)
                cmd = [sys.executable, __file__, args.model_py, "--child", which, "--shape", json.dumps(shape),
                       "--steps", str(args.steps), "--threads", str(args.threads)]
                cmd += ["--trace", args.trace] if args.trace else []
                try:
                    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=limit)
                except subprocess.TimeoutExpired:
                    print(f"round {r} {which}: stopped after {limit:.0f} s", flush=True)
                    continue
                if proc.returncode:
                    sys.exit(f"{which} failed: {proc.stderr.strip().splitlines()[-1:]}")
                row = json.loads(proc.stdout.strip().splitlines()[-1]) | {"round": r}
                rows.append(row)
                f.write(json.dumps(row) + "\n")
                f.flush()
                print(f"round {r} {which}: {row['step_ms']:.1f} ms/step, {row['cpu_ms']:.1f} CPU-ms (loss {row['loss']:.3f}, "
                      f"load {row['load_avg_1m_before']:.2f} -> {row['load_avg_1m']:.2f})", flush=True)
    rounds = sorted({x["round"] for x in rows if all(any(y["round"] == x["round"] and y["which"] == w for y in rows)
                                                      for w in which_all)})
    if not rounds:
        sys.exit("no round ran every configuration")

    def of(r: int, w: str, key: str = "step_ms") -> float:
        return next(x[key] for x in rows if x["round"] == r and x["which"] == w)

    rows = [x for x in rows if x["round"] in rounds]  # the rounds every configuration ran: the pairs' rounds
    med = {w: statistics.median(x["step_ms"] for x in rows if x["which"] == w) for w in which_all}
    med_cpu = {w: statistics.median(x["cpu_ms"] for x in rows if x["which"] == w) for w in which_all}
    wanted = [p for p in (("ours", "nanogpt"), ("ours", "nanogpt-tanh"), ("nanogpt-tanh", "nanogpt"),
                          ("ours", "nanogpt-fused"), ("nanogpt-fused", "nanogpt")) if set(p) <= set(which_all)]
    pairs = {(*p, k): [of(r, p[0], k) / of(r, p[1], k) for r in rounds]
             for k in ("step_ms", "cpu_ms") for p in wanted}
    loads = [x["load_avg_1m_before"] for x in rows]
    md = [f"# torch/eager twin vs nanoGPT model.py + train.py's step ({args.preset}, fp32, {args.threads} "
          "threads, clip 1.0 on both)", "", f"machine: {rows[0]['cpu']}; torch {rows[0]['torch']}", "",
          "| configuration | median step ms over rounds | median CPU-ms per step |", "|---|---|---|",
          *(f"| {w} | {med[w]:.1f} | {med_cpu[w]:.1f} |" for w in which_all), "",
          f"load average (1 min) when each run started: {min(loads):.2f}-{max(loads):.2f}, median "
          f"{statistics.median(loads):.2f}; runs {rows[0]['date_utc']} to {rows[-1]['date_utc']} UTC", ""]
    for (x, y, k), ratios in pairs.items():
        md.append(f"paired {x}/{y} ({'wall' if k == 'step_ms' else 'CPU'} time) per round: "
                  f"{', '.join(f'{v:.3f}x' for v in ratios)}; median "
                  f"{statistics.median(ratios):.3f}x, largest {max(ratios):.3f}x "
                  f"({x} faster in {sum(v < 1 for v in ratios)} of {len(ratios)})")
    (args.out / "summary.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
