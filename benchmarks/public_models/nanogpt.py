"""nanoGPT's ``model.py`` as a twinbench ``--model`` (bring your own model), trained as nanoGPT's ``train.py``
trains it on a CPU: AdamW (betas 0.9/0.95, weight decay on rank >= 2 parameters; twinbench's step adds the
global-norm clipping at 1.0 that ``train.py`` applies), dropout 0, biases on, tied LM head.

nanoGPT (MIT licence) is not part of twinbench: get ``model.py`` from https://github.com/karpathy/nanoGPT and
point ``NANOGPT_MODEL`` at it (default: ``nanoGPT/model.py`` under the current directory)::

    NANOGPT_MODEL=/path/to/nanoGPT/model.py twinbench explain torch:eager jax:port \\
        --model benchmarks/public_models/nanogpt.py:build \\
        --jax-model benchmarks/public_models/flax_gpt2.py:build_jax --preset small

nanoGPT's MLP uses the exact (erf) GELU (``nn.GELU()``); the twins use the tanh approximation (GPT-2's
``gelu_new``): the one difference in what the two compute.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import numpy as np

from twinbench.byo import UserConfig, UserModel


def nanogpt_module() -> Any:
    path = Path(os.environ.get("NANOGPT_MODEL", "nanoGPT/model.py"))
    if not path.exists():
        raise FileNotFoundError(f"{path}: set NANOGPT_MODEL to nanoGPT's model.py (github.com/karpathy/nanoGPT)")
    spec = importlib.util.spec_from_file_location("nanogpt_model", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def loss_fn(model: Any, x: Any, y: Any) -> Any:
    return model(x, y)[1]  # nanoGPT's forward returns (logits, loss)


def make_batches(cfg: UserConfig) -> Any:
    def batch(i: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(cfg.seed * 1000 + i)
        seq = rng.integers(0, cfg.vocab, size=(cfg.batch, cfg.seq + 1))
        return seq[:, :-1].astype(np.int64), seq[:, 1:].astype(np.int64)

    return batch


def build(cfg: UserConfig) -> UserModel:
    ng = nanogpt_module()
    conf = ng.GPTConfig(block_size=cfg.context, vocab_size=cfg.vocab, n_layer=cfg.layers, n_head=cfg.heads,
                        n_embd=cfg.d_model, dropout=0.0, bias=True)
    model = ng.GPT(conf)
    return UserModel(module=model, loss_fn=loss_fn, batch=make_batches(cfg), blocks=list(model.transformer.h),
                     attention_flops_per_token=12 * cfg.layers * cfg.d_model * cfg.seq)
