"""Run by tests/byo in a fresh process: torchax changes global torch settings on import, so it never enters
pytest's own process. ``python tests/byo/child.py MODE[,MODE...] OUT.json``: runs the modes one after the other
in this one process and writes ``{mode: what it measured}`` as JSON.

- ``parity``: the example model in torch (eager) and through torchax from the same weights: loss and
  gradients on batch 0, then 3 AdamW steps each.
- ``torch-worker``: one torch/eager user run through the worker's ``execute``; reports whether torchax was
  imported (it must not be).
- ``dropout-models``: examples/byo/encoder.py and hf_bert.py (dropout 0.1 left on) in torch eager and
  torchax, and the doctor on a torchax run.
- ``hf-bert``: examples/byo/hf_bert.py (sdpa and eager attention) through torchax in fp32 and bf16 against
  torch eager, with whichever transformers is first on the path (tests/byo/test_hf_floor.py puts the lowest
  version pyproject.toml accepts there); ``hf-bert-sdpa``: the sdpa one only.
- ``compat``: plain ``import torchax`` (expected to fail on torch >= 2.13), then the compatibility layer.
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "byo" / "llama.py"


def user_spec(framework: str, strategy: str):
    from twinbench.spec import from_preset

    s = from_preset("tiny", {"steps": 4, "warmup": 1})
    return s.evolve(model=replace(s.model, family="user"), train=replace(s.train, task="custom"),
                   user_model=f"{EXAMPLE}:build", framework=framework, strategy=strategy)


def parity() -> dict:
    import jax
    import torch

    from twinbench.byo import family as fam
    from twinbench.byo import load_torch
    from twinbench.byo.prepare import torch_reference
    from twinbench.measure.device import set_fp32_matmul

    set_fp32_matmul("jax")
    spec = user_spec("jax", "torchax")
    torch.manual_seed(spec.train.seed)
    um = load_torch(spec.user.user_model, fam.config(spec))
    fam.dropout_off(um.module)
    weights = fam.state_numpy(um.module)
    ref = torch_reference(um, spec, steps=3)

    from twinbench.strategies.jax_user import FunctionTrainer
    from twinbench.strategies.torchax_step import TorchaxTrainer

    built = TorchaxTrainer(spec, weights)  # the one torchax integration, the twins' too
    params, loss_of = built.params, built.loss_of
    x, y = um.batch(0)
    loss, grads = jax.jit(jax.value_and_grad(loss_of))(params, x, y)
    names = sorted(k[len("model."):] for k in grads)
    scale = max(float(np.abs(ref[f"grad/{n}"]).max()) for n in names)
    grad_diff = max(float(np.abs(np.asarray(grads[f"model.{n}"]) - ref[f"grad/{n}"]).max()) for n in names) / scale
    trainer = FunctionTrainer(spec, params, loss_of)
    steps = [float(trainer.step(*um.batch(i))) for i in range(3)]
    round_trip = TorchaxTrainer(spec, weights).weights()
    bf16 = user_spec("jax", "torchax+bf16")  # torchax's autocast on the user's module, as on the twins
    bf16 = replace(bf16, train=replace(bf16.train, precision="bf16"))
    half = TorchaxTrainer(bf16, weights)
    loss_bf16 = float(jax.jit(half.loss_of)(half.params, x, y))
    return {"loss_torch": float(ref["loss0"]), "loss_torchax": float(loss), "grad_rel": grad_diff,
            "loss_torchax_bf16": loss_bf16,
            "n_grads": len(names), "n_params": sum(1 for _ in um.module.parameters()),
            "steps_torch": [float(v) for v in ref["losses"]], "steps_torchax": steps,
            "round_trip_exact": all(np.array_equal(round_trip[k], weights[k]) for k in weights)
            and set(round_trip) == set(weights)}


def dropout_models() -> dict:
    """torch's nn.TransformerEncoder (12 steps) and Hugging Face BERT (sdpa and eager attention, 4 steps), every
    dropout at its default of 0.1: torch eager against torchax from the same weights, and the doctor on one
    torchax run."""
    import torch

    from twinbench.byo import family as fam
    from twinbench.byo import load_torch
    from twinbench.byo.prepare import eager_losses
    from twinbench.byo.run import doctor_findings
    from twinbench.measure.device import set_fp32_matmul
    from twinbench.strategies.torchax_step import TorchaxTrainer

    set_fp32_matmul("jax")
    out = {}
    for name, ref, steps in [("encoder", "encoder.py:build", 12), ("bert_sdpa", "hf_bert.py:build", 4),
                             ("bert_eager", "hf_bert.py:build_eager_attention", 4)]:
        s = user_spec("jax", "torchax")
        s = s.evolve(user_model=str(EXAMPLE.with_name(ref)), model=replace(s.model, layers=2, d_model=32, heads=2),
                    train=replace(s.train, steps=steps))
        torch.manual_seed(s.train.seed)
        um = load_torch(s.user.user_model, fam.config(s))
        switched = fam.dropout_off(um.module)
        weights = fam.state_numpy(um.module)
        ref_losses = eager_losses(um, s, steps)
        trainer = TorchaxTrainer(s, weights)
        batches = [um.batch(i) for i in range(steps)]
        out[name] = {"switched": switched, "eager": ref_losses, "torchax": [float(trainer.step(*b)) for b in batches],
                     "int_params": [k for k, v in trainer.params.items() if not np.issubdtype(v.dtype, np.floating)]}
        if name == "encoder":
            out[name]["doctor"] = doctor_findings(s, weights, batches, steps=2)
    return out


def hf_bert(builds: tuple[str, ...] = ("build", "build_eager_attention")) -> dict:
    """Hugging Face BERT, as a user writes it (``model(input_ids=x)``, no mask), 2 steps under torchax in fp32
    and bf16 and in torch eager from the same weights, for each of ``builds``; the transformers version that
    ran."""
    import torch
    import transformers

    from twinbench.byo import family as fam
    from twinbench.byo import load_torch
    from twinbench.byo.prepare import eager_losses
    from twinbench.measure.device import set_fp32_matmul
    from twinbench.strategies.torchax_step import TorchaxTrainer

    set_fp32_matmul("jax")
    out: dict = {"transformers": transformers.__version__, "file": transformers.__file__}
    for ref in (f"hf_bert.py:{b}" for b in builds):
        s = user_spec("jax", "torchax")
        s = s.evolve(user_model=str(EXAMPLE.with_name(ref)), model=replace(s.model, layers=2, d_model=32, heads=2),
                    train=replace(s.train, steps=2))
        torch.manual_seed(s.train.seed)
        um = load_torch(s.user.user_model, fam.config(s))
        fam.dropout_off(um.module)
        weights = fam.state_numpy(um.module)
        batches = [um.batch(i) for i in range(2)]
        row = {"eager": eager_losses(um, s, 2)}
        for strategy, precision in (("torchax", "fp32"), ("torchax+bf16", "bf16")):
            spec = s.evolve(strategy=strategy, train=replace(s.train, precision=precision))
            trainer = TorchaxTrainer(spec, weights)
            row[strategy] = [float(trainer.step(*b)) for b in batches]
        out[ref.partition(":")[2]] = row
    return out


def torch_worker() -> dict:
    from twinbench.byo.prepare import prepare
    from twinbench.worker import execute

    spec = user_spec("torch", "eager")
    with tempfile.TemporaryDirectory() as tmp:
        prepare(spec, Path(tmp), with_ref=False)
        record = execute(spec.evolve(user_dir=tmp), threads=1)
    return {"status": record.status, "torchax_imported": any(m.split(".")[0] == "torchax" for m in sys.modules),
            "jax_imported": "jax" in sys.modules, "flops_convention": record.speed.flops_convention}


def compat() -> dict:
    try:
        import torchax

        plain = "ok"
    except AttributeError as e:
        plain = str(e)
    from twinbench.strategies import torchax_compat

    torchax = torchax_compat.import_torchax()
    env = torchax.default_env()
    import jax.numpy as jnp
    import torch

    with env:  # a torch op on JAX arrays, through the patched-in environment
        t = torch.prod(env.j2t_iso(jnp.full((3,), 2.0)))
    return {"plain": plain, "patched": list(torchax_compat.PATCHED), "needs_patch": torchax_compat.needs_patch(),
            "value": float(env.t2j_iso(t))}


if __name__ == "__main__":
    modes, out = sys.argv[1].split(","), Path(sys.argv[2])
    run = {"parity": parity, "torch-worker": torch_worker, "compat": compat, "dropout-models": dropout_models,
           "hf-bert": hf_bert, "hf-bert-sdpa": lambda: hf_bert(("build",))}
    out.write_text(json.dumps({mode: run[mode]() for mode in modes}))  # in the order given
