"""Bring your own model: a user's PyTorch module (and their own JAX port) measured like the twins.

``twinbench compare --model path/to/file.py:build`` imports ``file.py`` and calls ``build(cfg)`` with a
:class:`UserConfig` (the preset's shape and training fields, every one overridable by its flag: ``--layers``,
``--d-model``, ``--batch``, ``--seq``, ``--seed``, ...). ``build`` returns a :class:`UserModel`:

- ``module``: a ``torch.nn.Module``, trained in ``train()`` mode;
- ``loss_fn(module, x, y) -> Tensor``: the scalar training loss of one batch;
- ``batch(i) -> (x, y)``: batch ``i`` of the run as NumPy arrays, a pure function of ``i`` (seed it from
  ``cfg.seed``): both frameworks train on exactly these batches;
- optional: ``blocks`` (the modules ``compile-regional`` compiles one by one; default: the items of the
  module's largest ``nn.ModuleList``), ``attention_flops_per_token`` (added to ``6 x`` the matmul
  parameters, see :data:`FLOP_CONVENTION`), ``tokens_per_batch`` (default ``x.shape[0] * x.shape[1]``).

A plain tuple ``(module, loss_fn, batch)`` is accepted too. The example: ``examples/byo/llama.py``.

The same module runs under PyTorch (``eager``, ``compile``, ``compile-regional``, ``+bf16``) and under JAX
through torchax (strategy ``torchax``: ``torchax.extract_jax`` gives a parameter pytree and a pure function;
one ``jax.jit`` step of ``jax.value_and_grad`` and the Optax AdamW of the twins, parameters and optimizer
state donated). Both start from the same initial weights: ``build(cfg)`` is called once under
``torch.manual_seed(cfg.seed)`` in a preparation process, whose ``state_dict`` is saved as
``<out>/byo/init.safetensors`` and loaded by every run.

**Randomness is switched off or refused** (:mod:`twinbench.byo.randomness`): every dropout probability is
set to 0 in place (``nn.Dropout*`` modules keep their type; float attributes such as
``nn.MultiheadAttention.dropout`` or ``attention_dropout`` become 0.0; the record's warning names each), then a
probe forward under a ``TorchFunctionMode`` refuses, in one line naming the module and the op, any random
draw left (``torch.rand`` in ``forward``, ``F.dropout`` with a rate twinbench cannot find, ...). Training is
deterministic, so both frameworks compute the same function: each record's ``parity`` compares its losses
with the torch eager trajectory. The rules: ``docs/own-model.md``.

``--jax-model file.py:build_jax``: the user's own JAX port. ``build_jax(cfg)`` returns a
:class:`JaxUserModel`: ``loss_fn(params, x, y)`` (a pure function of a parameter pytree) and ``to_jax``, the
parameter-name mapping from the torch ``state_dict`` (NumPy arrays, torch layout) to that pytree: a function,
or a dict ``torch name -> "dotted.path"`` (or ``("dotted.path", "T")`` to transpose). ``to_jax`` must only
re-arrange arrays (select, rename, transpose, reshape): the gradient check maps the torch gradients through
it too. Before measuring, twinbench checks the port against the torch module (loss and gradients on batch 0,
then 10 AdamW steps), prints the result, and measures the port as strategy ``port`` beside the others with
the doctor's JAX findings in its record.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

__all__ = ["FLOP_CONVENTION", "JaxUserModel", "UserConfig", "UserModel", "UserModelError"]

#: How the FLOPs of a user model are counted (the record's ``flops_convention``).
FLOP_CONVENTION = ("FLOPs/token = 6 x (weights of nn.Linear modules) + the model's attention_flops_per_token "
                   "(embeddings, norms and biases not counted; remat not counted)")


class UserModelError(ValueError):
    """The user's --model / --jax-model file cannot be used. The message is one line, fit to print."""


@dataclass(frozen=True)
class UserConfig:
    """What ``build(cfg)`` and ``build_jax(cfg)`` receive: the run's shape, from the preset and its flags."""

    layers: int
    d_model: int
    heads: int
    d_ff: int  # 0: the model's own default (e.g. 4 * d_model)
    vocab: int
    context: int
    batch: int
    seq: int
    seed: int

    @classmethod
    def from_spec(cls, spec: Any) -> UserConfig:
        m, t = spec.model, spec.train
        return cls(layers=m.layers, d_model=m.d_model, heads=m.heads, d_ff=m.d_ff, vocab=m.vocab,
                   context=m.context, batch=t.batch, seq=t.seq, seed=t.seed)


@dataclass
class UserModel:
    """What ``build(cfg)`` returns (see the module docstring)."""

    module: Any  # torch.nn.Module
    loss_fn: Callable[[Any, Any, Any], Any]  # (module, x, y) -> scalar Tensor
    batch: Callable[[int], tuple[Any, Any]]  # i -> (x, y), NumPy arrays, deterministic in i
    blocks: Sequence[Any] | None = None  # compile-regional units; None: the largest nn.ModuleList's items
    attention_flops_per_token: int = 0  # e.g. 12 * layers * d_model * seq for causal self-attention
    tokens_per_batch: int = 0  # 0: x.shape[0] * x.shape[1]


@dataclass
class JaxUserModel:
    """What ``build_jax(cfg)`` returns (see the module docstring)."""

    loss_fn: Callable[[Any, Any, Any], Any]  # (params, x, y) -> scalar, pure
    #: torch state_dict (NumPy) -> params pytree: a function, or torch name -> "dotted.path" | ("dotted.path", "T")
    to_jax: Callable[[dict[str, np.ndarray]], Any] | dict[str, str | tuple[str, str]]


def needs_port(base: str) -> bool:
    """Whether the base strategy runs the user's own JAX port (``port``, ``port-mesh-*``)."""
    return base == "port" or base.startswith("port-")


def split_ref(ref: str, default: str, flag: str) -> tuple[Path, str]:
    """``"path/file.py:build"`` -> (path, "build"); a missing ``:name`` means ``default``."""
    path, sep, name = ref.rpartition(":")
    if not sep or "/" in name or name.endswith(".py"):  # no ":name" (a Windows drive letter is not one)
        path, name = ref, default
    p = Path(path).expanduser()
    if not p.is_file():
        raise UserModelError(f"{flag} {ref}: no such file {path!r}" if not p.exists()
                             else f"{flag} {ref}: {path!r} is not a file")
    if not name.isidentifier():
        raise UserModelError(f"{flag} {ref}: {name!r} is not a function name (expected FILE.py:FUNCTION)")
    return p.resolve(), name


def load_function(ref: str, default: str, flag: str) -> Callable[..., Any]:
    """Import the file of ``ref`` as a module of its own and return its function."""
    path, name = split_ref(ref, default, flag)
    mod_name = f"twinbench_user_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise UserModelError(f"{flag} {ref}: cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module  # dataclasses and pickling look their module up here
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))  # the file may import its neighbours (installed packages first)
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise UserModelError(f"{flag} {ref}: importing {path.name} raised {_one_line(e)}") from None
    fn = getattr(module, name, None)
    if fn is None:
        raise UserModelError(f"{flag} {ref}: {path.name} defines no {name!r}")
    if not callable(fn):
        raise UserModelError(f"{flag} {ref}: {name!r} is not a function ({type(fn).__name__})")
    return fn


def _one_line(e: BaseException) -> str:
    from twinbench.errors import error_line

    return error_line(e)


def _call_build(ref: str, default: str, flag: str, cfg: UserConfig, cls: type, tuple_of: str) -> tuple[Any, str]:
    """Call the user's builder ``ref`` (``FILE.py:NAME``, NAME defaulting to ``default``) on ``cfg``; a tuple of
    the right length becomes ``cls``. Returns (what it built, the builder's name for messages)."""
    build = load_function(ref, default, flag)
    name = ref.rpartition(":")[2] if ":" in ref else default
    try:
        out = build(cfg)
    except Exception as e:
        raise UserModelError(f"{flag} {ref}: {name}(cfg) raised {_one_line(e)}") from None
    if isinstance(out, tuple) and len(out) == len(tuple_of.split(",")):
        out = cls(*out)
    if not isinstance(out, cls):
        raise UserModelError(f"{flag} {ref}: {name}(cfg) returned {type(out).__name__}; expected a "
                             f"twinbench.byo.{cls.__name__} or a tuple ({tuple_of})")
    return out, name


def load_torch(ref: str, cfg: UserConfig) -> UserModel:
    """Call the user's ``build(cfg)`` and check what it returned; :class:`UserModelError` says what is wrong."""
    import torch

    out, name = _call_build(ref, "build", "--model", cfg, UserModel, "module, loss_fn, batch")
    if not isinstance(out.module, torch.nn.Module):
        raise UserModelError(f"--model {ref}: the module {name}(cfg) returned is a {type(out.module).__name__}, "
                             "not a torch.nn.Module")
    for field_name in ("loss_fn", "batch"):
        if not callable(getattr(out, field_name)):
            raise UserModelError(f"--model {ref}: {field_name} of {name}(cfg) is not callable")
    if not any(True for _ in out.module.parameters()):
        raise UserModelError(f"--model {ref}: the module {name}(cfg) returned has no parameters to train")
    return out


def load_jax(ref: str, cfg: UserConfig) -> JaxUserModel:
    """Call the user's ``build_jax(cfg)`` and check what it returned."""
    out, name = _call_build(ref, "build_jax", "--jax-model", cfg, JaxUserModel, "loss_fn, to_jax")
    if not callable(out.loss_fn):
        raise UserModelError(f"--jax-model {ref}: loss_fn of {name}(cfg) is not callable")
    if not (callable(out.to_jax) or isinstance(out.to_jax, dict)):
        raise UserModelError(f"--jax-model {ref}: to_jax of {name}(cfg) must be a function or a dict "
                             "(torch name -> 'dotted.path')")
    return out


def map_to_jax(to_jax: Callable[[dict[str, np.ndarray]], Any] | dict[str, str | tuple[str, str]],
               state: dict[str, np.ndarray]) -> Any:
    """Apply the user's ``to_jax`` (a function, or a dict ``torch name -> path | (path, "T")``) to ``state``."""
    if callable(to_jax):
        return to_jax(state)
    out: dict[str, object] = {}  # the user's pytree: nested by the dotted paths they chose
    for torch_name, target in to_jax.items():
        path, how = (target, "") if isinstance(target, str) else target
        a = state[torch_name]
        a = a.T if how == "T" else a
        node = out
        *head, leaf = path.split(".")
        for key in head:
            node = node.setdefault(key, {})
        node[leaf] = a
    return out
