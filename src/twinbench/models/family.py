"""One bundle per model family: everything a strategy, the worker and the report need to know about a model.

A :class:`Family` holds the twin modules (torch and JAX), the canonical initialisation and parameter count,
the task and loss, the optimizer, the blocks that compile-regional / FSDP / remat wrap, the FLOPs per token
(matmul parameters only, attention on the real padded length) and which options it supports (every other
option gets a one-line reason). Strategies build ANY family the same way through it, so adding a family
touches this file only (and its twin modules).

The framework members are lazy: calling ``torch_model`` imports torch, ``jax_model`` imports JAX; building
or listing families imports neither, so a process only ever loads the framework it runs.

The user-model family (``--model``, ``name == "user"``) lives in ``twinbench/byo/family.py``: it carries the
same names for what a user's module can do (torch model, loss, optimizer, blocks, FLOPs, ``supports``); its
weights come from the preparation process, not from ``init_weights(cfg, seed)``, so the worker builds user
runs through ``byo/run.py`` and :func:`get` is for the built-in families.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from twinbench.models.weights import Canonical, init_bert, init_gpt

#: The options and strategies a family may support; the ones it does not get a reason in ``unsupported``.
OPTIONS = ("bf16", "remat", "scan-layers", "compile-regional", "multi-device")


def _lazy(target: str) -> Callable[..., Any]:
    """``"module:attr"`` -> a function that imports the module on its first call and forwards to ``attr``."""
    module_name, attr = target.split(":")

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module_name), attr)(*args, **kwargs)

    call.__name__ = call.__qualname__ = attr
    call.__doc__ = f"{target} (imported on first use)"
    return call


def _all_params(weights: Canonical) -> int:
    return int(sum(w.size for w in weights.values()))


@dataclass(frozen=True)
class Family:
    """A model family: twin modules, init, task, loss, optimizer, FLOPs and supported options."""

    name: str  # "gpt" | "bert" | "user"
    task: str  # "lm" | "classify" | "custom"
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

    def reason(self, option: str) -> str | None:
        """None if the family honours ``option``; else why not, in one line."""
        if option in self.supports:
            return None
        return self.unsupported.get(option, f"the {self.name} family does not support {option}")


# ------------------------------------------------------------------------------------------------- FLOPs
GPT_FLOPS = "FLOPs/token = 6N + 12*L*d*T (N without position embeddings; remat not counted)"
BERT_FLOPS = ("FLOPs/token = 6*(matmul weights of the encoder) + 12*L*d*T (T the padded length) + pooler and "
              "classifier once per sequence; embedding lookups and remat not counted")


def gpt_flops_per_token(cfg: Any, seq: int) -> int:
    """``6 N + 12 L d T``: N every parameter but the position embeddings (the tied LM head is the one real
    matmul of ``wte``, counted once); Kaplan et al. 2020 / PaLM appendix B, what nanoGPT prints."""
    d, ff, L = cfg.d_model, cfg.ff, cfg.layers
    per_layer = 4 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * ff + ff) + (ff * d + d)  # 2 LN, attn, mlp
    n = cfg.vocab * d + L * per_layer + 2 * d  # wte (tied head), blocks, ln_f
    return 6 * n + 12 * L * d * seq


def bert_flops_per_token(cfg: Any, seq: int) -> int:
    """Matmul parameters only: per token ``6 * L * (4 d^2 + 2 d ff)`` (Q, K, V, output, MLP) plus the attention
    scores and values ``12 L d T`` on the padded length T; the pooler and classifier run once per sequence,
    so their ``6 (d^2 + d * labels)`` is shared by its T tokens. The word, position and segment embeddings are
    lookups, not matmuls: not counted (counting them, as 6N does, overstates MFU by 11-25%)."""
    d, ff, L = cfg.d_model, cfg.ff, cfg.layers
    per_token = 6 * L * (4 * d * d + 2 * d * ff) + 12 * L * d * seq
    per_sequence = 6 * (d * d + d * cfg.num_labels)
    return per_token + per_sequence // seq


# ------------------------------------------------------------------------------------------------ families
def _gpt_jax_model(cfg: Any, options: Any, rngs: Any) -> Any:
    return _lazy("twinbench.models.gpt_jax:GPT")(cfg, rngs, options)


def _bert_jax_model(cfg: Any, options: Any, rngs: Any) -> Any:
    return _lazy("twinbench.models.bert_jax:BERT")(cfg, rngs, options)


_TWIN_OPTIONS = frozenset({"bf16", "remat", "scan-layers"})  # ModelOptions both twins read themselves
_SCAN_TORCH = "scan-layers is JAX only (nnx.scan); PyTorch's nearest is compile-regional"

GPT = Family(
    name="gpt", task="lm", supports=frozenset(OPTIONS),
    torch_model=_lazy("twinbench.models.gpt_torch:GPT"), torch_loss=_lazy("twinbench.models.gpt_torch:loss_fn"),
    torch_optimizer=_lazy("twinbench.models.gpt_torch:make_optimizer"), torch_blocks=lambda m: list(m.blocks),
    jax_model=_gpt_jax_model, jax_loss=_lazy("twinbench.models.gpt_jax:loss_fn"),
    jax_optimizer=_lazy("twinbench.models.gpt_jax:make_optimizer"),
    init_weights=init_gpt, flops_per_token=gpt_flops_per_token, flops_convention=GPT_FLOPS,
    native_options=_TWIN_OPTIONS, unsupported={}, hf_model_type="gpt2",
)
BERT = Family(
    name="bert", task="classify", supports=frozenset(OPTIONS),
    torch_model=_lazy("twinbench.models.bert_torch:BERT"), torch_loss=_lazy("twinbench.models.bert_torch:loss_fn"),
    torch_optimizer=_lazy("twinbench.models.bert_torch:make_optimizer"),
    torch_blocks=lambda m: list(m.encoder.layer),
    jax_model=_bert_jax_model, jax_loss=_lazy("twinbench.models.bert_jax:loss_fn"),
    jax_optimizer=_lazy("twinbench.models.bert_jax:make_optimizer"),
    init_weights=init_bert, flops_per_token=bert_flops_per_token, flops_convention=BERT_FLOPS,
    native_options=_TWIN_OPTIONS, unsupported={}, hf_model_type="bert",
)
FAMILIES: dict[str, Family] = {"gpt": GPT, "bert": BERT}


def by_name(name: str) -> Family:
    """The built-in family ``name`` (``gpt`` or ``bert``)."""
    return FAMILIES[name]


def flops_convention(name: str) -> str:
    """The FLOPs line of the table for records of the family ``name`` (the user's family: its own words)."""
    return FAMILIES[name].flops_convention if name in FAMILIES else f"FLOPs/token as the {name} family counts them"


def get(spec: Any) -> Family:
    """The family bundle of ``spec`` (a built-in family; user models go through ``byo/``)."""
    name = spec.model.family
    if name not in FAMILIES:
        raise ValueError(f"no built-in model family {name!r}; allowed: {', '.join(FAMILIES)} (user models: byo/)")
    return FAMILIES[name]

