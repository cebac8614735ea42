"""PyTorch FSDP2: ``fully_shard`` on every Transformer block and on the root, one process per device.

Every parameter becomes a DTensor sharded on dimension 0 across ranks (``Shard(0)``), and so does AdamW's
state; each block's parameters are all-gathered just before its forward/backward and freed after, and the
gradients are reduce-scattered (averaged). Launched by ``torchrun`` like DDP; each rank trains on its rows
of the global batch. The twin GPT itself is unchanged: ``fully_shard`` is applied from outside.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from twinbench.distributed import sharding_report as sr
from twinbench.distributed import torchrun
from twinbench.measure.device import torch_device
from twinbench.models import gpt_torch
from twinbench.models.weights import Canonical, canonical_to_torch, torch_to_canonical
from twinbench.spec import RunSpec
from twinbench.strategies.torch_ddp import GlobalLoss, RankSlice, opt_entries


class _FullState:
    """Stands in for a model in ``torch_to_canonical``: the gathered (full) tensors of a sharded model."""

    def __init__(self, model: torch.nn.Module):
        self.model = model

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v) for k, v in self.model.state_dict().items()}


class FSDPTrainer(RankSlice):
    def __init__(self, spec: RunSpec, weights: Canonical):
        self.init_ranks(spec)
        self.device = torch_device()
        self.mesh = init_device_mesh(self.device.type, (self.world,), mesh_dim_names=("data",))
        self.model = gpt_torch.GPT(spec.model)
        canonical_to_torch(self.model, weights)
        self.model.to(self.device).train()
        for block in self.model.blocks:
            fully_shard(block, mesh=self.mesh)
        fully_shard(self.model, mesh=self.mesh)  # the root: embeddings (tied LM head) and the final LayerNorm
        self.optimizer = gpt_torch.make_optimizer(self.model, spec.train.lr, spec.train.weight_decay)

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        loss = gpt_torch.loss_fn(self.model, x, y)
        loss.backward()  # gradients reduce-scattered (averaged) to each rank's shard
        gpt_torch.clip_grads(self.model)  # DTensor norms: the global norm over all shards
        self.optimizer.step()
        return loss.detach()

    def step(self, x: np.ndarray, y: np.ndarray) -> Any:
        xb, yb = self.local(x, self.device), self.local(y, self.device)
        self.last_batch = (xb, yb)
        return GlobalLoss(self.train_step(xb, yb), self.world)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def weights(self) -> Canonical:
        return torch_to_canonical(_FullState(self.model))

    def report(self) -> dict[str, Any]:
        params = [sr.torch_entry(n, p, self.world, "dtensor") for n, p in self.model.named_parameters()]
        opt = opt_entries(self.model, self.optimizer, self.world)
        named = dict(self.model.named_parameters())
        drawn = self.batch_entries()[:1]
        big = sr.largest(params)
        if big is not None:
            drawn.append(sr.torch_entry(big["name"], named[big["name"]], self.world, "dtensor", with_layout=True))
        rep = sr.build(kind="fsdp", mesh=torchrun.describe() + ", FSDP2 fully_shard per block", device_count=self.world,
                       batch=self.batch_entries(), params=params, opt_state=opt, drawn=drawn)
        return {"device_count": self.world, "state_bytes_per_device": rep["state_bytes_per_device"],
                "sharding": rep, "warnings": sr.warnings(rep)}


def build(spec: RunSpec, weights: Canonical) -> FSDPTrainer:
    return FSDPTrainer(spec, weights)
