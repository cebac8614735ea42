"""PyTorch strategies over a user's module (``--model``): ``eager``, ``compile``, ``compile-regional``, ``+bf16``.

The same step as the twins' :class:`~twinbench.strategies.torch_eager.TorchTrainer` (zero_grad, loss,
backward, global-norm clip, AdamW), around the user's ``loss_fn(module, x, y)``. ``compile`` compiles the
forward+loss as one graph, ``compile-regional`` compiles each block of ``UserModel.blocks`` (default: the
items of the module's largest ``nn.ModuleList``) in place, ``+optc`` the optimizer half, ``+bf16`` runs the
forward under ``torch.autocast(bfloat16)`` with fp32 parameters and optimizer state. torchax is never
imported here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from twinbench.byo import family as fam
from twinbench.measure.device import torch_device
from twinbench.spec import RunSpec
from twinbench.strategies.options import compute_dtype
from twinbench.strategies.torch_eager import explain_parts, to_device


class UserTorchTrainer:
    def __init__(self, spec: RunSpec, weights: dict[str, np.ndarray], compile_mode: str = "none"):
        self.device = torch_device()
        self.um = fam.torch_model(spec, weights)
        self.model = self.um.module
        self.model.to(self.device).train()
        self.bf16 = compute_dtype(spec) == "bf16"
        self.optimizer = fam.torch_optimizer(self.model, spec.train.lr, spec.train.weight_decay)
        if compile_mode == "regional":
            blocks = fam.torch_blocks(self.um)
            if not blocks:
                raise ValueError("compile-regional: the user model names no blocks (UserModel.blocks) and has "
                                 "no nn.ModuleList")
            for block in blocks:
                block.compile()
        elif compile_mode == "whole":
            self.forward_loss = torch.compile(self.forward_loss)  # type: ignore[method-assign]
        if "optc" in spec.modifiers:
            self.update = torch.compile(self.update)  # type: ignore[method-assign]

    def forward_loss(self, x: Any, y: Any) -> torch.Tensor:
        with torch.autocast(self.device.type, torch.bfloat16, enabled=self.bf16):
            return self.um.loss_fn(self.model, x, y).float().reshape(())

    def update(self) -> None:
        fam.clip(self.model)
        self.optimizer.step()

    def train_step(self, x: Any, y: Any) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.forward_loss(x, y)
        loss.backward()
        with torch.profiler.record_function("optimizer"):  # the trace's optimizer phase (explain/)
            self.update()
        return loss.detach()

    def explain_parts(self) -> dict[str, Any]:
        """The step's parts for ``explain``'s phases by timing (twinbench/explain/timing.py)."""
        return explain_parts(self, lambda a: to_device(a, self.device))

    def step(self, x: Any, y: Any) -> Any:
        with torch.profiler.record_function("input"):
            x, y = to_device(x, self.device), to_device(y, self.device)
        return self.train_step(x, y)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def weights(self) -> dict[str, np.ndarray]:
        return fam.state_numpy(self.model)


def build(spec: RunSpec, weights: dict[str, np.ndarray]) -> UserTorchTrainer:
    return UserTorchTrainer(spec, weights)


def build_compile(spec: RunSpec, weights: dict[str, np.ndarray]) -> UserTorchTrainer:
    return UserTorchTrainer(spec, weights, "whole")


def build_regional(spec: RunSpec, weights: dict[str, np.ndarray]) -> UserTorchTrainer:
    return UserTorchTrainer(spec, weights, "regional")
