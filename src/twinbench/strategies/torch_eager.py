"""PyTorch eager: the baseline. Forward, backward, clipping and AdamW op by op, no compilation.

:class:`TorchTrainer` holds THE PyTorch train step (zero_grad, loss, backward, clip, optimizer step) for every
torch strategy and every model family; strategies compose around it instead of writing their own:
``apply_remat`` (here) -> ``apply_compile`` (``torch_compile.py``, whole or regional) -> ``apply_ddp`` /
``apply_fsdp`` (``torch_ddp.py``, ``torch_fsdp.py``). Each applies to any ``nn.Module`` whose blocks the
family names (``Family.torch_blocks``). A user's module (``--model``) is one more family
(``byo/family.py``'s ``UserFamily``): the same trainer, the same strategies.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.utils.checkpoint import checkpoint

from twinbench.measure.device import torch_device
from twinbench.models import family as families
from twinbench.models.family import Family
from twinbench.models.layers_torch import clip_grads
from twinbench.models.weights import Canonical
from twinbench.spec import RunSpec
from twinbench.strategies.base import StepParts
from twinbench.strategies.modifiers import hook
from twinbench.strategies.options import compute_dtype, model_options


def apply_remat(model: torch.nn.Module, family: Family, spec: RunSpec) -> torch.nn.Module:
    """``+remat``: activation checkpointing of every block the family names. The twins do it themselves
    (``ModelOptions.remat``); any other module gets each block's ``forward`` wrapped in
    ``torch.utils.checkpoint`` (non-reentrant) from outside."""
    if not spec.strategy.mods.remat or "remat" in family.native_options:
        return model
    for block in family.torch_blocks(model):
        forward = block.forward

        def remat_forward(*args: Any, _forward: Any = forward, **kwargs: Any) -> Any:
            return checkpoint(_forward, *args, use_reentrant=False, **kwargs)

        remat_forward.remat = True  # type: ignore[attr-defined]
        block.forward = remat_forward
    return model


class TorchTrainer:
    """Model + AdamW + the one train step. ``forward_loss`` and ``update`` are the two halves a compiling
    strategy may replace by compiled versions of themselves (``apply_compile``); ``module`` is what the loss
    calls (the model, or its DDP wrapper); ``+bf16`` and ``+remat`` reach the twin models as
    :class:`ModelOptions` (other modules: autocast and :func:`apply_remat` from outside).
    """

    def __init__(self, spec: RunSpec, weights: Canonical):
        self.spec = spec
        self.init_process()
        self.family = families.get(spec)
        self.device = torch_device()
        self.model = self.family.torch_model(spec.model, model_options(spec))
        self.family.torch_load(self.model, weights)
        self.model.to(self.device).train()
        self.module: torch.nn.Module = apply_remat(self.model, self.family, spec)
        self.autocast = compute_dtype(spec) == "bf16" and "bf16" not in self.family.native_options
        self.parallelize()
        self.optimizer = self.family.torch_optimizer(self.model, spec.train.lr, spec.train.weight_decay)
        self.forward_backward = self.loss_backward
        for target in spec.strategy.mods.torch_steps():  # a modifier's hook on the step (strategies/modifiers.py)
            self.forward_backward = hook(target)(self, self.forward_backward)
        self.step_fn = self.train_step

    # where a strategy differs ------------------------------------------------------------------------------
    def init_process(self) -> None:
        """Before the device is chosen (torchrun ranks: the process group)."""

    def parallelize(self) -> None:
        """After the model is on its device, before the optimizer sees its parameters (DDP, FSDP)."""

    def place(self, a: Any) -> Any:
        """A host batch (or its part) on this process's device."""
        return to_device(a, self.device)

    def loss_handle(self, loss: torch.Tensor) -> Any:
        return loss

    # the step ----------------------------------------------------------------------------------------------
    def forward_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.autocast:
            with torch.autocast(self.device.type, torch.bfloat16):
                return self.family.torch_loss(self.module, x, y)
        return self.family.torch_loss(self.module, x, y)

    def update(self) -> None:
        """Clip the gradients by global norm and take the AdamW step."""
        clip_grads(self.model)
        self.optimizer.step()

    def loss_backward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The loss and its gradients (``forward_backward`` unless a modifier wraps it)."""
        loss = self.forward_loss(x, y)
        loss.backward()
        return loss

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.forward_backward(x, y)
        with torch.profiler.record_function("optimizer"):  # the trace's optimizer phase (explain/)
            self.update()
        return loss.detach()

    def explain_parts(self) -> StepParts:
        """The step's parts for ``explain``'s phases by timing (twinbench/explain/timing.py)."""
        return explain_parts(self, self.place)

    # the Trainer protocol ------------------------------------------------------------------------------
    def step(self, x: np.ndarray, y: np.ndarray) -> Any:
        """``x`` may be one array or a tuple of them (BERT: ids, segments, mask), on the host or the device."""
        with torch.profiler.record_function("input"):
            x, y = self.place(x), self.place(y)
        return self.loss_handle(self.step_fn(x, y))

    def predict(self, x: Any) -> np.ndarray:
        """Predicted classes of a host batch (classification); the training state is not touched."""
        with torch.no_grad():
            return self.model(*to_device(x, self.device)).argmax(-1).cpu().numpy()  # the whole batch on every rank

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def weights(self) -> Canonical:
        return self.family.torch_weights(self.model)


def explain_parts(trainer: Any, place: Any) -> StepParts:
    """forward alone and forward+backward on the trainer's module, each synced (the step's own halves)."""

    def forward(x: Any, y: Any) -> Any:
        return trainer.forward_loss(x, y).detach()

    def forward_backward(x: Any, y: Any) -> Any:
        trainer.optimizer.zero_grad(set_to_none=True)
        trainer.forward_loss(x, y).backward()

    return StepParts(place=lambda x, y: (place(x), place(y)), forward=forward, forward_backward=forward_backward,
                     wait=lambda _: trainer.sync())


def to_device(x: Any, device: torch.device) -> Any:
    """A host array (or an already prefetched tensor), or a tuple of them, on ``device``."""
    if isinstance(x, (tuple, list)):
        return tuple(to_device(t, device) for t in x)
    t = torch.from_numpy(x) if isinstance(x, np.ndarray) else x
    return t.to(device, non_blocking=True)


def build(spec: RunSpec, weights: Canonical) -> TorchTrainer:
    return TorchTrainer(spec, weights)
