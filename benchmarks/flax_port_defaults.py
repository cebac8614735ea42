"""How far twinbench's parity check sees a Flax port that keeps Flax's defaults where torch's differ.

The port of ``examples/flax_port/model_nnx.py`` as written (torch's LayerNorm epsilon 1e-5, exact GELU) and two
variants made from its text: Flax's LayerNorm epsilon (1e-6) and Flax's tanh GELU (``approximate=True``). Each is
checked against ``model_torch.py`` by the parity check ``compare --jax-model`` runs (loss and gradients on batch 0,
then 10 AdamW steps), in this process; prints one Markdown row per port. Numerics only: the machine's load does not
change the figures.

    .venv/bin/python benchmarks/flax_port_defaults.py [--preset tiny] [--layers 2 --d-model 32 --heads 2]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from twinbench.byo import parity, prepare
from twinbench.plan import build_specs

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "flax_port"
VARIANTS = {"as written (torch's defaults)": ("", ""),
            "Flax's LayerNorm epsilon 1e-6": ("EPS = 1e-5 ", "EPS = 1e-6 "),
            "Flax's tanh GELU": ("approximate=False", "approximate=True")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=32)
    ap.add_argument("--heads", type=int, default=2)
    args = ap.parse_args()
    source = (EXAMPLE / "model_nnx.py").read_text()
    print("| port | loss_rel | grad_rel | steps_abs | parity |\n|---|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, (old, new) in VARIANTS.items():
            assert old in source, f"{old!r} is no longer in model_nnx.py"
            port = Path(tmp) / f"port_{len(name)}.py"
            port.write_text(source.replace(old, new) if old else source)
            spec = build_specs(args.preset, "jax", "port", {"layers": args.layers, "d_model": args.d_model,
                                                            "heads": args.heads, "steps": 4, "warmup": 1},
                               user_model=f"{EXAMPLE / 'model_torch.py'}:build", user_jax_model=f"{port}:build_jax")[0]
            out = Path(tmp) / port.stem
            prepare.prepare(spec, out, with_ref=True)
            r = parity.check(spec, out)
            print(f"| {name} | {r['loss_rel']:.1e} | {r['grad_rel']:.1e} | {r['steps_abs']:.1e} | "
                  f"{'OK' if r['ok'] else 'MISMATCH'} |", flush=True)


if __name__ == "__main__":
    main()
