"""The GPT family: GPT-2 twins (``model_torch.py`` / ``model_jax.py``), next-token language modelling.

Learned position embeddings, pre-LayerNorm blocks, causal self-attention, tanh-GELU MLP, LM head tied to the
token embedding, GPT-2 initialisation; Hugging Face ``gpt2`` checkpoints in and out (``hf.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from twinbench.config import ModelConfig, TrainConfig
from twinbench.models.family import OPTIONS, TWIN_OPTIONS, Family, jax_model_of, lazy
from twinbench.models.gpt.hf import FORMAT
from twinbench.models.weights import Canonical

GPT_FLOPS = "FLOPs/token = 6N + 12*L*d*T (N without position embeddings; remat not counted)"


def gpt_flops_per_token(cfg: Any, seq: int) -> int:
    """``6 N + 12 L d T``: N every parameter but the position embeddings (the tied LM head is the one real
    matmul of ``wte``, counted once); Kaplan et al. 2020 / PaLM appendix B, what nanoGPT prints."""
    d, ff, L = cfg.d_model, cfg.ff, cfg.layers
    per_layer = 4 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * ff + ff) + (ff * d + d)  # 2 LN, attn, mlp
    n = cfg.vocab * d + L * per_layer + 2 * d  # wte (tied head), blocks, ln_f
    return 6 * n + 12 * L * d * seq


def init_gpt(cfg: Any, seed: int) -> Canonical:
    """GPT-2 initialisation in the canonical layout, from a NumPy seed, so both twins start identical.

    Normal(0, 0.02) for embeddings and linear weights, residual projections (``c_proj``) scaled by
    1/sqrt(2 * layers), zero biases, LayerNorm weight 1 and bias 0: what ``GPT.__init__`` does natively.
    """
    rng = np.random.default_rng(seed)
    d, ff, proj_std = cfg.d_model, cfg.ff, 0.02 / np.sqrt(2 * cfg.layers)

    def normal(shape: tuple[int, ...], std: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    w: Canonical = {"wte.weight": normal((cfg.vocab, d)), "wpe.weight": normal((cfg.context, d))}
    linears = {"attn.c_attn": (d, 3 * d, 0.02), "attn.c_proj": (d, d, proj_std),
               "mlp.c_fc": (d, ff, 0.02), "mlp.c_proj": (ff, d, proj_std)}
    for i in range(cfg.layers):
        for ln in ("ln_1", "ln_2"):
            w[f"blocks.{i}.{ln}.weight"] = np.ones(d, np.float32)
            w[f"blocks.{i}.{ln}.bias"] = np.zeros(d, np.float32)
        for name, (n_in, n_out, std) in linears.items():
            w[f"blocks.{i}.{name}.weight"] = normal((n_in, n_out), std)
            w[f"blocks.{i}.{name}.bias"] = np.zeros(n_out, np.float32)
    w["ln_f.weight"] = np.ones(d, np.float32)
    w["ln_f.bias"] = np.zeros(d, np.float32)
    return w


PRESETS: dict[str, tuple[ModelConfig, TrainConfig]] = {
    "tiny": (ModelConfig(family="gpt", layers=2, d_model=64, heads=2, vocab=256, context=32),
             TrainConfig(batch=4, seq=32, steps=8, warmup=2, lr=3e-3)),
    "small": (ModelConfig(family="gpt", layers=4, d_model=256, heads=4, vocab=256, context=128),
              TrainConfig(batch=8, seq=128, steps=30, warmup=5, lr=1e-3)),
    "gpt2-124m": (ModelConfig(family="gpt", layers=12, d_model=768, heads=12, vocab=50257, context=1024),
                  TrainConfig(batch=8, seq=1024, steps=30, warmup=5, lr=6e-4)),
    "gpt-350m": (ModelConfig(family="gpt", layers=24, d_model=1024, heads=16, vocab=50257, context=1024),
                 TrainConfig(batch=8, seq=1024, steps=30, warmup=5, lr=3e-4)),
}

FAMILY = Family(
    name="gpt", task="lm", supports=frozenset(OPTIONS),
    torch_model=lazy("twinbench.models.gpt.model_torch:GPT"),
    torch_loss=lazy("twinbench.models.gpt.model_torch:loss_fn"),
    torch_optimizer=lazy("twinbench.models.gpt.model_torch:make_optimizer"), torch_blocks=lambda m: list(m.blocks),
    jax_model=jax_model_of("twinbench.models.gpt.model_jax:GPT"), jax_loss=lazy("twinbench.models.gpt.model_jax:loss_fn"),
    jax_optimizer=lazy("twinbench.models.gpt.model_jax:make_optimizer"),
    init_weights=init_gpt, flops_per_token=gpt_flops_per_token, flops_convention=GPT_FLOPS,
    native_options=TWIN_OPTIONS, unsupported={}, hf_model_type="gpt2",
    presets=PRESETS, min_vocab=256, causal=True, masked=False,
    linear_suffixes=("c_attn.weight", "c_proj.weight", "c_fc.weight"), layer_list=("blocks",), hf=FORMAT,
)
