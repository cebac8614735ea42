"""Pieces shared by the PyTorch twins (every family): the default optimizer (AdamW, decaying matrices and
embeddings only) and gradient clipping by global norm, exactly as ``layers_jax.py`` does them with optax.
"""

from __future__ import annotations

import torch
from torch import nn


def decay_mask(name: str, p: torch.Tensor) -> bool:
    """AdamW decays every parameter of rank >= 2 (matrices and embeddings), not biases or LayerNorm."""
    return p.ndim >= 2


#: devices whose parameters torch's fused AdamW kernel updates (one kernel per parameter)
FUSED_ADAMW_DEVICES = ("cpu", "cuda")


def fused_adamw(params: list[torch.Tensor]) -> bool:
    """Whether every parameter can take torch's fused AdamW: floating point, on a CPU or a CUDA GPU. torch picks
    the per-tensor loop by default on a CPU (``foreach`` only where a device has foreach kernels): about ten
    element-wise ops per parameter, each a pass over its memory, where the fused kernel makes one (hundreds of op
    calls a step fewer on the ``small`` GPT). The same update, to float rounding."""
    return bool(params) and all(p.is_floating_point() and p.device.type in FUSED_ADAMW_DEVICES for p in params)


def make_optimizer(model: nn.Module, lr: float, weight_decay: float, betas: tuple[float, float] = (0.9, 0.95),
                   eps: float = 1e-8) -> torch.optim.Optimizer:
    """AdamW with the same semantics as ``layers_jax.make_optimizer`` (GPT's betas 0.9/0.95, eps 1e-8 unless
    a family gives its own), fused where torch has the kernel (:func:`fused_adamw`)."""
    decay = [p for n, p in model.named_parameters() if decay_mask(n, p)]
    no_decay = [p for n, p in model.named_parameters() if not decay_mask(n, p)]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused_adamw(decay + no_decay))


GRAD_CLIP = 1.0


def clip_grads(model: nn.Module) -> torch.Tensor:
    """Clip by global norm 1.0 exactly as ``optax.clip_by_global_norm`` does (no epsilon). The norm is
    ``torch.nn.utils.get_total_norm``'s, the one ``clip_grad_norm_`` computes: one ``_foreach_norm`` over the
    gradients where the device has it, not one ``vector_norm`` call per gradient."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.nn.utils.get_total_norm(grads, 2.0)
    scale = torch.clamp(GRAD_CLIP / norm, max=1.0)
    torch._foreach_mul_(grads, scale)
    return norm
