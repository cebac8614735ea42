"""One bundle per model family: everything a strategy, the worker and the report need to know about a model.

A :class:`Family` holds the twin modules (torch and JAX), the canonical initialisation and parameter count,
the task and loss, the optimizer, the blocks that compile-regional / FSDP / remat wrap, the FLOPs per token
(matmul parameters only, attention on the real padded length) and which options it supports (every other
option gets a one-line reason). Strategies build ANY family the same way through it, so adding a family
is one folder and one registration line.

Each family is one folder (``models/gpt/``, ``models/bert/``, ...): its twin modules and, in its
``__init__.py``, the one :class:`Family` that owns everything the rest of the package asks of it (presets,
task, vocabulary minimum, causal or masked attention, the block list, weights in and out, the Hugging Face
mapping, the default strategies). ``models/__init__.py`` registers each with one line; nothing outside
``models/`` names a family.

The framework members are lazy: calling ``torch_model`` imports torch, ``jax_model`` imports JAX; building
or listing families imports neither, so a process only ever loads the framework it runs.

The user-model family (``--model``) lives in ``twinbench/byo/family.py``: the same names for what a user's module
can do (torch model, loss, optimizer, blocks, weights in and out, FLOPs, ``supports``), so :func:`get` of a
``--model`` spec returns it and every strategy builds it through the same trainers as the twins. Its weights
come from the preparation process, not from ``init_weights(cfg, seed)``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from twinbench.config import USER_FAMILY, ModelConfig, TrainConfig

if TYPE_CHECKING:  # weights.py imports numpy: loaded when weights are first converted, not to list families
    from twinbench.models.weights import Canonical

#: The options and strategies a family may support; the ones it does not get a reason in ``unsupported``.
#: ``jax-twin``: the family has an NNX twin (what every JAX base open to all families builds); ``prefetch``: its
#: batches go through the input pipeline.
OPTIONS = ("bf16", "remat", "scan-layers", "compile-regional", "multi-device", "jax-twin", "prefetch", "fused-qkv")


def lazy(target: str) -> Callable[..., Any]:
    """``"module:attr"`` -> a function that imports the module on its first call and forwards to ``attr``."""
    module_name, attr = target.split(":")

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module_name), attr)(*args, **kwargs)

    call.__name__ = call.__qualname__ = attr
    call.__doc__ = f"{target} (imported on first use)"
    return call


def _canonical_to_torch(model: Any, weights: Canonical) -> None:
    """weights.py's ``canonical_to_torch``, imported when first called."""
    from twinbench.models.weights import canonical_to_torch

    canonical_to_torch(model, weights)


def _torch_to_canonical(model: Any) -> Canonical:
    """weights.py's ``torch_to_canonical``, imported when first called."""
    from twinbench.models.weights import torch_to_canonical

    return torch_to_canonical(model)


def _all_params(weights: Canonical) -> int:
    return int(sum(w.size for w in weights.values()))


@dataclass(frozen=True)
class Family:
    """A model family: twin modules, init, task, loss, optimizer, FLOPs and supported options."""

    name: str  # the --family / ModelConfig.family value
    task: str  # a registered task's name (tasks/: lm, classify, custom); register() refuses any other
    supports: frozenset[str]
    # torch side
    torch_model: Callable[..., Any]  # (cfg, options: ModelOptions) -> nn.Module
    torch_loss: Callable[..., Any]  # (model, x, y) -> scalar Tensor
    torch_optimizer: Callable[..., Any]  # (model, lr, weight_decay) -> Optimizer
    torch_blocks: Callable[[Any], list[Any]]  # model -> the repeated blocks (compile-regional, FSDP, remat)
    # JAX side
    jax_model: Callable[..., Any]  # (cfg, options, rngs) -> nnx.Module
    jax_loss: Callable[..., Any]  # (model, x, y) -> scalar
    jax_optimizer: Callable[..., Any]  # (lr, weight_decay) -> optax.GradientTransformation
    # shared
    init_weights: Callable[[Any, int], Canonical]  # (cfg, seed) -> canonical weights
    flops_per_token: Callable[[Any, int], int]  # (cfg, padded seq) -> training FLOPs per token
    n_params: Callable[[Canonical], int] = _all_params
    flops_convention: str = ""  # one line under the table saying how flops_per_token counts
    #: options the model applies itself from ModelOptions (the twins); the others are applied from outside
    native_options: frozenset[str] = frozenset()
    #: option -> one-line reason it cannot be honoured (for the options not in ``supports``)
    unsupported: dict[str, str] = field(default_factory=dict)
    hf_model_type: str = ""  # Hugging Face ``model_type`` of the format adapter (models/hf.py); "" = none
    #: preset name -> (model shape, training); the model's ``family`` is this family's name
    presets: dict[str, tuple[ModelConfig, TrainConfig]] = field(default_factory=dict)
    min_vocab: int = 256  # token ids the training data needs (256 bytes, plus the task's special tokens)
    causal: bool = True  # attention sees only earlier tokens (chunked attention applies)
    masked: bool = False  # attention takes a key padding mask (--mask-impl applies)
    #: canonical names of linear weights (stored ``[in, out]``, kept ``[out, in]`` by the twins): suffixes
    linear_suffixes: tuple[str, ...] = ()
    layer_list: tuple[str, ...] = ("blocks",)  # where the repeated layers live: ``blocks.{i}`` (scan-layers stacks them)
    hf: Any = None  # the Hugging Face format adapter (models/hf.py's HFFormat), None: no import/export
    #: cells a default (or ``all``) compare adds for this family besides the default bases
    default_cells: tuple[tuple[str, str], ...] = ()

    #: torch weights in and out of the canonical layout (the twins transpose linear weights; see weights.py)
    torch_load: Callable[[Any, Canonical], None] = _canonical_to_torch
    torch_weights: Callable[[Any], Canonical] = _torch_to_canonical
    #: the loss calls the module's own ``forward`` (FSDP's root is then the module itself; else a wrapper
    #: whose forward is the loss, so whatever the loss reaches is gathered)
    loss_is_forward: bool = True

    def reason(self, option: str) -> str | None:
        """None if the family honours ``option``; else why not, in one line."""
        if option in self.supports:
            return None
        return self.unsupported.get(option, f"the {self.name} family does not support {option}")


TWIN_OPTIONS = frozenset({"bf16", "remat", "scan-layers", "fused-qkv"})  # ModelOptions both twins read themselves

#: The built-in families by name, in registration order (``models/__init__.py`` registers them).
FAMILIES: dict[str, Family] = {}


def register(module: str) -> Family:
    """Register the family of the package ``module`` (its ``FAMILY``); one line per family in ``models/__init__.py``."""
    from twinbench.tasks import TASKS

    fam = importlib.import_module(module).FAMILY
    if fam.name in FAMILIES and FAMILIES[fam.name] is not fam:
        raise ValueError(f"model family {fam.name!r} registered twice")
    if fam.task not in TASKS:  # a misspelled task fails at import, not in a run
        raise ValueError(f"model family {fam.name!r}: no task {fam.task!r}; registered: {', '.join(TASKS)}")
    for preset, (m, _) in fam.presets.items():
        if m.family != fam.name:
            raise ValueError(f"preset {preset!r} of the {fam.name} family builds the {m.family} family")
    from twinbench.models.weights import add_layout

    add_layout(fam.linear_suffixes, fam.layer_list)  # the converters transpose its linear weights, stack its layers
    FAMILIES[fam.name] = fam
    return fam


def jax_model_of(target: str) -> Callable[..., Any]:
    """``Family.jax_model`` (cfg, options, rngs) of a JAX twin whose class takes (cfg, rngs, options)."""
    cls = lazy(target)

    def build(cfg: Any, options: Any, rngs: Any) -> Any:
        return cls(cfg, rngs, options)

    return build


def presets() -> dict[str, tuple[ModelConfig, TrainConfig]]:
    """Every built-in family's presets, in registration order."""
    return {name: p for fam in FAMILIES.values() for name, p in fam.presets.items()}


def by_name(name: str) -> Family:
    """The built-in family ``name``."""
    return FAMILIES[name]


def flops_convention(name: str) -> str:
    """The FLOPs line of the table for records of the family ``name`` (the user's family: its own words)."""
    return FAMILIES[name].flops_convention if name in FAMILIES else f"FLOPs/token as the {name} family counts them"


def n_params_of(cfg: ModelConfig) -> int | None:
    """The parameter count a run of ``cfg`` records (its family's ``n_params`` of its canonical weights), from the
    canonical layout's shapes alone (``HFFormat.shapes``): nothing is built. None for a model whose weights only
    its run knows (the user's ``--model``, a family without a canonical layout) or a shape that is no model."""
    fam = FAMILIES.get(cfg.family)
    if fam is None or fam.hf is None:
        return None
    import numpy as np

    try:
        shapes = fam.hf.shapes(cfg)
        stand_ins = {name: np.broadcast_to(np.float32(0), shape) for name, shape in shapes.items()}  # no memory
        return int(fam.n_params(stand_ins))
    except (ArithmeticError, ValueError, TypeError):  # sizes no array can have (refused elsewhere, one line)
        return None


_USER_FAMILIES: dict[Any, Any] = {}


def get(spec: Any) -> Family:
    """The family bundle of ``spec``: a built-in family, or the user's (``--model``: ``byo/family.py``'s
    ``UserFamily``, one per spec and process, so the trainer and the worker share one ``build(cfg)``)."""
    name = spec.model.family
    if name == USER_FAMILY:
        if spec not in _USER_FAMILIES:
            from twinbench.byo.family import UserFamily

            _USER_FAMILIES[spec] = UserFamily(spec)
        return _USER_FAMILIES[spec]
    if name not in FAMILIES:
        raise ValueError(f"no model family {name!r}; allowed: {', '.join(FAMILIES)}, or --model FILE.py:build")
    return FAMILIES[name]

