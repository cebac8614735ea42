"""The preparation process of a ``--model`` compare: check the user's model once, before any run starts.

``python -m twinbench.byo.prepare SPEC.json DIR`` (started by :func:`twinbench.byo.plan.prepare` through the
runner): calls ``build(cfg)`` under ``torch.manual_seed(seed)``, switches dropout off, checks batch 0 and the
loss on it, and writes ``DIR/init.safetensors`` (the initial ``state_dict``: every run starts from it) and
``DIR/meta.json`` (parameter counts, FLOPs per token, tokens per batch). With a ``--jax-model`` it also writes
``DIR/torch_ref.npz``: the torch loss and gradients on batch 0 and the losses of 10 AdamW steps, the reference
of the port's parity check. A problem with the user's file ends this process with one line on stderr and
exit code 2. Only torch is imported here.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from twinbench.byo import FLOP_CONVENTION, UserModel, UserModelError, _one_line, load_torch, randomness
from twinbench.byo import family as fam
from twinbench.spec import RunSpec

PARITY_STEPS = 10


def check_batch(um: UserModel, ref: str) -> tuple[Any, Any]:
    try:
        b = um.batch(0)
    except Exception as e:
        raise UserModelError(f"--model {ref}: batch(0) raised {_one_line(e)}") from None
    if not (isinstance(b, tuple) and len(b) == 2 and all(isinstance(a, np.ndarray) for a in b)):
        raise UserModelError(f"--model {ref}: batch(0) must return a pair (x, y) of NumPy arrays, got "
                             f"{type(b).__name__}")
    if b[0].ndim < 1:
        raise UserModelError(f"--model {ref}: batch(0)'s x must have a batch axis, got shape {b[0].shape}")
    return b


def torch_loss(um: UserModel, x: np.ndarray, y: np.ndarray, ref: str) -> Any:
    import torch

    try:
        loss = um.loss_fn(um.module, torch.from_numpy(x), torch.from_numpy(y))
    except Exception as e:
        raise UserModelError(f"--model {ref}: loss_fn(module, x, y) on batch 0 raised {_one_line(e)}") from None
    if not (isinstance(loss, torch.Tensor) and loss.numel() == 1 and loss.is_floating_point()):
        raise UserModelError(f"--model {ref}: loss_fn(module, x, y) must return a scalar float Tensor, got "
                             f"{type(loss).__name__}{tuple(getattr(loss, 'shape', ()))}")
    return loss.reshape(())


def prepare(spec: RunSpec, out: Path, with_ref: bool) -> fam.Prepared:
    import torch
    from safetensors.numpy import save_file

    torch.manual_seed(spec.train.seed)
    ref = spec.user.user_model
    um = load_torch(ref, fam.config(spec))
    um.module.train()
    x, y = check_batch(um, ref)
    init = fam.state_numpy(um.module)
    loss = torch_loss(um, x, y, ref)  # a readable error for a loss that fails, before the probe
    try:
        switched = randomness.check(um.module, um.loss_fn, torch.from_numpy(x), torch.from_numpy(y), ref)
    except randomness.RandomnessError as e:
        raise UserModelError(str(e)) from None
    fam.load_state(um.module, init)  # the probe's backward left no step, but start from the saved weights
    loss = torch_loss(um, x, y, ref)
    meta = meta_of(um, ref, x, y, switched)
    meta.loss0 = float(loss)
    out.mkdir(parents=True, exist_ok=True)
    save_file(init, str(out / fam.INIT))
    if with_ref:
        np.savez(out / fam.REF, **torch_reference(um, spec))
        fam.load_state(um.module, init)
    meta.eager_losses = eager_losses(um, spec, spec.train.steps)
    fam.write_meta(out, meta)
    return meta


def meta_of(um: UserModel, ref: str, x: np.ndarray, y: np.ndarray, switched: list[str]) -> fam.Prepared:
    """What ``meta.json`` holds of a built module (``byo/family.py`` reads it): its parameter counts, FLOPs per
    token, tokens per batch, the dropout switched off, batch 0's shapes."""
    tokens = int(um.tokens_per_batch) or int(x.shape[0] * (x.shape[1] if x.ndim > 1 else 1))
    return fam.Prepared(n_params=fam.n_params(um.module), matmul_params=fam.matmul_params(um.module),
                        flops_per_token=fam.flops_per_token(um), tokens_per_batch=tokens, dropout_off=len(switched),
                        switched_off=switched, ref=ref, flops_convention=FLOP_CONVENTION,
                        x=(list(x.shape), str(x.dtype)), y=(list(y.shape), str(y.dtype)))


def torch_reference(um: UserModel, spec: RunSpec, steps: int = PARITY_STEPS) -> dict[str, np.ndarray]:
    """Loss and gradients on batch 0, then the losses of ``steps`` eager AdamW steps on batches 0..steps-1."""
    import torch

    model = um.module
    x, y = (torch.from_numpy(a) for a in um.batch(0))
    model.zero_grad(set_to_none=True)
    loss = um.loss_fn(model, x, y)
    loss.backward()
    out = {"loss0": np.asarray(float(loss))}
    params = dict(model.named_parameters(remove_duplicate=False))  # a tied weight under each of its names
    for n, t in model.state_dict().items():  # the layout to_jax maps; buffers get zero gradients
        p = params.get(n)
        g = p.grad if p is not None else None
        out[f"grad/{n}"] = np.zeros(tuple(t.shape), np.float32) if g is None else g.numpy().copy()
    out["losses"] = np.asarray(eager_losses(um, spec, steps))
    return out


def eager_losses(um: UserModel, spec: RunSpec, steps: int) -> list[float]:
    """The losses of ``steps`` torch eager steps (the twins' AdamW, clipping) from the module's weights: the
    reference every run's trajectory is compared with (the record's ``parity``)."""
    import torch

    from twinbench.models.layers_torch import clip_grads

    model = um.module
    opt = fam.torch_optimizer(model, spec.train.lr, spec.train.weight_decay)
    losses = []
    for i in range(steps):
        xb, yb = (torch.from_numpy(a) for a in um.batch(i))
        opt.zero_grad(set_to_none=True)
        loss = um.loss_fn(model, xb, yb)
        loss.backward()
        clip_grads(model)
        opt.step()
        losses.append(float(loss))
    return losses


def child(argv: list[str], work: Callable[[RunSpec, Path], object]) -> int:
    """The main of a process that builds the user's model (``SPEC.json DIR``, :func:`byo.plan.run_child`): it ends
    with its parent, even one killed with SIGKILL; a problem with the user's file is one line and exit code 2."""
    from twinbench.lifeline import watch_parent

    watch_parent()
    spec = RunSpec.from_dict(json.loads(Path(argv[0]).read_text()))
    try:
        work(spec, Path(argv[1]))
    except UserModelError as e:
        print(str(e), file=sys.stderr)
        return 2
    return 0


def main(argv: list[str]) -> int:
    return child(argv, lambda spec, out: prepare(spec, out, with_ref=bool(spec.user.user_jax_model)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
