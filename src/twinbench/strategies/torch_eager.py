"""PyTorch eager: the baseline. Forward, backward, clipping and AdamW op by op, no compilation."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from twinbench.measure.device import torch_device
from twinbench.models import gpt_torch
from twinbench.models.weights import Canonical, canonical_to_torch, torch_to_canonical
from twinbench.spec import RunSpec


class TorchTrainer:
    """Model + AdamW + a step function; ``step_fn`` may be replaced by a compiled version of itself."""

    def __init__(self, spec: RunSpec, weights: Canonical):
        self.device = torch_device()
        self.model = gpt_torch.GPT(spec.model)
        canonical_to_torch(self.model, weights)
        self.model.to(self.device).train()
        self.optimizer = gpt_torch.make_optimizer(self.model, spec.train.lr, spec.train.weight_decay)
        self.step_fn = self.train_step

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        loss = gpt_torch.loss_fn(self.model, x, y)
        loss.backward()
        gpt_torch.clip_grads(self.model)
        self.optimizer.step()
        return loss.detach()

    def step(self, x: np.ndarray, y: np.ndarray) -> Any:
        xb = torch.from_numpy(x).to(self.device, non_blocking=True)
        yb = torch.from_numpy(y).to(self.device, non_blocking=True)
        return self.step_fn(xb, yb)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def weights(self) -> Canonical:
        return torch_to_canonical(self.model)


def build(spec: RunSpec, weights: Canonical) -> TorchTrainer:
    return TorchTrainer(spec, weights)
