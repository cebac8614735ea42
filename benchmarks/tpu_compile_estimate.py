"""A JAX strategy's step compiled for a TPU on this machine (libtpu's deviceless compile, no chip), and what the
TPU compiler says of it: the memory a run on the chip reports, and XLA's own cost estimate of every op.

The estimate is XLA:TPU's cost model (``estimated_cycles`` in each top-level op's backend config, summed by kind
of op at the chip's clock): the Mosaic kernels (splash attention) carry none and are left out. It is a
comparison tool, not a prediction: it compares two versions of a twin on the same compiler without a chip
(run this script once per version, e.g. with PYTHONPATH pointing at another checkout's src/), and the kind of op
that changed tells where. On the TPU v5e the sums ran 20-30% above the measured steps less their kernels' time
(BERT-base 123.5 ms against 101.9, GPT-2 71.0 against about 54).

    python benchmarks/tpu_compile_estimate.py --preset bert-base --batch 32 --seq 512 --attention-impl splash
    python benchmarks/tpu_compile_estimate.py --preset gpt2-124m --batch 8 --seq 1024 --attention-impl splash \\
        --strategy jax:jit+bf16 --device tpu-v5e --top 10

Needs libtpu matching the installed JAX (pip install "jax[tpu]==<jax version>").
"""

from __future__ import annotations

import argparse
import collections
import os
import re

#: the chip's clock, GHz: the cycles' time (v5e: 197 TFLOP/s bf16 = 4 MXUs x 128 x 128 x 2 x 1.5 GHz)
CLOCK_GHZ = {"tpu-v5e": 1.5, "tpu-v4": 1.05, "tpu-v5p": 1.75, "tpu-v6e": 1.75}


def cycles_by_kind(hlo: str) -> tuple[collections.Counter, collections.Counter]:
    """(estimated cycles, count) of the entry computation's ops by kind (a fusion by its name's stem)."""
    from twinbench.hlo_text import parse

    mod = parse(hlo)
    cycles: collections.Counter = collections.Counter()
    count: collections.Counter = collections.Counter()
    for ins in mod.computations[mod.entry]:
        c = re.search(r'"estimated_cycles":"(\d+)"', ins.attrs)
        if c:
            kind = ins.opcode if ins.opcode != "fusion" else "fusion:" + re.sub(r"[.\d]+$", "", ins.name)
            cycles[kind] += int(c.group(1))
            count[kind] += 1
    return cycles, count


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="gpt2-124m")
    ap.add_argument("--strategy", default="jax:jit+bf16")
    ap.add_argument("--batch", type=int)
    ap.add_argument("--seq", type=int)
    ap.add_argument("--attention-impl", default="default")
    ap.add_argument("--device", default="tpu-v5e", choices=sorted(CLOCK_GHZ))
    ap.add_argument("--top", type=int, default=8, help="kinds of op to list")
    ap.add_argument("--hlo-out", help="write the compiled program's HLO text here")
    args = ap.parse_args()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # this process runs on the CPU; it compiles for the TPU

    import twinbench
    from twinbench.measure.memory import compiled_sizes, jax_step_estimate
    from twinbench.plan import build_specs
    from twinbench.predict import tpu_compile
    from twinbench.predict.program import traced_trainer

    framework, strategy = args.strategy.split(":", 1)
    overrides = {k: v for k, v in (("batch", args.batch), ("seq", args.seq)) if v is not None}
    spec = build_specs(args.preset, framework, strategy, overrides, attention_impl=args.attention_impl)[0]
    trainer, state, x, y = traced_trainer(spec)  # as predict --compile builds it: its state traced, not allocated
    compiled = tpu_compile.compile_for(trainer, x, y, args.device, state)

    sizes = compiled_sizes(compiled)
    hlo = compiled.as_text()
    if args.hlo_out:
        with open(args.hlo_out, "w") as f:
            f.write(hlo)
    kernels = tpu_compile.mosaic_kernels(hlo)
    cycles, count = cycles_by_kind(hlo)
    ms = 1e-6 / CLOCK_GHZ[args.device]
    print(f"{args.strategy} {args.preset} {spec.train.batch}x{spec.train.seq} attention {args.attention_impl}, "
          f"compiled for {args.device} by libtpu {tpu_compile.libtpu_version()} (twinbench from "
          f"{os.path.dirname(twinbench.__file__)})")
    print(f"  memory the chip reports: {jax_step_estimate(sizes) / 2**30:.2f} GiB (temporaries "
          f"{sizes['temp'] / 2**30:.2f} GiB)")
    print(f"  XLA's estimate of the ops outside the Mosaic kernels: {sum(cycles.values()) * ms:.1f} ms "
          f"({kernels} Mosaic kernels, not estimated)")
    for kind, c in cycles.most_common(args.top):
        print(f"    {kind:40s} {count[kind]:5d} ops {c * ms:8.2f} ms")


if __name__ == "__main__":
    main()
