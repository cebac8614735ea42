"""Why scan-layers' compile stops short of a fraction of the unrolled step's on XLA:CPU: compile phases and kernels.

For each strategy (each in its own process, one after the other, ``--repeats`` rounds), the small preset's JAX
step at ``--layers`` layers: trace, lowering and XLA compile seconds, the steady step time (median of 5 after
one), and what the compiled program holds: fusions, *distinct* fused computations once their instruction
names are stripped, how many of those run inside a loop body, and how many the first run compiles too. XLA:CPU emits one kernel per distinct fused computation: an unrolled model's identical
layers share their kernels, so unrolling costs HLO passes, not code generation.

    python benchmarks/scan_compile_kernels.py [--layers 12] [--repeats 3] [--xla-cpu-flags tuned|xla-default]
        [STRATEGY[:REMAT_POLICY] ...]

The XLA flags are a twinbench run's (``--xla-cpu-flags``, default ``tuned``, merged with your ``XLA_FLAGS``),
applied before any process imports jax; the table's header prints them.

Defaults: jit, scan-layers, scan-layers+remat:dots-saveable, scan-layers+remat:full, jit+remat:full.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import statistics
import subprocess
import sys
import time

from twinbench import hlo_text, xla_flags

DEFAULT = ["jit", "scan-layers", "scan-layers+remat:dots-saveable", "scan-layers+remat:full", "jit+remat:full"]
_METADATA = re.compile(r",?\s*metadata=\{[^}]*\}")
_BODY = re.compile(r"body=%?([\w.\-]+)")
_NUMBERED = re.compile(r"%?([A-Za-z_][\w\-]*?)(?:[._]\d+)+\b")  # %region_76, %add.12: the name without its number


def kernels(hlo: str) -> tuple[int, set[str], set[str]]:
    """(fusion instructions, distinct fused computations, those of them called inside a loop body): two fused
    computations are the same kernel when their instructions have the same opcodes, shapes, layouts, operands
    (by position) and attributes, whatever their names (compiled HLO, :mod:`twinbench.hlo_text`). Each kernel
    is named by a digest of that description, so that runs in other processes can be compared."""
    mod = hlo_text.parse(hlo)
    calls = [(caller, ins.calls) for caller, instrs in mod.computations.items() for ins in instrs
             if ins.opcode == "fusion"]

    def digest(comp: str) -> str:
        instrs = mod.computations.get(comp, [])
        position = {ins.name: k for k, ins in enumerate(instrs)}
        desc = tuple((ins.opcode, tuple(ins.shapes), tuple(ins.layouts),
                      tuple(position.get(o, o) for o in ins.operands),
                      _NUMBERED.sub(r"\1", _METADATA.sub("", ins.attrs))) for ins in instrs)
        return hashlib.sha1(repr(desc).encode()).hexdigest()[:16]

    loop_bodies = {m.group(1) for instrs in mod.computations.values() for ins in instrs if ins.opcode == "while"
                   for m in [_BODY.search(ins.attrs)] if m}
    named = {comp: digest(comp) for comp in {comp for _, comp in calls}}
    in_loop = {named[comp] for caller, comp in calls if caller in loop_bodies}
    return len(calls), set(named.values()), in_loop


def child(strategy: str, policy: str, layers: int) -> None:
    import jax

    from twinbench.data.text import batches, synthetic_corpus
    from twinbench.measure.device import set_fp32_matmul
    from twinbench.models.gpt import init_gpt
    from twinbench.spec import from_preset, validate
    from twinbench.strategies import registry
    from twinbench.strategies.jax_jit import make_train_step

    set_fp32_matmul("jax")
    base = from_preset("small", {"layers": layers, "remat_policy": policy})
    x, y = next(batches(synthetic_corpus(), base.train.batch, base.train.seq, 0))
    spec = validate(base.evolve(framework="jax", strategy=strategy))
    t = registry.get("jax", strategy).load()(spec, init_gpt(base.model, 0))
    step = jax.jit(make_train_step(t.loss_of, t.tx), donate_argnums=(0, 1))
    t0 = time.perf_counter()
    traced = step.trace(t.params, t.opt_state, x, y)
    t1 = time.perf_counter()
    lowered = traced.lower()
    t2 = time.perf_counter()
    compiled = lowered.compile()
    t3 = time.perf_counter()
    fusions, distinct, in_loop = kernels(compiled.as_text())
    params, opt_state, times = t.params, t.opt_state, []
    for _ in range(6):
        s = time.perf_counter()
        params, opt_state, loss = compiled(params, opt_state, x, y)
        jax.block_until_ready(loss)
        times.append(time.perf_counter() - s)
    print(json.dumps({"trace_s": t1 - t0, "lower_s": t2 - t1, "xla_s": t3 - t2, "compile_s": t3 - t0,
                      "step_ms": statistics.median(times[1:]) * 1e3, "fusions": fusions,
                      "kernels": sorted(distinct), "in_loop": len(in_loop)}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="*", default=DEFAULT)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--xla-cpu-flags", choices=xla_flags.CHOICES, default="tuned")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.layers)
        return
    flags = xla_flags.apply(args.xla_cpu_flags)  # into os.environ, before any child imports jax: a run's flags
    rows: dict[str, list[dict]] = {r: [] for r in args.runs}
    for _ in range(args.repeats):
        for run in args.runs:
            strategy, _, policy = run.partition(":")
            p = subprocess.run([sys.executable, __file__, "--layers", str(args.layers), "--child", strategy,
                                policy or "full"], capture_output=True, text=True, timeout=600)
            if p.returncode:
                sys.exit(f"{run}: failed: {p.stderr.strip().splitlines()[-1:]}")
            rows[run].append(json.loads(p.stdout.strip().splitlines()[-1]))
    ref = rows[args.runs[0]]
    print(f"small preset, {args.layers} layers; median (min-max) of {args.repeats} processes per run, run in turn; "
          f"ratio = the median of each round's compile_s over {args.runs[0]}'s; XLA_FLAGS={flags or '(none)'}")
    print(f"{'run':34s} {'trace':>6s} {'lower':>6s} {'xla':>6s} {'compile s':>17s} {'ratio':>6s} "
          f"{'step ms':>8s} {'fusions':>8s} {'distinct':>8s} {'in loop':>8s} {'shared':>7s}")
    ref_kernels = set(ref[0]["kernels"])
    for run, rs in rows.items():
        def med(k: str, rs: list[dict] = rs) -> float:
            return statistics.median(r[k] for r in rs)
        comp = [r["compile_s"] for r in rs]
        ratio = statistics.median(r["compile_s"] / b["compile_s"] for r, b in zip(rs, ref, strict=True))
        print(f"{run:34s} {med('trace_s'):6.2f} {med('lower_s'):6.2f} {med('xla_s'):6.2f} "
              f"{med('compile_s'):5.2f} ({min(comp):.2f}-{max(comp):.2f}) {ratio:6.2f} {med('step_ms'):8.1f} "
              f"{rs[0]['fusions']:8d} {len(rs[0]['kernels']):8d} {rs[0]['in_loop']:8d} "
              f"{len(ref_kernels & set(rs[0]['kernels'])):7d}")
    print(f"distinct: kernels XLA:CPU compiles; in loop: those called inside a loop body (the scan's); shared: "
          f"those {args.runs[0]} compiles too")


if __name__ == "__main__":
    main()
