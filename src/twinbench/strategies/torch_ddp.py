"""PyTorch DistributedDataParallel, one process per device under ``torchrun`` (gloo on CPU, NCCL on CUDA).

Each rank takes its rows of the same global batch (``batch / world``), DDP all-reduces (averages) the
gradients during ``backward``, and every replica applies the same clipped AdamW update, so the model stays
identical on all ranks and the loss equals the one-device loss on the global batch. The loss returned per
step is the mean over ranks, reduced asynchronously and read only after the timed loop.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from twinbench.backends import torch as torch_backend
from twinbench.distributed import sharding_report as sr
from twinbench.distributed import torchrun
from twinbench.distributed.sharding_report import batch_leaves
from twinbench.models.weights import Canonical
from twinbench.spec import RunSpec
from twinbench.strategies.torch_eager import TorchTrainer


class GlobalLoss:
    """The mean loss over ranks: an async all-reduce started at the step, waited for by ``float``."""

    def __init__(self, loss: torch.Tensor, world: int):
        self.loss, self.world = loss, world
        self.work = dist.all_reduce(loss, op=dist.ReduceOp.SUM, async_op=True) if world > 1 else None

    def __float__(self) -> float:
        if self.work is not None:
            self.work.wait()
        return float(self.loss) / self.world


class RankTrainer(TorchTrainer):
    """A torchrun rank: rank ``r`` of ``world`` trains on rows ``[r * b, (r + 1) * b)`` of the global batch,
    ``b = batch / world``; the loss it returns is the mean over ranks."""

    def init_process(self) -> None:
        torch_backend.join_process_group()
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.rows = self.spec.train.batch // self.world
        self.last_batch: tuple[Any, Any] | None = None

    def place(self, a: Any) -> Any:
        if isinstance(a, (tuple, list)):
            return tuple(self.place(t) for t in a)
        mine = np.ascontiguousarray(np.asarray(a)[self.rank * self.rows: (self.rank + 1) * self.rows])
        return torch.from_numpy(mine).to(self.device, non_blocking=True)

    def step(self, x: np.ndarray, y: np.ndarray) -> Any:
        xb, yb = self.place(x), self.place(y)
        self.last_batch = (xb, yb)
        return GlobalLoss(self.step_fn(xb, yb), self.world)

    def batch_entries(self) -> list[sr.Entry]:
        leaves = batch_leaves(*self.last_batch) if self.last_batch else []
        return [sr.torch_entry(n, t, self.world, "batch", with_layout=(n in ("x", "x.0")), batch_rows=self.rows)
                for n, t in leaves]


def apply_ddp(trainer: TorchTrainer) -> TorchTrainer:
    """Wrap the model in DistributedDataParallel (broadcasts rank 0's weights; backward averages the
    gradients over ranks); the loss then calls the wrapper."""
    ids = [torch.cuda.current_device()] if trainer.device.type == "cuda" else None
    trainer.module = DistributedDataParallel(trainer.module, device_ids=ids)
    return trainer


class DDPTrainer(RankTrainer):
    def parallelize(self) -> None:
        apply_ddp(self)

    def replicas_max_abs_diff(self) -> float:
        """Largest |difference| between this rank's parameters and every other rank's (0.0: identical)."""
        flat = torch.nn.utils.parameters_to_vector(self.model.parameters()).detach()
        copies = [torch.empty_like(flat) for _ in range(self.world)]
        dist.all_gather(copies, flat)
        return max(float((c - copies[0]).abs().max()) for c in copies)

    def report(self) -> sr.Report:
        params = [sr.torch_entry(n, p, self.world, "replicated", spec="replicated (DDP)")
                  for n, p in self.model.named_parameters()]
        opt = opt_entries(self.model, self.optimizer, self.world)
        drawn = [e for e in self.batch_entries()[:1]]
        rep = sr.build(kind="ddp", mesh=torchrun.describe(), device_count=self.world, batch=self.batch_entries(),
                       params=params, opt_state=opt, drawn=drawn, replicas_max_abs_diff=self.replicas_max_abs_diff())
        return sr.Report(device_count=self.world, state_bytes_per_device=rep.state_bytes_per_device, sharding=rep,
                      warnings=sr.warnings(rep))


def opt_entries(model: torch.nn.Module, optimizer: torch.optim.Optimizer, world: int) -> list[sr.Entry]:
    """Report entries of AdamW's state (``exp_avg``, ``exp_avg_sq``, ``step``) per parameter: DTensors
    (FSDP) with their placements, plain tensors (DDP; FSDP's step counters) replicated on every rank."""
    out = []
    for name, p in model.named_parameters():
        for key, t in optimizer.state.get(p, {}).items():
            if isinstance(t, torch.Tensor):
                is_dtensor = type(t).__name__ == "DTensor"
                out.append(sr.torch_entry(f"opt.{name}.{key}", t, world, "dtensor" if is_dtensor else "replicated",
                                          spec="replicated" if is_dtensor or t.ndim == 0 else "replicated (DDP)"))
    return out


def build(spec: RunSpec, weights: Canonical) -> DDPTrainer:
    return DDPTrainer(spec, weights)
