"""The user's own JAX port of ``llama.py``: pure functions of a parameter dict (``--jax-model``).

``build_jax(cfg)`` returns a :class:`twinbench.byo.JaxUserModel`: ``loss_fn(params, x, y)`` and ``to_jax``,
the mapping of the torch ``state_dict`` (NumPy arrays, torch layout) onto this port's parameters. twinbench
checks the port against the torch module (loss and gradients on batch 0, 10 AdamW steps) before measuring it
as strategy ``port``::

    twinbench compare --model examples/byo/llama.py:build --jax-model examples/byo/llama_jax.py:build_jax \\
        --preset tiny --strategies eager,torchax,port
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from twinbench.byo import JaxUserModel, UserConfig


def rms_norm(x: jax.Array, weight: jax.Array, eps: float = 1e-6) -> jax.Array:
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def rotate(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    x1, x2 = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)


def attention(p: dict[str, Any], x: jax.Array, cos: jax.Array, sin: jax.Array, heads: int) -> jax.Array:
    B, T, C = x.shape

    def split(w: jax.Array) -> jax.Array:
        return (x @ w).reshape(B, T, heads, C // heads).transpose(0, 2, 1, 3)

    q, k, v = split(p["wq"]), split(p["wk"]), split(p["wv"])
    q, k = rotate(q, cos, sin), rotate(k, cos, sin)
    scores = q @ k.transpose(0, 1, 3, 2) / jnp.sqrt(C // heads).astype(x.dtype)
    scores = jnp.where(jnp.tril(jnp.ones((T, T), bool)), scores, -jnp.inf)
    y = jax.nn.softmax(scores, axis=-1) @ v
    return y.transpose(0, 2, 1, 3).reshape(B, T, C) @ p["wo"]


def forward(params: dict[str, Any], idx: jax.Array, heads: int) -> jax.Array:
    hd = params["tok"].shape[1] // heads
    inv_freq = 1.0 / (10000.0 ** (jnp.arange(0, hd, 2, dtype=jnp.float32) / hd))
    angles = jnp.arange(idx.shape[1], dtype=jnp.float32)[:, None] * inv_freq[None, :]
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    x = params["tok"][idx]
    for b in params["blocks"]:
        x = x + attention(b["attn"], rms_norm(x, b["attn_norm"]), cos, sin, heads)
        h = rms_norm(x, b["mlp_norm"])
        x = x + (jax.nn.silu(h @ b["mlp"]["w1"]) * (h @ b["mlp"]["w3"])) @ b["mlp"]["w2"]
    return rms_norm(x, params["norm"]) @ params["head"]


def to_jax(sd: dict[str, np.ndarray]) -> dict[str, Any]:
    """torch ``state_dict`` -> this port's params; nn.Linear weights are [out, in]: transposed."""
    layers = 1 + max(int(k.split(".")[1]) for k in sd if k.startswith("blocks."))
    blocks = []
    for i in range(layers):
        p = f"blocks.{i}."
        blocks.append({
            "attn_norm": sd[p + "attn_norm.weight"], "mlp_norm": sd[p + "mlp_norm.weight"],
            "attn": {w: sd[f"{p}attn.{w}.weight"].T for w in ("wq", "wk", "wv", "wo")},
            "mlp": {w: sd[f"{p}mlp.{w}.weight"].T for w in ("w1", "w2", "w3")},
        })
    return {"tok": sd["tok.weight"], "blocks": blocks, "norm": sd["norm.weight"], "head": sd["head.weight"].T}


def build_jax(cfg: UserConfig) -> JaxUserModel:
    def loss_fn(params: dict[str, Any], x: jax.Array, y: jax.Array) -> jax.Array:
        logits = forward(params, x, cfg.heads).astype(jnp.float32)
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, y[..., None].astype(jnp.int32), axis=-1))

    return JaxUserModel(loss_fn=loss_fn, to_jax=to_jax)
