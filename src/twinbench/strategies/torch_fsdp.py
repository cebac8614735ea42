"""PyTorch FSDP2: ``fully_shard`` on every Transformer block and on the root, one process per device.

Every parameter becomes a DTensor sharded on dimension 0 across ranks (``Shard(0)``), and so does AdamW's
state; each block's parameters are all-gathered just before its forward/backward and freed after, and the
gradients are reduce-scattered (averaged). Launched by ``torchrun`` like DDP; each rank trains on its rows
of the global batch. The model (any family, a user's module too) is unchanged: ``fully_shard`` is applied from
outside to the blocks its family names. The root is the model itself, or, where the family's loss may reach
parts of the module rather than call its forward (a user's ``loss_fn``), a :class:`LossRoot` whose forward is
the loss, so whatever the loss touches is gathered.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard

from twinbench.distributed import sharding_report as sr
from twinbench.distributed import torchrun
from twinbench.models.weights import Canonical
from twinbench.spec import RunSpec
from twinbench.strategies.torch_ddp import RankTrainer, opt_entries
from twinbench.strategies.torch_eager import TorchTrainer


class _FullState:
    """Stands in for a model in ``Family.torch_weights``: the gathered (full) tensors of a sharded model."""

    def __init__(self, model: torch.nn.Module):
        self.model = model

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v) for k, v in self.model.state_dict().items()}


class LossRoot(torch.nn.Module):
    """FSDP's root over a model whose loss may call its parts: ``forward(x, y)`` is ``loss(model, x, y)``."""

    def __init__(self, model: torch.nn.Module, loss: Any):
        super().__init__()
        self.model, self.loss = model, loss

    def forward(self, x: Any, y: Any) -> torch.Tensor:
        return self.loss(self.model, x, y)


def apply_fsdp(trainer: TorchTrainer, world: int) -> torch.nn.Module | None:
    """FSDP2: ``fully_shard`` every block the family names, then the root (embeddings, heads, final norms):
    the model, or a :class:`LossRoot` over it (returned; None when the root is the model)."""
    mesh = init_device_mesh(trainer.device.type, (world,), mesh_dim_names=("data",))
    for block in trainer.family.torch_blocks(trainer.model):
        fully_shard(block, mesh=mesh)
    if trainer.family.loss_is_forward:
        fully_shard(trainer.model, mesh=mesh)
        return None
    root = LossRoot(trainer.module, trainer.family.torch_loss)
    fully_shard(root, mesh=mesh)
    return root


class FSDPTrainer(RankTrainer):
    root: torch.nn.Module | None = None

    def parallelize(self) -> None:
        self.root = apply_fsdp(self, self.world)  # gradients reduce-scattered (averaged); clipping sees DTensors

    def forward_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.root is None:
            return super().forward_loss(x, y)
        with torch.autocast(self.device.type, torch.bfloat16, enabled=self.autocast):
            return self.root(x, y)

    def weights(self) -> Canonical:
        return self.family.torch_weights(_FullState(self.model))

    def report(self) -> sr.Report:
        # a forward pass alone (predict) leaves the root's parameters gathered: shard them back to be read
        for m in self.model.modules():
            if isinstance(m, FSDPModule):
                m.reshard()
        params = [sr.torch_entry(n, p, self.world, "dtensor") for n, p in self.model.named_parameters()]
        opt = opt_entries(self.model, self.optimizer, self.world)
        named = dict(self.model.named_parameters())
        drawn = self.batch_entries()[:1]
        big = sr.largest(params)
        if big is not None:
            drawn.append(sr.torch_entry(big.name, named[big.name], self.world, "dtensor", with_layout=True))
        rep = sr.build(kind="fsdp", mesh=torchrun.describe() + ", FSDP2 fully_shard per block", device_count=self.world,
                       batch=self.batch_entries(), params=params, opt_state=opt, drawn=drawn)
        return sr.Report(device_count=self.world, state_bytes_per_device=rep.state_bytes_per_device, sharding=rep,
                      warnings=sr.warnings(rep))


def build(spec: RunSpec, weights: Canonical) -> FSDPTrainer:
    return FSDPTrainer(spec, weights)
