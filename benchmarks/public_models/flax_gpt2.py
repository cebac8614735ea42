"""Hugging Face's ``FlaxGPT2LMHeadModel`` as a twinbench ``--jax-model`` port of nanoGPT (``nanogpt.py``):
the same shape, exact GELU (``activation_function="gelu"``, as nanoGPT's ``nn.GELU()``), no dropout, tied
head, its weights mapped from nanoGPT's state dict (HF's Flax ``Conv1D`` kernels are ``[out, in]``, as torch's
``nn.Linear`` weights).

Needs transformers 4.x with Flax (transformers 5 dropped Flax): run twinbench from an environment that has it.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from twinbench.byo import JaxUserModel, UserConfig


def build_jax(cfg: UserConfig) -> JaxUserModel:
    from transformers import FlaxGPT2LMHeadModel, GPT2Config

    conf = GPT2Config(vocab_size=cfg.vocab, n_positions=cfg.context, n_embd=cfg.d_model, n_layer=cfg.layers,
                      n_head=cfg.heads, activation_function="gelu", resid_pdrop=0.0, embd_pdrop=0.0,
                      attn_pdrop=0.0, tie_word_embeddings=True)
    model = FlaxGPT2LMHeadModel(conf, input_shape=(1, cfg.seq), seed=cfg.seed, _do_init=False)

    def loss_fn(params: Any, x: jax.Array, y: jax.Array) -> jax.Array:
        logits = model(x.astype(jnp.int32), params=params, train=False).logits.astype(jnp.float32)
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, y[..., None].astype(jnp.int32), axis=-1))

    def to_jax(sd: dict[str, Any]) -> Any:
        def lin(p: str) -> dict[str, Any]:
            return {"kernel": sd[f"{p}.weight"], "bias": sd[f"{p}.bias"]}

        def ln(p: str) -> dict[str, Any]:
            return {"scale": sd[f"{p}.weight"], "bias": sd[f"{p}.bias"]}

        h = {str(i): {"ln_1": ln(f"transformer.h.{i}.ln_1"), "ln_2": ln(f"transformer.h.{i}.ln_2"),
                      "attn": {"c_attn": lin(f"transformer.h.{i}.attn.c_attn"),
                               "c_proj": lin(f"transformer.h.{i}.attn.c_proj")},
                      "mlp": {"c_fc": lin(f"transformer.h.{i}.mlp.c_fc"),
                              "c_proj": lin(f"transformer.h.{i}.mlp.c_proj")}}
             for i in range(cfg.layers)}
        return {"transformer": {"wte": {"embedding": sd["transformer.wte.weight"]},
                                "wpe": {"embedding": sd["transformer.wpe.weight"]},
                                "h": h, "ln_f": ln("transformer.ln_f")}}

    return JaxUserModel(loss_fn=loss_fn, to_jax=to_jax)
