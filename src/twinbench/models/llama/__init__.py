"""The Llama family: Llama twins (``model_torch.py`` / ``model_jax.py``), next-token language modelling.

RoPE, RMSNorm, SwiGLU, grouped-query attention, no biases, an untied LM head; Hugging Face ``llama``
checkpoints (``LlamaForCausalLM``) in and out (``hf.py``). Presets: ``llama-tiny`` and ``llama-small`` for a CPU,
``llama-300m`` (about 301.5M parameters) for a GPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from twinbench.config import ModelConfig, TrainConfig
from twinbench.models.family import OPTIONS, TWIN_OPTIONS, Family, jax_model_of, lazy
from twinbench.models.llama.hf import FORMAT, shapes
from twinbench.models.weights import Canonical

FLOPS = ("FLOPs/token = 6N + 12*L*d*T (N without the token embedding, a lookup; the untied head counted; "
         "remat not counted)")


def flops_per_token(cfg: Any, seq: int) -> int:
    """``6 N + 12 L d T``: N every matmul weight (the blocks and the untied head; RMSNorm weights are tiny and
    counted with them); the token embedding is a lookup, not counted. Attention ``12 L d T`` as for GPT
    (grouped-query attention shares keys and values, not the score or value products)."""
    n = sum(int(np.prod(s)) for name, s in shapes(cfg).items() if name != "embed_tokens.weight")
    return 6 * n + 12 * cfg.layers * cfg.d_model * seq


def init_llama(cfg: Any, seed: int) -> Canonical:
    """Normal(0, 0.02) for the embedding and every linear weight, RMSNorm weights 1 (what ``Llama.__init__``
    does natively and Hugging Face's ``initializer_range``), from a NumPy seed: both twins start identical."""
    rng = np.random.default_rng(seed)
    return {name: np.ones(s, np.float32) if len(s) == 1 else (rng.standard_normal(s) * 0.02).astype(np.float32)
            for name, s in shapes(cfg).items()}


PRESETS: dict[str, tuple[ModelConfig, TrainConfig]] = {
    "llama-tiny": (ModelConfig(family="llama", layers=2, d_model=64, heads=4, d_ff=176, vocab=256, context=32),
                   TrainConfig(batch=4, seq=32, steps=8, warmup=2, lr=3e-3)),
    "llama-small": (ModelConfig(family="llama", layers=4, d_model=256, heads=4, d_ff=688, vocab=256, context=128),
                    TrainConfig(batch=8, seq=128, steps=30, warmup=5, lr=1e-3)),
    # ~301.5M parameters (tests/models/test_llama_parity.py counts them): for GPUs
    "llama-300m": (ModelConfig(family="llama", layers=20, d_model=1024, heads=16, d_ff=2816, vocab=32000,
                               context=1024),
                   TrainConfig(batch=8, seq=1024, steps=30, warmup=5, lr=3e-4)),
}

FAMILY = Family(
    name="llama", task="lm", supports=frozenset(OPTIONS) - {"fused-qkv"},
    torch_model=lazy("twinbench.models.llama.model_torch:Llama"),
    torch_loss=lazy("twinbench.models.llama.model_torch:loss_fn"),
    torch_optimizer=lazy("twinbench.models.llama.model_torch:make_optimizer"),
    torch_blocks=lambda m: list(m.layers),
    jax_model=jax_model_of("twinbench.models.llama.model_jax:Llama"),
    jax_loss=lazy("twinbench.models.llama.model_jax:loss_fn"),
    jax_optimizer=lazy("twinbench.models.llama.model_jax:make_optimizer"),
    init_weights=init_llama, flops_per_token=flops_per_token, flops_convention=FLOPS,
    native_options=TWIN_OPTIONS, hf_model_type="llama",
    unsupported={"fused-qkv": "llama's grouped-query k and v have fewer heads than q: no one [3, B, H, T, D] layout"},
    presets=PRESETS, min_vocab=256, causal=True, masked=False,
    linear_suffixes=("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight", "gate_proj.weight",
                     "up_proj.weight", "down_proj.weight", "lm_head.weight"),
    layer_list=("layers",), hf=FORMAT,
)
