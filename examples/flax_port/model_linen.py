"""The Flax linen port of ``model_torch.py``, trained the linen way: a ``TrainState`` and its ``train_step``.

A linen training script keeps its model in ``TrainState(apply_fn=model.apply, params=..., tx=optax...)`` and
computes its loss from ``state.apply_fn({"params": params}, x)``. twinbench measures the same loss over the same
parameters (``--jax-model``): ``build_jax`` hands it ``loss_fn(params, x, y)``, the very function ``train_step``
differentiates, and ``to_jax``, the torch ``state_dict`` mapped onto linen's parameter names (``Dense`` kernels
are ``[in, out]``: transposed). twinbench's ``port`` step then trains those parameters with the twins' AdamW, in
place of your ``tx``, so that both frameworks run the same optimizer::

    twinbench compare --model examples/flax_port/model_torch.py:build \\
        --jax-model examples/flax_port/model_linen.py:build_jax --preset tiny --strategies eager,compile,port
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state

from twinbench.byo import JaxUserModel, UserConfig

LABELS = 2  # as model_torch.py
EPS = 1e-5  # torch's LayerNorm epsilon (Flax's default is 1e-6)


class Block(nn.Module):
    heads: int
    d_ff: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        B, T, C = x.shape
        qkv = nn.Dense(3 * C, name="qkv")(x).reshape(B, T, 3, self.heads, C // self.heads)
        q, k, v = qkv.transpose(2, 0, 1, 3, 4)  # 3 x [B, T, H, hd]
        a = jax.nn.dot_product_attention(q, k, v)  # bidirectional, as torch's SDPA call
        x = nn.LayerNorm(epsilon=EPS, name="ln1")(x + nn.Dense(C, name="proj")(a.reshape(B, T, C)))
        h = nn.gelu(nn.Dense(self.d_ff, name="fc1")(x), approximate=False)  # torch's exact GELU
        return nn.LayerNorm(epsilon=EPS, name="ln2")(x + nn.Dense(C, name="fc2")(h))


class Classifier(nn.Module):
    vocab: int
    context: int
    d: int
    heads: int
    d_ff: int
    layers: int

    @nn.compact
    def __call__(self, idx: jax.Array) -> jax.Array:
        x = nn.Embed(self.vocab, self.d, name="tok")(idx) + nn.Embed(self.context, self.d, name="pos")(
            jnp.arange(idx.shape[1]))
        x = nn.LayerNorm(epsilon=EPS, name="ln")(x)
        for i in range(self.layers):
            x = Block(self.heads, self.d_ff, name=f"blocks_{i}")(x)
        return nn.Dense(LABELS, name="head")(x[:, 0])


def classifier(cfg: UserConfig) -> Classifier:
    return Classifier(cfg.vocab, cfg.context, cfg.d_model, cfg.heads, cfg.d_ff or 4 * cfg.d_model, cfg.layers)


def make_loss(apply_fn: Callable[..., jax.Array]) -> Callable[[Any, jax.Array, jax.Array], jax.Array]:
    """The loss of a batch over ``params``, as a TrainState's ``apply_fn`` computes it."""

    def loss_fn(params: Any, x: jax.Array, y: jax.Array) -> jax.Array:
        logits = apply_fn({"params": params}, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), y).mean()

    return loss_fn


def create_state(cfg: UserConfig, params: Any, tx: optax.GradientTransformation) -> train_state.TrainState:
    """Your script's state: the linen model's ``apply``, its parameters and your optimizer."""
    return train_state.TrainState.create(apply_fn=classifier(cfg).apply, params=params, tx=tx)


@jax.jit
def train_step(state: train_state.TrainState, x: jax.Array, y: jax.Array) -> tuple[train_state.TrainState, jax.Array]:
    """Your script's step: the gradient of the loss, applied by the state's optimizer."""
    loss, grads = jax.value_and_grad(make_loss(state.apply_fn))(state.params, x, y)
    return state.apply_gradients(grads=grads), loss


def _dense(sd: dict[str, np.ndarray], name: str) -> dict[str, np.ndarray]:
    return {"kernel": sd[f"{name}.weight"].T, "bias": sd[f"{name}.bias"]}


def _norm(sd: dict[str, np.ndarray], name: str) -> dict[str, np.ndarray]:
    return {"scale": sd[f"{name}.weight"], "bias": sd[f"{name}.bias"]}


def to_jax(sd: dict[str, np.ndarray]) -> dict[str, Any]:
    """torch ``state_dict`` -> linen's ``params`` (``blocks.0.qkv.weight`` -> ``blocks_0/qkv/kernel``, transposed)."""
    layers = 1 + max(int(k.split(".")[1]) for k in sd if k.startswith("blocks."))
    params: dict[str, Any] = {"tok": {"embedding": sd["tok.weight"]}, "pos": {"embedding": sd["pos.weight"]},
                              "ln": _norm(sd, "ln"), "head": _dense(sd, "head")}
    for i in range(layers):
        params[f"blocks_{i}"] = {**{n: _dense(sd, f"blocks.{i}.{n}") for n in ("qkv", "proj", "fc1", "fc2")},
                                 **{n: _norm(sd, f"blocks.{i}.{n}") for n in ("ln1", "ln2")}}
    return params


def build_jax(cfg: UserConfig) -> JaxUserModel:
    return JaxUserModel(loss_fn=make_loss(classifier(cfg).apply), to_jax=to_jax)
