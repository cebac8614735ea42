"""Load-independent anatomy of one JAX training step: the JAX twin's or Hugging Face's FlaxGPT2's (the pair of
``jax_twin_vs_hf_flax.py``), each in its own process.

Usage (the ``hf`` side needs transformers < 5 importable, as ``jax_twin_vs_hf_flax.py`` says):

    python benchmarks/jax_step_anatomy.py {ours|hf} [--preset small] [--steps 20] [--cores 1]
        [--xla-cpu-flags xla-default|tuned] [--hlo FILE]

Prints one JSON line: the compiled program's buffers (``Compiled.memory_analysis``: temporaries, arguments,
outputs, aliased), its op counts (fusions by kind, copies, transposes, dots, reductions, custom calls), and over
``--steps`` steady steps the process's page faults and CPU-seconds (user and kernel, ``getrusage``) per step. CPU
time is a proxy of the step's cost that other jobs on the machine disturb much less than wall time does (they
still share caches and memory bandwidth); run it pinned to ``--cores`` (set before XLA starts its thread pool).
GLIBC_TUNABLES is left as the caller's environment has it (unset: glibc's own malloc, the default host).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


def op_counts(hlo: str) -> dict[str, Any]:
    """Counts of the compiled program's instructions in its entry and fused computations."""
    kinds: Counter[str] = Counter(re.findall(r"kind=(k\w+)", hlo))
    ops: Counter[str] = Counter()
    for line in hlo.splitlines():
        m = re.match(r"\s*(?:ROOT )?%[\w.\-]+ = (?:\([^=]*\)|\S+) ([a-z\-]+)\(", line)
        if m:
            ops[m.group(1)] += 1
    ynn = len(re.findall(r'"__ynn|ynn_fusion|kind=kCustom, calls=.*ynn', hlo))
    return {"fusions": dict(kinds), "ops": {k: ops[k] for k in ("copy", "transpose", "dot", "reduce", "scatter",
                                                                  "gather", "custom-call", "broadcast", "select",
                                                                  "dynamic-slice", "dynamic-update-slice", "concatenate")},
            "ynn_mentions": ynn}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("side", choices=("ours", "hf"))
    ap.add_argument("--preset", default="small")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--cores", type=int, default=1)
    ap.add_argument("--xla-cpu-flags", default="xla-default")
    ap.add_argument("--import", dest="imports", default="", help="modules to import first, comma-separated (what "
                    "the other side's process holds: transformers imports torch)")
    ap.add_argument("--perf", help="record the timed steps with `perf record` (software clock) into this file")
    ap.add_argument("--fresh-state", action="store_true", help="copy the parameters and optimizer state into "
                    "fresh buffers before compiling (where the buffers came from, as a factor)")
    ap.add_argument("--hlo", help="write the compiled step's HLO text here")
    args = ap.parse_args()
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:args.cores])  # before XLA sizes its thread pool
    import importlib

    for name in filter(None, args.imports.split(",")):
        importlib.import_module(name)
    from twinbench import xla_flags

    xla_flags.apply(args.xla_cpu_flags)
    import jax
    import jax_twin_vs_hf_flax as pair
    import optax

    from twinbench.measure import device
    from twinbench.spec import from_preset

    spec = from_preset(args.preset)
    m, t = spec.model, spec.train
    shape = {"preset": args.preset, "family": m.family, "ff": m.ff, "num_labels": m.num_labels, "precision": "fp32",
             "layers": m.layers, "d_model": m.d_model, "heads": m.heads, "vocab": m.vocab, "context": m.context,
             "batch": t.batch, "seq": t.seq, "lr": t.lr, "weight_decay": t.weight_decay, "seed": t.seed,
             "attention_impl": "default"}
    device.set_fp32_matmul("jax", precision="fp32")
    if args.side == "hf":
        model, loss_of = pair.hf_model(shape)
        tx = pair.optimizer(args.preset)

        def step(params: Any, opt_state: Any, x: Any, y: Any) -> Any:
            loss, grads = jax.value_and_grad(loss_of)(params, x, y)
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss

        jitted = jax.jit(step, donate_argnums=(0, 1))
        state = [model.params, tx.init(model.params)]
    else:
        from twinbench.models import family
        from twinbench.strategies import registry

        tspec = pair.twin_spec(shape, "jit")
        trainer = registry.builder(tspec)(tspec, family.get(tspec).init_weights(tspec.model, tspec.train.seed))
        jitted, state = trainer.train_step, [trainer.params, trainer.opt_state]
    if args.fresh_state:  # every state buffer copied into a fresh one of XLA's, as a model initialised by JAX has
        state = [jax.tree.map(lambda a: a.copy(), s) for s in state]
        jax.block_until_ready(state)
    batches = pair.token_batches(shape)
    compiled = jitted.lower(state[0], state[1], *batches[0]).compile()
    hlo = compiled.as_text()
    if args.hlo:
        Path(args.hlo).write_text(hlo)
    mem = compiled.memory_analysis()
    out: dict[str, Any] = {"side": args.side, "xla_flags": os.environ.get("XLA_FLAGS", ""),
                           "glibc_tunables": os.environ.get("GLIBC_TUNABLES"), "cores": args.cores,
                           "temp_bytes": mem.temp_size_in_bytes, "argument_bytes": mem.argument_size_in_bytes,
                           "output_bytes": mem.output_size_in_bytes, "alias_bytes": mem.alias_size_in_bytes,
                           **op_counts(hlo)}

    def run(i: int) -> Any:
        state[0], state[1], loss = jitted(state[0], state[1], *batches[i % len(batches)])
        return loss

    for i in range(5):
        jax.block_until_ready(run(i))
    perf = None
    if args.perf:  # perf's software clock over the timed steps only (no hardware counters needed)
        import signal
        import subprocess
        import time

        perf = subprocess.Popen(["perf", "record", "-F", "997", "-o", args.perf, "-p", str(os.getpid())],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    for i in range(args.steps):
        loss = run(i)
        jax.block_until_ready((loss, state))
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    if perf is not None:
        perf.send_signal(signal.SIGINT)
        perf.wait()
    n = args.steps
    leaves = jax.tree.leaves(state)
    out |= {"threads": len(os.listdir("/proc/self/task")), "torch_imported": "torch" in sys.modules,
            "state_misaligned_64": sum(x.unsafe_buffer_pointer() % 64 != 0 for x in leaves),
            "state_leaves": len(leaves), "max_rss_mb": r1.ru_maxrss / 1024}
    out |= {"steps": n, "loss": float(loss), "faults_per_step": (r1.ru_minflt - r0.ru_minflt) / n,
            "user_s_per_step": (r1.ru_utime - r0.ru_utime) / n, "sys_s_per_step": (r1.ru_stime - r0.ru_stime) / n,
            "cpu_s_per_step": (r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) / n}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
