"""How much of torch.compile's cold compile time is the backward, which AOTAutograd compiles lazily?

``compile_s`` used to count dynamo's frame compiles only (``_compile.compile_inner``); the
backward graph is compiled at the first ``backward()`` (``backward._backward_impl``) and was left out. This
builds one torch strategy on a preset exactly as a run does (fresh process, cold Inductor cache in a temporary
directory), runs a few steps and prints the two parts and their sum (what ``compile_s`` counts now).
Measured, never asserted; run it on an idle machine:

    .venv/bin/python benchmarks/torch_compile_backward.py --preset small --strategy compile
    .venv/bin/python benchmarks/torch_compile_backward.py --preset small --strategy compile-regional
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="small")
    ap.add_argument("--strategy", default="compile")
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="twinbench-bwd-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tmp  # cold: nothing compiled before
    os.environ["TRITON_CACHE_DIR"] = os.path.join(tmp, "triton")

    from twinbench.data.text import batches, synthetic_corpus
    from twinbench.measure.compiles import TORCH_BACKWARD, TORCH_FRAME, TorchCompiles
    from twinbench.models.gpt import init_gpt
    from twinbench.spec import from_preset, validate
    from twinbench.strategies import registry

    spec = validate(from_preset(args.preset, {"steps": args.steps, "warmup": 1}, framework="torch",
                                strategy=args.strategy))
    trainer = registry.get("torch", args.strategy).load()(spec, init_gpt(spec.model, 0))
    data = batches(synthetic_corpus(seed=1234), spec.train.batch, spec.train.seq, 0)
    monitor = TorchCompiles()
    for _ in range(args.steps):
        trainer.step(*next(data))
    trainer.sync()
    import torch._dynamo.utils as dynamo_utils

    metrics = dynamo_utils.compilation_time_metrics
    frame, backward = sum(metrics.get(TORCH_FRAME, ())), sum(metrics.get(TORCH_BACKWARD, ()))
    print(json.dumps({"preset": args.preset, "strategy": args.strategy, "frame_compile_s": round(frame, 3),
                      "backward_compile_s": round(backward, 3), "compile_s": round(monitor.seconds(), 3),
                      "backward_share": round(backward / max(frame + backward, 1e-9), 3)}))


if __name__ == "__main__":
    main()
