"""Runs the multi-device cells of ``tests/parity_cells.py`` in ONE process (JAX, simulated CPU devices) or one
torchrun launch (PyTorch, a process per device), so every cell does not pay a process start.

``python cells_run.py FRAMEWORK OUT.json``: the losses of every cell of that framework for both families,
with 2 devices, and of the one-device reference (``jit`` / ``eager``) on the same global batches. JAX also reports
how far the ``pmap+nosync`` replicas drifted apart, whether ``mesh-dp+replicate-batch`` split its batch, and the
warnings the records of those two anti-patterns carry. Rank 0 writes OUT.json.

Every family runs one layer: what a multi-device cell adds (the batch split, gradients averaged or sharded, the
state placed per device) is the same at any depth, and each cell's compile grows with the unrolled depth.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: parity_cells

from parity_cells import (
    FAMILIES,
    JAX_MULTI_BF16,
    JAX_MULTI_EQUAL,
    TORCH_MULTI_BF16,
    TORCH_MULTI_EQUAL,
)

from twinbench.data import tasks
from twinbench.models import family as families
from twinbench.spec import from_preset, validate, with_precision
from twinbench.strategies import registry

DEVICES = 2
SHAPES = {"gpt": ("tiny", {"layers": 1, "batch": 8, "steps": 4, "warmup": 1}),
          "llama": ("llama-tiny", {"layers": 1, "batch": 8, "steps": 4, "warmup": 1}),
          "bert": ("bert-tiny", {"layers": 1, "d_model": 32, "heads": 2, "context": 32, "seq": 32, "batch": 8,
                                 "steps": 4, "warmup": 1, "lr": 3e-3})}


#: JAX: programs compiled so far (jax.monitoring), to check that a cell compiles its step once
COMPILES: list[Any] = []
LATE_COMPILES: dict[tuple[str, str], int] = {}


def losses(fam: str, framework: str, strategy: str, devices: int) -> tuple[list[float], object]:
    """The loss of every step of ``strategy``; for BERT the held-out accuracy after training is appended
    (the trainer's ``predict``, as the worker calls it). JAX: the number of programs compiled after the
    first step goes to ``LATE_COMPILES``."""
    preset, shape = SHAPES[fam]
    spec = validate(with_precision(from_preset(preset, {**shape, "devices": devices}, framework=framework,
                                               strategy=strategy)))
    registry.check_devices(spec)
    trainer = registry.get(framework, strategy).load()(spec, families.get(spec).init_weights(spec.model, 0))
    batches = tasks.run_data(spec).batches
    data = tasks.run_data(spec)
    before = tasks.accuracy(getattr(trainer, "predict", None), data.eval_batches)  # before training, as the worker
    out = [trainer.step(*batches[0])]
    trainer.sync()
    first = COMPILES[0].count() if COMPILES else 0
    out += [trainer.step(*batches[i]) for i in range(1, len(batches))]
    trainer.sync()
    if COMPILES:
        LATE_COMPILES[(fam, strategy)] = COMPILES[0].count() - first
    result = [float(x) for x in out]
    if data.eval_batches:
        after = tasks.accuracy(getattr(trainer, "predict", None), data.eval_batches)
        result += [before, after]
    return result, trainer


def main(framework: str, out_path: str) -> None:
    if framework == "torch":
        import torch

        from twinbench.backends.torch import join_process_group

        torch.set_num_threads(1)  # the ranks share the machine's cores
        join_process_group()
    else:
        from twinbench.measure.compiles import JaxCompiles

        COMPILES.append(JaxCompiles())
    base = "jit" if framework == "jax" else "eager"
    cells = (JAX_MULTI_EQUAL + JAX_MULTI_BF16) if framework == "jax" else (TORCH_MULTI_EQUAL + TORCH_MULTI_BF16)
    result: dict[str, dict[str, list[float] | float]] = {}
    for fam in FAMILIES:
        res = result.setdefault(fam, {})
        res[base] = losses(fam, framework, base, 1)[0]
        for cell in cells:
            res[cell], trainer = losses(fam, framework, cell, DEVICES)
            # what the run's record says of its devices (every rank calls it: it may gather across them)
            res[f"{cell}:report"] = msgspec.to_builtins(trainer.report())
        if framework == "jax":  # claim C13: gradients never averaged across the devices
            _, trainer = losses(fam, framework, "pmap+nosync", DEVICES)
            res["pmap+nosync:report"] = msgspec.to_builtins(trainer.report())
        for (f, cell), n in LATE_COMPILES.items():
            if f == fam:
                res[f"{cell}:late_compiles"] = n
    if int(os.environ.get("RANK", "0")) == 0:
        Path(out_path).write_text(json.dumps(result))
    if framework == "torch":  # leave the group, then end without torch's C++ teardown, which now and then
        # aborts a rank after a clean run ("terminate called without an active exception", exit -6): the worker's own
        # way out (distributed.end)
        from twinbench import distributed

        distributed.end(0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
