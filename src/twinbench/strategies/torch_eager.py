"""PyTorch eager: the baseline. Forward, backward, clipping and AdamW op by op, no compilation."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from twinbench.measure.device import torch_device
from twinbench.models import family, gpt_torch
from twinbench.models.weights import Canonical, canonical_to_torch, torch_to_canonical
from twinbench.spec import RunSpec
from twinbench.strategies.options import model_options


class TorchTrainer:
    """Model + AdamW + a step function. ``forward_loss`` and ``update`` are the two halves a compiling
    strategy may replace by compiled versions of themselves (``torch_compile.py``); ``+bf16`` and ``+remat``
    reach the model as :class:`ModelOptions`.
    """

    def __init__(self, spec: RunSpec, weights: Canonical):
        self.device = torch_device()
        self.twin = family.module("torch", spec.model.family)  # gpt_torch | bert_torch
        self.model = (gpt_torch.GPT(spec.model, model_options(spec)) if spec.model.family == "gpt"
                      else self.twin.BERT(spec.model))
        canonical_to_torch(self.model, weights)
        self.model.to(self.device).train()
        self.optimizer = self.twin.make_optimizer(self.model, spec.train.lr, spec.train.weight_decay)
        self.step_fn = self.train_step

    def forward_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.twin.loss_fn(self.model, x, y)

    def update(self) -> None:
        """Clip the gradients by global norm and take the AdamW step."""
        self.twin.clip_grads(self.model)
        self.optimizer.step()

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.forward_loss(x, y)
        loss.backward()
        self.update()
        return loss.detach()

    def step(self, x: np.ndarray, y: np.ndarray) -> Any:
        """``x`` may be one array or a tuple of them (BERT: ids, segments, mask), on the host or the device."""
        return self.step_fn(to_device(x, self.device), to_device(y, self.device))

    def predict(self, x: Any) -> np.ndarray:
        """Predicted classes of a host batch (classification); the training state is not touched."""
        with torch.no_grad():
            return self.model(*to_device(x, self.device)).argmax(-1).cpu().numpy()

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def weights(self) -> Canonical:
        return torch_to_canonical(self.model)


def to_device(x: Any, device: torch.device) -> Any:
    """A host array (or an already prefetched tensor), or a tuple of them, on ``device``."""
    if isinstance(x, (tuple, list)):
        return tuple(to_device(t, device) for t in x)
    t = torch.from_numpy(x) if isinstance(x, np.ndarray) else x
    return t.to(device, non_blocking=True)


def build(spec: RunSpec, weights: Canonical) -> TorchTrainer:
    return TorchTrainer(spec, weights)
