"""The parity check of a user's JAX port against their torch module, run before anything is measured.

``python -m twinbench.byo.parity SPEC.json DIR`` (a JAX process, started by :func:`twinbench.byo.plan.prepare`
through the runner) reads ``DIR/init.safetensors`` and ``DIR/torch_ref.npz`` (written by the torch-only
preparation process), maps the initial weights with the port's ``to_jax``, and compares:

- the loss on batch 0 (relative difference),
- the gradients on batch 0: the torch gradients mapped through the same ``to_jax`` (a re-arrangement, so it
  maps gradients as it maps weights), largest absolute difference relative to the largest gradient,
- the losses of :data:`~twinbench.byo.prepare.PARITY_STEPS` steps of the same optimizer (the jitted step of
  the ``port`` strategy) on batches 0..9.

It writes ``DIR/parity.json``; ``ok`` says whether every figure is within its tolerance. A problem with the
user's file ends the process with one line on stderr and exit code 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import msgspec
import numpy as np

from twinbench.byo import UserConfig, UserModelError, _one_line, load_jax, load_torch, map_to_jax
from twinbench.byo import family as fam
from twinbench.record_sections import Parity, Tolerances
from twinbench.spec import RunSpec

TOLERANCES = Tolerances(loss_rel=1e-4, grad_rel=1e-3, steps_abs=1e-3)


def check(spec: RunSpec, d: Path) -> Parity:
    import jax
    import jax.numpy as jnp
    import torch

    from twinbench.measure.device import set_fp32_matmul
    from twinbench.strategies.jax_user import FunctionTrainer

    set_fp32_matmul("jax")  # the same fp32 matmuls as the measured runs
    weights = fam.init_weights(d)
    ref = dict(np.load(d / fam.REF))
    torch.manual_seed(spec.train.seed)
    batch = load_torch(spec.user.user_model, UserConfig.from_spec(spec)).batch
    port = load_jax(spec.user.user_jax_model, fam.config(spec))
    name = spec.user.user_jax_model
    try:
        params = jax.tree.map(jnp.asarray, map_to_jax(port.to_jax, weights))
    except Exception as e:
        raise UserModelError(f"--jax-model {name}: to_jax(state_dict) raised {_one_line(e)}") from None
    x, y = batch(0)
    try:
        loss, grads = jax.jit(jax.value_and_grad(port.loss_fn))(params, x, y)
    except Exception as e:
        raise UserModelError(f"--jax-model {name}: loss_fn(params, x, y) on batch 0 raised {_one_line(e)}") from None
    torch_grads = map_to_jax(port.to_jax, {k[len("grad/"):]: v for k, v in ref.items() if k.startswith("grad/")})
    named_t = jax.tree_util.tree_flatten_with_path(jax.tree.map(np.asarray, torch_grads))[0]
    g_t = [a for _, a in named_t]
    g_j = jax.tree.leaves(jax.tree.map(np.asarray, grads))
    if len(g_t) != len(g_j) or any(a.shape != b.shape for a, b in zip(g_t, g_j, strict=False)):
        raise UserModelError(f"--jax-model {name}: the gradients of loss_fn do not have the structure to_jax gives "
                             "the parameters")
    scale = max(float(np.max(np.abs(a))) for a in g_t) or 1.0
    per_leaf = [(jax.tree_util.keystr(path).strip(".[]'\"") or "params", float(np.max(np.abs(a - b))) / scale)
                for (path, a), b in zip(named_t, g_j, strict=True)]
    grad_rel = float(max(rel for _, rel in per_leaf))
    worst = sorted(per_leaf, key=lambda kv: -kv[1])[:3]
    loss_t, loss_j = float(ref["loss0"]), float(loss)
    trainer = FunctionTrainer(spec, params, port.loss_fn)
    ref_steps = ref["losses"]
    steps = [float(trainer.step(*batch(i))) for i in range(len(ref_steps))]
    loss_rel = abs(loss_j - loss_t) / max(abs(loss_t), 1e-12)
    steps_abs = float(max(abs(a - b) for a, b in zip(ref_steps, steps, strict=True)))  # NumPy's float: a float
    tol = TOLERANCES
    return Parity(loss_torch=loss_t, loss_jax=loss_j, loss_rel=loss_rel, grad_rel=grad_rel, grad_worst=worst,
                  losses_torch=[float(v) for v in ref_steps], losses_jax=steps, steps_abs=steps_abs, steps=len(steps),
                  tolerances=tol,
                  ok=loss_rel <= tol.loss_rel and grad_rel <= tol.grad_rel and steps_abs <= tol.steps_abs)


def main(argv: list[str]) -> int:
    from twinbench.lifeline import watch_parent

    watch_parent()  # end with the runner, even when it is killed with SIGKILL
    spec = RunSpec.from_dict(json.loads(Path(argv[0]).read_text()))
    d = Path(argv[1])
    try:
        result = check(spec, d)
    except UserModelError as e:
        print(str(e), file=sys.stderr)
        return 2
    (d / fam.PARITY).write_bytes(msgspec.json.format(msgspec.json.encode(result), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
