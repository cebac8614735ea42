"""What both Llama twins and its Hugging Face mapping derive from a ModelConfig (NumPy only)."""

from __future__ import annotations

from typing import Any

import numpy as np

EPS = 1e-6  # RMSNorm epsilon (LlamaConfig's rms_norm_eps default)
ROPE_THETA = 10000.0  # RoPE base (LlamaConfig's default rope_theta)
#: Query heads per key/value head. ModelConfig has no key/value head count, so the twin derives it:
#: ``heads / KV_GROUP`` key/value heads when ``heads`` is even, one per query head otherwise.
KV_GROUP = 2


def kv_heads(cfg: Any) -> int:
    """Key/value heads of the grouped-query attention of ``cfg``."""
    return cfg.heads // KV_GROUP if cfg.heads % KV_GROUP == 0 else cfg.heads


def inv_freq(cfg: Any) -> np.ndarray:
    """RoPE inverse frequencies ``1 / theta^(2i/hd)``, float32 (computed in float64: both twins get these bits)."""
    hd = cfg.d_model // cfg.heads
    return (1.0 / ROPE_THETA ** (np.arange(0, hd, 2, dtype=np.float64) / hd)).astype(np.float32)
