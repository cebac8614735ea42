"""The twins' compiled training steps against the public models', as programs: counts that are the same on any CPU.

    .venv/bin/python benchmarks/twin_programs.py HF_PYTHON [--preset small] [--xla-cpu-flags xla-default|tuned]
        [--sides ours,hf] [--dump DIR] [--json OUT.json]
    .venv/bin/python benchmarks/twin_programs.py --torch NANOGPT/model.py [--preset small]

JAX (the default): each side's whole training step (forward, loss, gradient, clipping and AdamW under one
``jax.jit``, parameters and optimizer state donated) is compiled for this machine's CPU in a fresh process, and its
optimized HLO is read: the instructions the entry computation runs by opcode and by fusion kind (a YNNPACK fusion
is a custom fusion naming its kind), its copies and transposes (instructions and bytes they write), every dot by
its operand shapes and contracting dimensions (the layout a matmul library receives), XLA's cost analysis
(``compiled.cost_analysis()``: flops, bytes accessed), and the compiled step's memory (``memory_analysis()``:
arguments, outputs, temporaries). ``ours`` is twinbench's jax/jit trainer on the preset (the twin as it is measured);
``hf`` Hugging Face's FlaxGPT2LMHeadModel of the same shape (tanh GELU, tied head, no dropout) with the twin's
own optimizer chain, as ``benchmarks/jax_twin_vs_hf_flax.py`` times it (``HF_PYTHON``: a Python with
transformers < 5; see that script's docstring); any other side is a twin strategy with spec options after ``@``
(``ours@...``, as that script takes them); ``before`` the twin of ``--before-src DIR`` (a copy of src/ before a
change). The printed table puts the sides' counts side by side, the first side
the reference; the dots that only one side runs (shape and dimension numbers) are listed.

``--torch NANOGPT_MODEL_PY``: the torch twin's eager step against nanoGPT's (``torch_twin_vs_nanogpt.py``'s
steps), each counted by ``torch.utils.flop_counter.FlopCounterMode`` (FLOPs by op) and by
``torch.profiler`` (aten op calls a step, by name): the same numbers on any CPU.

No timing anywhere: the counts are properties of the programs. ``--dump DIR`` keeps each side's HLO text
(DIR/<side>.hlo.txt).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# ops that move or shape data without arithmetic (their bytes are the program's data movement)
MOVES = ("copy", "transpose", "broadcast", "concatenate", "slice", "dynamic-slice", "dynamic-update-slice",
         "pad", "reverse", "gather", "scatter")


def program_counts(text: str) -> dict[str, Any]:
    """The counts of one compiled HLO module's text (``Compiled.as_text()``)."""
    from twinbench import hlo_text

    mod = hlo_text.parse(text)
    by_name = mod.instructions()
    entry = mod.computations.get(mod.entry, [])
    opcodes = collections.Counter(i.opcode for i in entry)
    fusion_kinds: collections.Counter[str] = collections.Counter()
    moves: dict[str, list[float]] = {}
    for ins in entry:
        if ins.opcode == "fusion":
            m = re.search(r"kind=(\w+)", ins.attrs)
            kind = m.group(1) if m else "?"
            custom = re.search(r'"kind":"(\w+)"', ins.attrs) or re.search(r"fusion_kind[\"=:]+(\w+)", ins.attrs)
            if custom:
                kind += f":{custom.group(1)}"
            fusion_kinds[kind] += 1
        if ins.opcode in MOVES:
            n, b = moves.get(ins.opcode, [0, 0.0])
            moves[ins.opcode] = [n + 1, b + ins.nbytes]
    # copies and transposes inside fusions too: a fused transpose still reorders memory
    fused_moves = collections.Counter(i.opcode for name, comp in mod.computations.items() if name != mod.entry
                                      for i in comp if i.opcode in ("copy", "transpose"))
    dots = []
    for comp in mod.computations.values():
        for ins in comp:
            if ins.opcode not in ("dot", "convolution"):
                continue
            ops = [by_name.get(o) for o in ins.operands[:2]]
            shapes = [f"{o.shapes[0][0]}{list(o.shapes[0][1])}" if o and o.shapes else "?" for o in ops]
            dims = re.search(r"lhs_batch_dims=\{[0-9,]*\}, lhs_contracting_dims=\{[0-9,]*\}.*?rhs_contracting_dims="
                             r"\{[0-9,]*\}|lhs_contracting_dims=\{[0-9,]*\}, rhs_contracting_dims=\{[0-9,]*\}",
                             ins.attrs)
            out = f"{ins.shapes[0][0]}{list(ins.shapes[0][1])}" if ins.shapes else "?"
            dots.append(f"{shapes[0]} x {shapes[1]} -> {out} ({dims.group(0) if dims else ins.attrs[:60]})"
                        + (" in a fusion" if comp is not entry else " STANDALONE (no fusion)"))
    return {"instructions": len(entry), "opcodes": dict(opcodes), "fusion_kinds": dict(fusion_kinds),
            "moves": {k: {"count": v[0], "mb": v[1] / 1e6} for k, v in moves.items()},
            "fused_copies_transposes": dict(fused_moves), "dots": sorted(dots)}


def compiled_facts(compiled: Any) -> dict[str, Any]:
    """XLA's cost analysis and memory analysis of a compiled step, beside the counts of its text."""
    text = compiled.as_text()
    cost = compiled.cost_analysis()
    if isinstance(cost, list):  # older JAX: one dict per device
        cost = cost[0]
    mem = compiled.memory_analysis()
    facts = program_counts(text)
    facts["cost"] = {"flops": float(cost.get("flops", 0.0)), "bytes_accessed": float(cost.get("bytes accessed", 0.0)),
                     "transcendentals": float(cost.get("transcendentals", 0.0))}
    facts["memory"] = {k: int(getattr(mem, f"{k}_size_in_bytes", 0) or 0)
                       for k in ("argument", "output", "alias", "temp", "generated_code")}
    facts["text"] = text
    return facts


def jax_child(side: str, preset: str) -> dict[str, Any]:
    """Compile one side's step for this CPU; its facts (``before``: the twin of ``--before-src``, whose twinbench
    the parent put first on this process's path)."""
    sys.path.insert(0, str(HERE))
    import jax
    import numpy as np
    from jax_twin_vs_hf_flax import hf_model, optimizer, shape_of

    from twinbench.measure import device

    device.set_fp32_matmul("jax", precision="fp32")
    shape = shape_of(preset, "fp32", "default")
    rng = np.random.default_rng(0)
    x = rng.integers(0, shape["vocab"], (shape["batch"], shape["seq"]), dtype=np.int32)
    y = rng.integers(0, shape["vocab"], (shape["batch"], shape["seq"]), dtype=np.int32)
    if side == "hf":
        import optax

        model, loss_of = hf_model(shape)
        tx = optimizer(preset)

        def step(params: Any, opt_state: Any, x: Any, y: Any) -> Any:
            loss, grads = jax.value_and_grad(loss_of)(params, x, y)
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss

        params = model.params
        compiled = jax.jit(step, donate_argnums=(0, 1)).lower(params, tx.init(params), x, y).compile()
    else:
        import jax_twin_vs_hf_flax as hf_bench

        trainer = twin_trainer(hf_bench, shape, side)
        compiled = trainer.train_step.lower(trainer.params, trainer.opt_state, x, y).compile()
    facts = compiled_facts(compiled)
    from sitting import cpu_info

    return {"side": side, "xla_flags": os.environ.get("XLA_FLAGS", ""), "jax": jax.__version__, **cpu_info(), **facts}


def twin_trainer(hf_bench: Any, shape: dict[str, Any], side: str) -> Any:
    """twinbench's JAX trainer of a twin side (``ours``, ``before``, ``ours@option=value``, another JAX strategy),
    as ``jax_twin_vs_hf_flax.py`` builds and times it."""
    from twinbench.models import family
    from twinbench.strategies import registry

    spec = hf_bench.twin_spec(shape, *hf_bench.side_strategy(side))
    return registry.builder(spec)(spec, family.get(spec).init_weights(spec.model, spec.train.seed))


def fmt_row(name: str, values: list[Any]) -> str:
    ref = values[0]
    cells = []
    for v in values:
        if isinstance(v, float):
            cells.append(f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}")
        else:
            cells.append(str(v))
    diff = ""
    if all(isinstance(v, (int, float)) for v in values) and len(values) > 1 and values[1] != ref:
        d = values[1] - ref
        diff = f"{d:+,.3g}" if isinstance(d, float) and abs(d) < 1000 else f"{d:+,.0f}"
    return f"| {name} | " + " | ".join(cells) + f" | {diff} |"


def jax_table(rows: list[dict[str, Any]]) -> list[str]:
    """Markdown: the sides' counts, side by side (the difference: second side minus first)."""
    sides = [r["side"] for r in rows]
    md = [f"compiled for: {rows[0]['cpu']} ({rows[0]['cores']} cores); jax {rows[0]['jax']}; XLA_FLAGS "
          f"{rows[0]['xla_flags'] or '(none)'}", "",
          "| | " + " | ".join(sides) + " | difference |", "|---|" + "---|" * (len(sides) + 1)]

    def get(r: dict[str, Any], *path: str) -> Any:
        for p in path:
            r = r.get(p, {}) if isinstance(r, dict) else {}
        return r if r != {} else 0

    md.append(fmt_row("XLA cost analysis: GFLOP", [get(r, "cost", "flops") / 1e9 for r in rows]))
    md.append(fmt_row("XLA cost analysis: MB accessed", [get(r, "cost", "bytes_accessed") / 1e6 for r in rows]))
    md.append(fmt_row("XLA cost analysis: transcendentals (M)", [get(r, "cost", "transcendentals") / 1e6 for r in rows]))
    for k in ("temp", "argument", "output", "alias"):
        md.append(fmt_row(f"memory: {k} MB", [get(r, "memory", k) / 1e6 for r in rows]))
    md.append(fmt_row("entry instructions", [r["instructions"] for r in rows]))
    kinds = sorted({k for r in rows for k in r["fusion_kinds"]})
    for k in kinds:
        md.append(fmt_row(f"fusions {k}", [r["fusion_kinds"].get(k, 0) for r in rows]))
    ops = sorted({k for r in rows for k in r["opcodes"]} - {"fusion"})
    for k in ops:
        what = "dots outside any fusion (entry dot)" if k == "dot" else f"entry {k}"
        md.append(fmt_row(what, [r["opcodes"].get(k, 0) for r in rows]))
    for k in sorted({k for r in rows for k in r["moves"]}):
        md.append(fmt_row(f"{k}: MB written", [get(r, "moves", k, "mb") for r in rows]))
    for k in ("copy", "transpose"):
        md.append(fmt_row(f"{k} inside fusions", [r["fused_copies_transposes"].get(k, 0) for r in rows]))
    md.append(fmt_row("dots, all", [len(r["dots"]) for r in rows]))
    md.append("")
    counts = [collections.Counter(r["dots"]) for r in rows]
    for i, r in enumerate(rows[1:], 1):
        only_a = counts[0] - counts[i]
        only_b = counts[i] - counts[0]
        if only_a or only_b:
            md.append(f"dots only {sides[0]} runs (against {r['side']}):")
            md += [f"- {n}x {d}" for d, n in sorted(only_a.items())]
            md.append(f"dots only {r['side']} runs:")
            md += [f"- {n}x {d}" for d, n in sorted(only_b.items())]
        else:
            md.append(f"{sides[0]} and {r['side']} run the same dots (operand shapes and contracting dimensions).")
    return md


def torch_child(side: str, preset: str, model_py: str) -> dict[str, Any]:
    """One torch side's step (the torch twin's eager step, or nanoGPT's train.py loop) counted: FLOPs by op
    (FlopCounterMode) and aten op calls a step (torch.profiler), on one steady step."""
    sys.path.insert(0, str(HERE))
    import numpy as np
    import torch
    from torch.profiler import ProfilerActivity, profile
    from torch.utils.flop_counter import FlopCounterMode
    from torch_twin_vs_nanogpt import nanogpt_step, ours_step

    from twinbench.spec import from_preset

    torch.set_num_threads(1)
    spec = from_preset(preset)
    m, t = spec.model, spec.train
    shape = {"preset": preset, "layers": m.layers, "d_model": m.d_model, "heads": m.heads, "vocab": m.vocab,
             "context": m.context, "batch": t.batch, "seq": t.seq, "lr": t.lr, "weight_decay": t.weight_decay,
             "seed": t.seed}
    step, sync = ours_step(preset, shape) if side == "ours" else nanogpt_step(model_py, shape, side == "nanogpt-tanh")
    rng = np.random.default_rng(0)
    x, y = (rng.integers(0, shape["vocab"], (shape["batch"], shape["seq"]), dtype=np.int64) for _ in range(2))
    for _ in range(2):  # the optimizer's state made, lazy paths taken
        step(x, y)
    sync()
    with FlopCounterMode(display=False) as fc:
        step(x, y)
    flops = {str(k): int(v) for k, v in fc.get_flop_counts().get("Global", {}).items()}
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step(x, y)
        sync()
    calls: collections.Counter[str] = collections.Counter()
    for ev in prof.events():
        if ev.name.startswith("aten::"):
            calls[ev.name] += 1
    top_level = collections.Counter(e.name for e in prof.events() if e.name.startswith("aten::")
                                    and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::")))
    from sitting import cpu_info

    return {"side": side, "torch": torch.__version__, **cpu_info(), "flops": flops,
            "aten_calls": dict(calls), "aten_top_level": dict(top_level)}


def torch_table(rows: list[dict[str, Any]]) -> list[str]:
    sides = [r["side"] for r in rows]
    md = [f"counted on: {rows[0]['cpu']}; torch {rows[0]['torch']}", "",
          "| | " + " | ".join(sides) + " | difference |", "|---|" + "---|" * (len(sides) + 1)]
    md.append(fmt_row("GFLOP (FlopCounterMode)", [sum(r["flops"].values()) / 1e9 for r in rows]))
    for k in sorted({k for r in rows for k in r["flops"]}):
        md.append(fmt_row(f"GFLOP {k}", [r["flops"].get(k, 0) / 1e9 for r in rows]))
    md.append(fmt_row("aten op calls (all levels)", [sum(r["aten_calls"].values()) for r in rows]))
    md.append(fmt_row("aten op calls (top level)", [sum(r["aten_top_level"].values()) for r in rows]))
    names = sorted({k for r in rows for k in r["aten_top_level"]})
    for k in names:
        vals = [r["aten_top_level"].get(k, 0) for r in rows]
        if len(set(vals)) > 1:
            md.append(fmt_row(f"top-level {k}", vals))
    md.append("")
    md.append("(top-level ops whose counts are equal on every side are not listed)")
    return md


def run_child(python: str, args: list[str], env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run([python, __file__, *args], capture_output=True, text=True, check=False, env=env,
                          timeout=900)
    if proc.returncode:
        sys.exit(f"{args}: failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    from twinbench import xla_flags

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("hf_python", nargs="?", help="a Python with transformers < 5 (the hf side)")
    ap.add_argument("--preset", default="small")
    ap.add_argument("--sides", default=None, help="JAX: ours,hf (default); torch: ours,nanogpt,nanogpt-tanh")
    ap.add_argument("--xla-cpu-flags", default="xla-default", choices=xla_flags.CHOICES,
                    help="XLA's own CPU flags (the default host), or twinbench's tuned ones")
    ap.add_argument("--torch", metavar="NANOGPT_MODEL_PY", help="count the torch twin against nanoGPT instead")
    ap.add_argument("--before-src", type=Path, help="the side `before`: the JAX twin of another source tree (a copy "
                    "of src/ before a change; benchmarks/jax_twin_vs_hf_flax.py --before-src times the same side)")
    ap.add_argument("--dump", type=Path, help="keep each side's compiled HLO text here (<side>.hlo.txt)")
    ap.add_argument("--json", type=Path, help="write every side's counts here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        out = torch_child(args.child, args.preset, args.torch) if args.torch else jax_child(args.child, args.preset)
        print(json.dumps(out))
        return
    import twinbench

    src = str(Path(twinbench.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])),
           "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
    if args.torch:
        sides = (args.sides or "ours,nanogpt,nanogpt-tanh").split(",")
        rows = [run_child(sys.executable, ["--child", s, "--preset", args.preset, "--torch", args.torch], env)
                for s in sides]
        md = [f"# torch twin vs nanoGPT: one steady step counted ({args.preset}, fp32)", "", *torch_table(rows)]
    else:
        xla = xla_flags.merged(env.get("XLA_FLAGS", ""), args.xla_cpu_flags, cpu=True)
        env.pop("XLA_FLAGS", None)
        if xla:
            env["XLA_FLAGS"] = xla
        sides = (args.sides or "ours,hf").split(",")
        if "hf" in sides and not args.hf_python:
            sys.exit("the hf side needs HF_PYTHON: a Python with transformers < 5")
        if "before" in sides and not (args.before_src and (args.before_src / "twinbench").is_dir()):
            sys.exit("--sides before: --before-src must name a source tree holding twinbench/ (a copy of src/)")
        before_env = env | {"PYTHONPATH": os.pathsep.join([str((args.before_src or Path()).resolve()), env["PYTHONPATH"]])}
        rows = [run_child(args.hf_python if s == "hf" else sys.executable, ["--child", s, "--preset", args.preset],
                          before_env if s == "before" else env) for s in sides]
        if args.dump:
            args.dump.mkdir(parents=True, exist_ok=True)
            for r in rows:
                (args.dump / f"{r['side'].replace('@', '_').replace('=', '-')}.hlo.txt").write_text(r["text"])
        md = [f"# compiled training steps: {', '.join(sides)} ({args.preset}, fp32, under one jax.jit)", "",
              *jax_table(rows)]
    for r in rows:
        r.pop("text", None)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print("\n".join(md))


if __name__ == "__main__":
    main()
