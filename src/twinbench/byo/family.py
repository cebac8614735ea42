"""The ``user`` family: a user's module behind the same bundle the twins give (see models/family.py's contract).

Torch side: ``torch_model`` (the user's module holding the run's initial weights, dropout off),
``torch_loss``, ``torch_optimizer`` / ``clip`` (the twins' AdamW and global-norm clipping), ``torch_blocks``.
JAX side: ``jax_optimizer`` (the twins' Optax chain). Shared: ``init_weights`` (the ``init.safetensors`` the
preparation process wrote), ``flops_per_token``, ``n_params``. The weights layout is the torch ``state_dict``
as NumPy arrays, unchanged (no transposes: a user's names say nothing about layouts).

Imports of torch and jax are local to their functions: a process only loads the framework it runs (the JAX
worker of ``torchax`` does load torch: torchax runs the torch module on JAX arrays).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from twinbench.byo import UserConfig, UserModel, load_torch

INIT = "init.safetensors"
META = "meta.json"
REF = "torch_ref.npz"
PARITY = "parity.json"
name, task = "user", "custom"
supports = frozenset({"bf16", "compile-regional", "remat", "multi-device"})
#: why the user family cannot take the other options of ``models/family.py``'s ``OPTIONS``
unsupported = {
    "jax-twin": "a user model has no NNX twin: its JAX side is its torch module under torchax (jax:torchax) "
                "or its own port (--jax-model, jax:port)",
    "scan-layers": "scan-layers stacks the layers of an NNX twin; a user model has none",
    "prefetch": "a user model brings its own batches (batch(i), made before timing): there is no input "
                "pipeline to prefetch",
}


class Prepared(msgspec.Struct, kw_only=True):
    """What ``<out>/byo/meta.json`` says about the user's model (written once, before any run: byo/prepare.py)."""

    n_params: int
    matmul_params: int
    flops_per_token: int
    tokens_per_batch: int
    dropout_off: int
    ref: str
    switched_off: list[str] = []  # each dropout set to 0 (randomness.switch_off)
    eager_losses: list[float] = []  # torch eager's trajectory: the parity reference
    flops_convention: str = ""
    x: tuple[list[int], str] | None = None  # batch 0's inputs: shape, dtype
    y: tuple[list[int], str] | None = None
    loss0: float | None = None  # the loss on batch 0 (the preparation process's)


def write_meta(user_dir: str | Path, meta: Prepared) -> None:
    (Path(user_dir) / META).write_bytes(msgspec.json.format(msgspec.json.encode(meta), indent=1))


def config(spec: Any) -> UserConfig:
    return UserConfig.from_spec(spec)


def read_meta(user_dir: str | Path) -> Prepared:
    return msgspec.json.decode((Path(user_dir) / META).read_bytes(), type=Prepared)


def init_weights(user_dir: str | Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(Path(user_dir) / INIT))


def dropout_off(module: Any) -> int:
    """Every dropout probability set to 0 in place (``nn.Dropout*`` modules keep their type, float attributes
    such as ``nn.MultiheadAttention.dropout`` become 0.0: :func:`twinbench.byo.randomness.switch_off`);
    return how many were non-zero. No weights change, so the ``state_dict`` is unchanged."""
    from twinbench.byo.randomness import switch_off

    return len(switch_off(module))


def state_numpy(module: Any) -> dict[str, np.ndarray]:
    """A copy of the module's ``state_dict`` as NumPy arrays (tied parameters under each of their names)."""
    return {k: np.array(v.detach().cpu().numpy(), copy=True) for k, v in module.state_dict().items()}


def load_state(module: Any, weights: dict[str, np.ndarray]) -> None:
    import torch

    missing = set(module.state_dict()) ^ set(weights)
    if missing:
        raise ValueError(f"user model: state_dict names differ from the initial weights: {sorted(missing)[:5]}")
    module.load_state_dict({k: torch.from_numpy(np.array(v, copy=True)) for k, v in weights.items()})


def build_module(spec: Any) -> UserModel:
    """``build(cfg)`` under the run's seed, dropout off, in train mode (its own initial weights)."""
    import torch

    torch.manual_seed(spec.train.seed)
    um = load_torch(spec.user.user_model, config(spec))
    dropout_off(um.module)
    um.module.train()
    return um


def torch_model(spec: Any, weights: dict[str, np.ndarray]) -> UserModel:
    """``build(cfg)`` again (:func:`build_module`), then ``weights`` (the run's initial ones)."""
    um = build_module(spec)
    load_state(um.module, weights)
    return um


def torch_blocks(um: UserModel) -> list[Any]:
    """What compile-regional compiles: ``um.blocks``, else the items of the largest ``nn.ModuleList``."""
    import torch

    if um.blocks is not None:
        return list(um.blocks)
    lists = [m for m in um.module.modules() if isinstance(m, torch.nn.ModuleList)]
    return list(max(lists, key=len)) if lists else []


def torch_optimizer(module: Any, lr: float, weight_decay: float) -> Any:
    """The twins' AdamW (betas 0.9/0.95, eps 1e-8; decay on parameters of rank >= 2)."""
    from twinbench.models.layers_torch import make_optimizer

    return make_optimizer(module, lr, weight_decay)


def jax_optimizer(lr: float, weight_decay: float, flat: bool = False) -> Any:
    """The twins' Optax chain: clip by global norm 1.0, then AdamW with the torch side's hyperparameters."""
    from twinbench.models.layers_jax import make_optimizer

    return make_optimizer(lr, weight_decay, flat=flat)


def matmul_params(module: Any) -> int:
    """Weights of ``nn.Linear`` modules, each parameter once (a tied weight is one weight)."""
    import torch

    seen: set[int] = set()
    n = 0
    for m in module.modules():
        if isinstance(m, torch.nn.Linear) and id(m.weight) not in seen:
            seen.add(id(m.weight))
            n += m.weight.numel()
    return n


def n_params(module: Any) -> int:
    return sum(p.numel() for p in module.parameters())  # parameters() yields a tied parameter once


def flops_per_token(um: UserModel) -> int:
    """``6 x`` the matmul weights + the model's own attention term (see ``twinbench.byo.FLOP_CONVENTION``)."""
    return 6 * matmul_params(um.module) + int(um.attention_flops_per_token)


class UserFamily:
    """The ``user`` family under the names of the family contract (``models/family.py``): what
    ``family.get(spec)`` returns for a ``--model`` spec, so the twins' trainers (torch eager, compile,
    compile-regional, DDP, FSDP, +bf16, +remat, +optc) build the user's module exactly as they build a twin.

    The user's module is built by ``build(cfg)`` once per process (cached: the loss, the blocks and the batches
    belong to that build). A user model has no NNX form: its JAX side is a ``loss_of(params, x, y)`` over a
    pytree (:mod:`twinbench.strategies.jax_user`: torchax or the user's port), so ``jax_model`` / ``jax_loss``
    raise. ``spec`` None gives the family's description only (its options, for the strategy matrix).
    """

    name, task, supports, unsupported = name, task, supports, unsupported
    native_options: frozenset[str] = frozenset()  # bf16 and remat are applied from outside (autocast, checkpoint)
    loss_is_forward = False  # the user's loss_fn may call parts of the module: FSDP's root wraps the loss
    causal, masked = False, False

    def __init__(self, spec: Any = None):
        self.spec = spec
        self._um: UserModel | None = None
        self._meta: Prepared | None = None
        self._weights: dict[str, np.ndarray] | None = None

    def reason(self, option: str) -> str | None:
        """None if a user model honours ``option``; else why not, in one line."""
        if option in self.supports:
            return None
        return self.unsupported.get(option, f"a user model does not support {option}")

    def user_model(self) -> UserModel:
        """The user's ``build(cfg)`` under the run's seed (module, loss, blocks, batches), dropout off, in train
        mode; a trainer then loads the run's initial weights into it (``torch_load``)."""
        if self._um is None:
            self._um = build_module(self.spec)
        return self._um

    def meta(self) -> Prepared:
        """What the preparation process wrote about the user's model (read once per process)."""
        if self._meta is None:
            self._meta = read_meta(self.spec.user.user_dir)
        return self._meta

    def torch_model(self, cfg: Any = None, options: Any = None) -> Any:
        """The user's module (``options``: bf16 and remat are applied by the trainer from outside)."""
        return self.user_model().module

    def torch_load(self, model: Any, weights: dict[str, np.ndarray]) -> None:
        load_state(model, weights)

    def torch_weights(self, model: Any) -> dict[str, np.ndarray]:
        """The module's ``state_dict`` as NumPy arrays (the user's names and layouts, unchanged)."""
        return state_numpy(model)

    def torch_loss(self, model: Any, x: Any, y: Any) -> Any:
        return self.user_model().loss_fn(model, x, y).float().reshape(())

    def torch_optimizer(self, model: Any, lr: float, weight_decay: float) -> Any:
        return torch_optimizer(model, lr, weight_decay)

    def torch_blocks(self, model: Any) -> list[Any]:
        blocks = torch_blocks(self.user_model())
        if not blocks:
            raise ValueError("the user model names no blocks (UserModel.blocks) and has no nn.ModuleList: "
                             "compile-regional, +remat and fsdp wrap blocks")
        return blocks

    def jax_model(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("a user model has no NNX form: its JAX side is torchax or the user's port "
                                  "(strategies/jax_user.py)")

    jax_loss = jax_model

    def jax_optimizer(self, lr: float, weight_decay: float, flat: bool = False) -> Any:
        return jax_optimizer(lr, weight_decay, flat=flat)

    def init_weights(self, cfg: Any = None, seed: int | None = None) -> dict[str, np.ndarray]:
        """The initial weights the preparation process saved (built under ``torch.manual_seed(seed)``), read
        once per process (the trainer and the doctor's extra steps start from them)."""
        if self._weights is None:
            self._weights = init_weights(self.spec.user.user_dir)
        return self._weights

    def flops_per_token(self, cfg: Any = None, seq: int | None = None) -> int:
        return self.meta().flops_per_token

    def n_params(self, weights: Any = None) -> int:
        return self.meta().n_params
