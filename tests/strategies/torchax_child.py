"""The torchax parity runs, in a fresh process (torchax changes global torch settings on import): for each family's
tiny preset, torch eager and jax:torchax (+remat, +nodonate, +bf16) from the same initial weights on the same
batches. ``python torchax_child.py OUT.json [FAMILY ...]``; prints nothing, writes the losses and checks as JSON.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import jax
import numpy as np

from twinbench.data import tasks
from twinbench.models import family as families
from twinbench.spec import from_preset, validate, with_precision
from twinbench.strategies import registry

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import parity_cells  # tests/parity_cells.py, beside this folder

PRESETS = {"gpt": "tiny", "bert": "bert-tiny", "llama": "llama-tiny"}
STEPS = 10
#: the torchax runs of each family (what the matrix test counts as covered)
RUNS = parity_cells.TORCHAX_EQUAL + parity_cells.TORCHAX_BF16


def spec_of(preset: str, framework: str, strategy: str):
    base = from_preset(preset, {"steps": STEPS, "warmup": 1})
    return validate(with_precision(base.evolve(framework=framework, strategy=strategy)))


def losses_of(spec, weights, batches) -> tuple[list[float], object]:
    trainer = registry.builder(spec)(spec, weights)
    out = [float(np.asarray(trainer.step(x, y))) for x, y in batches]
    trainer.sync()
    return out, trainer


def family_runs(name: str) -> dict:
    preset = PRESETS[name]
    eager = spec_of(preset, "torch", "eager")
    fam = families.get(eager)
    weights = fam.init_weights(eager.model, eager.train.seed)
    data = tasks.run_data(eager, 1).batches
    batches = [data[i] for i in range(STEPS)]
    out = {"eager": losses_of(eager, weights, batches)[0]}
    for strategy in RUNS:
        losses, trainer = losses_of(spec_of(preset, "jax", strategy), weights, batches)
        out[strategy] = losses
        if strategy == "torchax":
            back = trainer.weights()
            out["weights_keys_equal"] = sorted(back) == sorted(weights)
            out["weights_changed"] = any(not np.array_equal(back[k], weights[k]) for k in weights)
            out["shapes_equal"] = all(back[k].shape == weights[k].shape for k in weights)
            out["decay"] = sorted(k for k, v in trainer.params.items() if v.ndim >= 2)[:3]
        if "remat" in strategy:  # every block's call is a jax.checkpoint of the traced program
            x, y = batches[0]
            jaxpr = str(jax.make_jaxpr(trainer.loss_of)(trainer.params, x, y))
            out["checkpoints"] = len(re.findall(r"= (?:remat\w*|checkpoint)\[", jaxpr))
            out["layers"] = spec_of(preset, "jax", strategy).model.layers
    return out


def fused_loss_against_aten(preset: str = "tiny") -> dict:
    """The loss and every parameter's gradient of one batch, torchax's own ``F.cross_entropy`` against
    ``+fused-loss`` from the same weights (fp32 and bf16), and whether each program holds a ``log_softmax``."""
    import jax.numpy as jnp

    out: dict = {}
    for precision in ("", "+bf16"):
        got = {}
        for mod in ("", "+fused-loss"):
            spec = spec_of(preset, "jax", f"torchax{precision}{mod}")
            trainer = registry.builder(spec)(spec, families.get(spec).init_weights(spec.model, 0))
            x, y = (jnp.asarray(a) for a in tasks.run_data(spec, 1).batches[0])
            loss, grads = jax.jit(jax.value_and_grad(trainer.loss_of))(trainer.params, x, y)
            got[mod] = (float(loss), {k: np.asarray(v) for k, v in grads.items()},
                        "log_softmax" in str(jax.make_jaxpr(trainer.loss_of)(trainer.params, x, y)))
        (la, ga, pa), (lf, gf, pf) = got[""], got["+fused-loss"]
        out[precision or "fp32"] = {
            "loss": abs(lf - la) / abs(la),
            "grad": max(float(np.abs(gf[k] - ga[k]).max() / (np.abs(ga[k]).max() + 1e-12)) for k in ga),
            "same_keys": sorted(ga) == sorted(gf), "aten_log_softmax": pa, "fused_log_softmax": pf}
    return out


def fused_loss_fallback() -> dict:
    """``+fused-loss`` on calls it does not cover (label smoothing, a class weight) and on one it does (ignore_index,
    a sum), under torchax: the largest difference from torch's own F.cross_entropy of each."""
    import jax.numpy as jnp
    import torch
    import torch.nn.functional as F

    from twinbench.strategies.torchax_compat import import_torchax
    from twinbench.strategies.torchax_loss import cross_entropy_lowered

    env = import_torchax().default_env()
    rng = np.random.default_rng(0)
    x, t, w = rng.standard_normal((6, 5)).astype(np.float32), np.array([0, 1, 2, 3, 4, 1]), np.linspace(0.5, 2, 5)
    out = {}
    for name, kw in {"label_smoothing": {"label_smoothing": 0.1}, "weight": {"weight": w.astype(np.float32)},
                     "ignore_index": {"reduction": "sum", "ignore_index": 1}}.items():
        want = F.cross_entropy(torch.tensor(x), torch.tensor(t), **{k: torch.tensor(v) if isinstance(v, np.ndarray)
                                                                    else v for k, v in kw.items()})
        xj, tj, kwj = env.j2t_iso((jnp.asarray(x), jnp.asarray(t, jnp.int32),
                                   {k: jnp.asarray(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}))
        with env, cross_entropy_lowered(env, True):
            got = F.cross_entropy(xj, tj, **kwj)
        out[name] = abs(float(np.asarray(env.t2j_iso(got))) - float(want))
    return out


def main(argv: list[str]) -> int:
    path, names = argv[0], argv[1:] or list(PRESETS)
    result = {name: family_runs(name) for name in names}
    result["fused_loss"] = fused_loss_against_aten()
    result["fused_loss_fallback"] = fused_loss_fallback()
    from twinbench.measure import device

    result["versions"] = device.versions("jax")
    with open(path, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
