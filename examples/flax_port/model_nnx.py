"""The Flax NNX port of ``model_torch.py`` (``--jax-model``): the same classifier as ``nnx.Module`` classes.

twinbench's port protocol is pure functions of a parameter pytree, which NNX gives with ``nnx.split`` and
``nnx.merge``: ``build_jax`` builds the model abstractly (``nnx.eval_shape``: no weights are initialised, the
torch module's are mapped in), keeps its graph definition, and ``loss_fn(params, x, y)`` merges the parameters
into it for each call. ``to_jax`` maps the torch ``state_dict`` onto ``nnx.state(model).to_pure_dict()``'s
layout: ``nn.Linear``'s ``[out, in]`` weight is ``nnx.Linear``'s ``[in, out]`` kernel, transposed::

    twinbench compare --model examples/flax_port/model_torch.py:build \\
        --jax-model examples/flax_port/model_nnx.py:build_jax --preset tiny --strategies eager,compile,port
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from twinbench.byo import JaxUserModel, UserConfig

LABELS = 2  # as model_torch.py
EPS = 1e-5  # torch's LayerNorm epsilon (Flax's default is 1e-6)


class Block(nnx.Module):
    def __init__(self, d: int, heads: int, d_ff: int, rngs: nnx.Rngs) -> None:
        self.heads = heads
        self.qkv = nnx.Linear(d, 3 * d, rngs=rngs)
        self.proj = nnx.Linear(d, d, rngs=rngs)
        self.ln1 = nnx.LayerNorm(d, epsilon=EPS, rngs=rngs)
        self.fc1 = nnx.Linear(d, d_ff, rngs=rngs)
        self.fc2 = nnx.Linear(d_ff, d, rngs=rngs)
        self.ln2 = nnx.LayerNorm(d, epsilon=EPS, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        B, T, C = x.shape
        q, k, v = self.qkv(x).reshape(B, T, 3, self.heads, C // self.heads).transpose(2, 0, 1, 3, 4)  # [B, T, H, hd]
        a = jax.nn.dot_product_attention(q, k, v)  # bidirectional, as torch's SDPA call
        x = self.ln1(x + self.proj(a.reshape(B, T, C)))
        return self.ln2(x + self.fc2(jax.nn.gelu(self.fc1(x), approximate=False)))  # torch's exact GELU


class Classifier(nnx.Module):
    def __init__(self, cfg: UserConfig, rngs: nnx.Rngs) -> None:
        d, d_ff = cfg.d_model, cfg.d_ff or 4 * cfg.d_model
        self.tok = nnx.Embed(cfg.vocab, d, rngs=rngs)
        self.pos = nnx.Embed(cfg.context, d, rngs=rngs)
        self.ln = nnx.LayerNorm(d, epsilon=EPS, rngs=rngs)
        self.blocks = nnx.List([Block(d, cfg.heads, d_ff, rngs) for _ in range(cfg.layers)])
        self.head = nnx.Linear(d, LABELS, rngs=rngs)

    def __call__(self, idx: jax.Array) -> jax.Array:
        x = self.ln(self.tok(idx) + self.pos(jnp.arange(idx.shape[1])))
        for block in self.blocks:
            x = block(x)
        return self.head(x[:, 0])


def _linear(sd: dict[str, np.ndarray], name: str) -> dict[str, np.ndarray]:
    return {"kernel": sd[f"{name}.weight"].T, "bias": sd[f"{name}.bias"]}


def _norm(sd: dict[str, np.ndarray], name: str) -> dict[str, np.ndarray]:
    return {"scale": sd[f"{name}.weight"], "bias": sd[f"{name}.bias"]}


def to_jax(sd: dict[str, np.ndarray]) -> dict[str, Any]:
    """torch ``state_dict`` -> the NNX model's parameters as a pure dict (``nnx.List`` items keyed by index)."""
    layers = 1 + max(int(k.split(".")[1]) for k in sd if k.startswith("blocks."))
    blocks = {i: {**{n: _linear(sd, f"blocks.{i}.{n}") for n in ("qkv", "proj", "fc1", "fc2")},
                  **{n: _norm(sd, f"blocks.{i}.{n}") for n in ("ln1", "ln2")}} for i in range(layers)}
    return {"tok": {"embedding": sd["tok.weight"]}, "pos": {"embedding": sd["pos.weight"]}, "ln": _norm(sd, "ln"),
            "blocks": blocks, "head": _linear(sd, "head")}


def build_jax(cfg: UserConfig) -> JaxUserModel:
    graphdef, _ = nnx.split(nnx.eval_shape(lambda: Classifier(cfg, nnx.Rngs(0))))

    def loss_fn(params: dict[str, Any], x: jax.Array, y: jax.Array) -> jax.Array:
        logits = nnx.merge(graphdef, params)(x)
        return optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), y).mean()

    return JaxUserModel(loss_fn=loss_fn, to_jax=to_jax)
