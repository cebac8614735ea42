"""PyTorch strategies over a user's module (``--model``): ``eager``, ``compile``, ``compile-regional``, ``+bf16``,
``+remat``.

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


def remat_blocks(blocks: list[Any]) -> None:
    """``+remat``: each block's ``forward`` wrapped in ``torch.utils.checkpoint`` (non-reentrant), as the
    twins' strategies do for a module that does not checkpoint itself. Dropout is off, so the recomputed
    forward is the same function."""
    from torch.utils.checkpoint import checkpoint

    for block in blocks:
        forward = block.forward

        def remat_forward(*args: Any, _forward: Any = forward, **kwargs: Any) -> Any:
            return checkpoint(_forward, *args, use_reentrant=False, **kwargs)

        remat_forward.remat = True  # type: ignore[attr-defined]
        block.forward = remat_forward


class UserTorchTrainer:
    def __init__(self, spec: RunSpec, weights: dict[str, np.ndarray], compile_mode: str = "none"):
        self.device = torch_device()
        self.um = fam.torch_model(spec, weights)
        self.model = self.um.module
        self.model.to(self.device).train()
        self.bf16 = compute_dtype(spec) == "bf16"
        self.optimizer = fam.torch_optimizer(self.model, spec.train.lr, spec.train.weight_decay)
        if "remat" in spec.modifiers:
            remat_blocks(fam.torch_blocks(self.um))
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
            return self.um.loss_fn(getattr(self, "module", self.model), x, y).float().reshape(())

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


class UserRankTrainer(UserTorchTrainer):
    """A torchrun rank over the user's module: rank ``r`` of ``world`` trains on its rows of the global batch
    (``batch / world``); the loss it returns is the mean over ranks (the one-device loss of a mean loss)."""

    def __init__(self, spec: RunSpec, weights: dict[str, np.ndarray], compile_mode: str = "none"):
        import torch.distributed as dist

        from twinbench.distributed import torchrun

        torchrun.initialize_torch()
        self.spec = spec
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.rows = spec.train.batch // self.world
        self.last_batch: tuple[Any, Any] | None = None
        super().__init__(spec, weights, compile_mode)

    def step(self, x: Any, y: Any) -> Any:
        from twinbench.strategies.torch_ddp import GlobalLoss, RankTrainer

        xb, yb = RankTrainer.place(self, x), RankTrainer.place(self, y)  # type: ignore[arg-type]
        self.last_batch = (xb, yb)
        return GlobalLoss(self.train_step(xb, yb), self.world)

    def batch_entries(self) -> list[Any]:
        from twinbench.strategies.torch_ddp import RankTrainer

        return RankTrainer.batch_entries(self)  # type: ignore[arg-type]


class UserDDPTrainer(UserRankTrainer):
    """``ddp`` over the user's module: one torchrun rank per device, each on its rows of the global batch,
    the module wrapped in ``DistributedDataParallel`` (the loss calls the wrapper), the loss returned the mean
    over ranks; the report is the twins' DDP report."""

    def __init__(self, spec: RunSpec, weights: dict[str, np.ndarray], compile_mode: str = "none"):
        from torch.nn.parallel import DistributedDataParallel

        super().__init__(spec, weights, compile_mode)
        ids = [torch.cuda.current_device()] if self.device.type == "cuda" else None
        self.module = DistributedDataParallel(self.model, device_ids=ids)

    def report(self) -> dict[str, Any]:
        from twinbench.strategies.torch_ddp import DDPTrainer

        return DDPTrainer.report(self)  # type: ignore[arg-type]

    def replicas_max_abs_diff(self) -> float:
        from twinbench.strategies.torch_ddp import DDPTrainer

        return DDPTrainer.replicas_max_abs_diff(self)  # type: ignore[arg-type]


class UserFSDPTrainer(UserRankTrainer):
    """``fsdp`` over the user's module: FSDP2 ``fully_shard`` on each block ``UserModel.blocks`` names (default:
    the items of the largest ``nn.ModuleList``), as the twins' fsdp does, then on a root that holds the rest.

    The root is a small wrapper whose ``forward(x, y)`` is the user's ``loss_fn(module, x, y)``, so whatever
    the loss calls (the module, or its parts) runs inside the root's forward: the parameters outside the blocks
    are gathered whichever way the loss reaches them. Every parameter and AdamW's state are DTensors sharded
    on dimension 0; gradients are reduce-scattered (averaged over ranks); the optimizer is built after the
    sharding, on the DTensors; the report is the twins' FSDP report."""

    def __init__(self, spec: RunSpec, weights: dict[str, np.ndarray], compile_mode: str = "none"):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        super().__init__(spec, weights, compile_mode)
        blocks = fam.torch_blocks(self.um)
        if not blocks:
            raise ValueError("fsdp: the user model names no blocks (UserModel.blocks) and has no nn.ModuleList")
        mesh = init_device_mesh(self.device.type, (self.world,), mesh_dim_names=("data",))
        for block in blocks:
            fully_shard(block, mesh=mesh)
        self.root = fam.with_loss(self.model, self.um.loss_fn)
        fully_shard(self.root, mesh=mesh)
        self.optimizer = fam.torch_optimizer(self.model, spec.train.lr, spec.train.weight_decay)

    def forward_loss(self, x: Any, y: Any) -> torch.Tensor:
        with torch.autocast(self.device.type, torch.bfloat16, enabled=self.bf16):
            return self.root(x, y)

    def weights(self) -> dict[str, np.ndarray]:
        """The full (gathered) ``state_dict`` of the user's module, as NumPy arrays."""
        full = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v) for k, v in self.model.state_dict().items()}
        return {k: np.array(v.detach().cpu().numpy(), copy=True) for k, v in full.items()}

    def report(self) -> dict[str, Any]:
        from twinbench.strategies.torch_fsdp import FSDPTrainer

        return FSDPTrainer.report(self)  # type: ignore[arg-type]


def build_ddp(spec: RunSpec, weights: dict[str, np.ndarray]) -> UserDDPTrainer:
    return UserDDPTrainer(spec, weights)


def build_fsdp(spec: RunSpec, weights: dict[str, np.ndarray]) -> UserFSDPTrainer:
    return UserFSDPTrainer(spec, weights)
