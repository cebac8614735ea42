"""torchax's ``F.scaled_dot_product_attention`` lowered to the twins' JAX attentions, in a fresh process (torchax
changes global torch settings on import). ``python torchax_attention_child.py OUT.json``; writes, per case, the
largest difference from torch's own ``F.scaled_dot_product_attention`` (values, and the gradient of q), and
what the lowering refused.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import jax
import numpy as np
import torch
import torch.nn.functional as F

from twinbench.data import tasks
from twinbench.models import family as families
from twinbench.spec import from_preset, validate
from twinbench.strategies import registry
from twinbench.strategies.torchax_compat import import_torchax
from twinbench.strategies.torchax_step import TorchaxUnsupported, attention_lowered_as

torchax = import_torchax()
env = torchax.default_env()
T, D = 256, 64  # two splash blocks of 128
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(2, 4, T, D, generator=g) for _ in range(3))
kv2 = (torch.randn(2, 2, T, D, generator=g), torch.randn(2, 2, T, D, generator=g))  # GQA: 2 key/value heads
keep = (torch.arange(T)[None, :] < torch.tensor([T, 130])[:, None])[:, None, None, :]  # [B, 1, 1, T]
real = keep[:, 0, 0, :, None][:, None].float()  # padding queries' outputs are read by no loss

CASES = {  # name: (impls, kwargs, k/v)
    "causal": (("splash", "jax-nn", "chunked"), {"is_causal": True}, (k, v)),
    "padding": (("splash", "jax-nn"), {"attn_mask": keep}, (k, v)),
    "scale-gqa": (("jax-nn", "splash", "chunked"), {"is_causal": True, "scale": 0.3, "enable_gqa": True}, kv2),
}


def torch_ref(kw: dict, kv: tuple) -> tuple[np.ndarray, np.ndarray]:
    qq = q.clone().requires_grad_()
    y = F.scaled_dot_product_attention(qq, *kv, **kw)
    w = real if "attn_mask" in kw else 1.0
    ((y * w) ** 2).sum().backward()
    return (y * w).detach().numpy(), qq.grad.numpy()


def as_jax(t: torch.Tensor | float) -> jax.Array | float:
    return jax.numpy.asarray(t.numpy()) if isinstance(t, torch.Tensor) else t


def lowered(impl: str, kw: dict, kv: tuple):
    """The attention as torchax runs it under ``attention_lowered_as(impl)``: a JAX function of q."""
    w = as_jax(real if "attn_mask" in kw else 1.0)
    kj, vj = as_jax(kv[0]), as_jax(kv[1])
    kwj = {n: as_jax(val) for n, val in kw.items()}

    def f(qj: jax.Array) -> jax.Array:
        qt, kt, vt, kwt = env.j2t_iso((qj, kj, vj, kwj))
        with env, attention_lowered_as(env, impl):
            y = F.scaled_dot_product_attention(qt, kt, vt, **kwt)
        return env.t2j_iso(y) * w

    return f


def via_torchax(impl: str, kw: dict, kv: tuple) -> tuple[np.ndarray, np.ndarray, str]:
    f = lowered(impl, kw, kv)
    qj = as_jax(q)
    grad = jax.grad(lambda qj: (f(qj) ** 2).sum())(qj)
    return np.asarray(f(qj)), np.asarray(grad), str(jax.make_jaxpr(f)(qj))


out: dict = {}
for name, (impls, kw, kv) in CASES.items():
    want, g_want = torch_ref(kw, kv)
    for impl in impls:
        got, g_got, program = via_torchax(impl, kw, kv)
        out[f"{name}/{impl}"] = {"value": float(np.abs(got - want).max()), "grad": float(np.abs(g_got - g_want).max()),
                                 "grad_scale": float(np.abs(g_want).max()), "pallas": "pallas_call" in program,
                                 "scan": "scan[" in program}
out["default"] = {"pallas": "pallas_call" in (p := via_torchax("default", {"is_causal": True}, (k, v))[2]),
                  "scan": "scan[" in p}


def trainer_run(impl: str) -> dict:
    """jax:torchax on llama-tiny at 128 tokens (one splash block), three steps from the same weights: the losses,
    and whether the step's program holds a Pallas kernel."""
    base = from_preset("llama-tiny", {"seq": 128, "steps": 3, "warmup": 1})
    spec = validate(base.evolve(model=replace(base.model, context=128), framework="jax", strategy="torchax",
                            attention_impl=impl))
    weights = families.get(spec).init_weights(spec.model, 0)
    trainer = registry.builder(spec)(spec, weights)
    data = tasks.run_data(spec, 1).batches
    program = str(jax.make_jaxpr(trainer.loss_of)(trainer.params, *data[0]))
    return {"losses": [float(np.asarray(trainer.step(*data[i]))) for i in range(3)], "pallas": "pallas_call" in program}


out["trainer"] = {impl: trainer_run(impl) for impl in ("default", "splash")}
try:
    with env, attention_lowered_as(env, "jax-nn"):
        F.scaled_dot_product_attention(*env.j2t_iso(tuple(as_jax(t) for t in (q, k, v))), dropout_p=0.1)
    out["dropout"] = "accepted"
except TorchaxUnsupported as e:
    out["dropout"] = str(e)
try:
    with env, attention_lowered_as(env, "splash"):
        F.scaled_dot_product_attention(*env.j2t_iso(tuple(as_jax(t) for t in (q, *kv2))), is_causal=True)
    out["gqa-without-flag"] = "accepted"
except TorchaxUnsupported as e:
    out["gqa-without-flag"] = str(e)
out["restored"] = env._ops[F.scaled_dot_product_attention].is_user_defined is False  # torchax's own again
Path(sys.argv[1]).write_text(json.dumps(out))
