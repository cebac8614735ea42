"""The leaf of the package: the model and training sections of a run spec, how a section's field is declared
(:func:`option`), and the user-error type.

Imported by the models, the Hugging Face format adapter and ``spec.py`` alike; it imports nothing of
twinbench but the tasks' names (``tasks/``, a leaf too), so no import cycle can run through it (``spec`` ->
``models.hf`` -> ``config``).
"""

from __future__ import annotations

from dataclasses import Field, dataclass, field
from enum import StrEnum
from typing import Any

from twinbench.tasks import TASKS as _TASKS

#: The family of a ModelConfig that names none (and of records written before families had names).
DEFAULT_FAMILY = "gpt"
#: The family of ``--model FILE.py:build`` (twinbench/byo); the models ask for it here, never through ``spec``.
USER_FAMILY = "user"


#: the largest learning rate taken: fp32's largest number (the optimizers keep it in fp32; past it, inf)
MAX_LR = 3.4028234663852886e38


class SpecError(ValueError):
    """An impossible or unknown value given by the user. The message is one line, fit to print."""


class Framework(StrEnum):
    """The frameworks a run trains in, a closed set: each has its backend (backends/, the only modules that know
    which one runs); a strategy, a modifier or a backend naming any other fails at import."""

    TORCH = "torch"
    JAX = "jax"


FRAMEWORKS: tuple[str, ...] = tuple(f.value for f in Framework)

#: the values of the string fields of ModelConfig and TrainConfig (spec.validate checks every declared choice)
PRECISIONS = ("fp32", "bf16")
TASKS = tuple(_TASKS)  # the registered tasks (tasks/): lm | classify | custom (the user's model)
MASK_IMPLS = ("where", "mul", "cond")  # how a masked family's attention applies its padding mask
REMAT_POLICIES = ("full", "dots-saveable", "nothing-saveable")  # what +remat keeps (jax.checkpoint_policies)


class Identity(StrEnum):
    """What a spec field says of a run: declared once on the field (:func:`option`'s ``identity``), read by the
    run id (``RunSpec.run_id``), the records' labels (``record_sections.NOT_LABELS``) and ``twinbench diff``'s
    matching (``diff.MATCH_FIELDS``)."""

    #: what ran (the model, its training, the strategy and its options, the devices): in the run id and the
    #: labels, and diff matches runs on it (runs differing here are never repeats of one configuration)
    CONFIG = "config"
    #: how the host ran it (threads, XLA flags, allocator, compile cache state, which host): in the run id and
    #: the labels; diff matches across it and lists a difference as a condition (what a diff is usually about)
    CONDITION = "condition"
    #: which repeat of its configuration the run is: in the run id and the labels; the repeats share a config id
    #: and diff pools them
    REPEAT = "repeat"
    #: where things are kept and what runs after the measured steps (a trace, saved weights): none of the three
    NONE = "none"


@dataclass(frozen=True)
class Declared:
    """What :func:`option` declares of a field beside its default (kept in the field's metadata)."""

    doc: str  # its description: the --help of its flag
    flag: bool  # whether a CLI flag named after it sets it
    choices: tuple[str, ...]  # the values allowed (empty: any value of its type)
    identity: Identity  # what it says of a run
    later: bool  # left out of the run id at its default


#: the key of a field's :class:`Declared` in its dataclass metadata
DECLARED = "twinbench"


def option(default: Any, doc: str, *, flag: bool = True, choices: tuple[str, ...] = (),
           identity: Identity = Identity.CONFIG, later: bool = False) -> Any:
    """A field of a spec section, declared once: its default, its description (the ``--help`` of its flag), and
    whether a CLI flag named after it sets it (``--d-model`` for ``d_model``; the commands add one per such field).
    Fields set by the commands' own options (``--cache``, ``--trace``, ``--model``...) or by twinbench itself
    are declared with ``flag=False``. ``choices``: the values allowed (``spec.validate`` refuses any other, naming
    the flag). ``identity``: what the field says of a run (:class:`Identity`). ``later``: the field came after run
    ids were first made, so at its default it is left out of the run id and the runs made before it keep their
    ids (a new identifying field is declared ``later=True``; tests/test_spec_ids.py pins the ids)."""
    return field(default=default, metadata={DECLARED: Declared(doc, flag, tuple(choices), Identity(identity), later)})


def is_declared(f: Field[Any]) -> bool:
    """Whether ``f`` was declared by :func:`option` (a section's parsed values, e.g. a strategy's ``mods``, are not)."""
    return DECLARED in f.metadata


def declared(f: Field[Any]) -> Declared:
    """What :func:`option` declared of ``f`` (KeyError for a field it did not declare)."""
    return f.metadata[DECLARED]


def identity(f: Field[Any]) -> Identity:
    """What a field declared by :func:`option` says of a run."""
    return declared(f).identity


def later(f: Field[Any]) -> bool:
    """Whether a field declared by :func:`option` is left out of the run id at its default (``later``)."""
    return declared(f).later


def doc(f: Field[Any]) -> str:
    """The description of a field declared by :func:`option`."""
    return declared(f).doc


def choices(f: Field[Any]) -> tuple[str, ...]:
    """The values a field declared by :func:`option` allows (empty: any value of its type)."""
    return declared(f).choices


def is_flag(f: Field[Any]) -> bool:
    """Whether a CLI flag sets the field (:func:`option`'s ``flag``)."""
    return declared(f).flag


@dataclass(frozen=True)
class ModelConfig:
    """Transformer shape. ``d_ff`` of 0 means 4 * d_model (GPT-2)."""

    family: str = option(DEFAULT_FAMILY, "the model family (models/): its twins, task and presets; 'user' for "
                         "--model FILE.py:build", flag=False)
    layers: int = option(4, "override the preset's layers (Transformer blocks)")
    d_model: int = option(256, "override the preset's d_model (the width of the residual stream)")
    heads: int = option(4, "override the preset's heads (attention heads; they divide d_model)")
    d_ff: int = option(0, "override the preset's d_ff (the MLP's hidden width; 0: 4 * d_model)")
    vocab: int = option(256, "override the preset's vocab (the embedding's rows)")
    context: int = option(128, "override the preset's context (the longest sequence the model takes)")
    num_labels: int = option(2, "override the preset's num_labels (the classifier's classes: BERT)")
    mask_impl: str = option("where", "override the preset's mask_impl: how BERT applies its padding mask, 'where' "
                            "(a select), 'mul' (0/1 -> an additive bias) or 'cond'", choices=MASK_IMPLS)

    @property
    def ff(self) -> int:
        return self.d_ff or 4 * self.d_model


@dataclass(frozen=True)
class TrainConfig:
    """What is trained and how long. ``warmup`` steps run but are excluded from step-time statistics."""

    batch: int = option(8, "override the preset's batch (sequences per step, over all devices)")
    seq: int = option(128, "override the preset's seq (tokens per sequence; at most context)")
    steps: int = option(30, "override the preset's steps (training steps, warmup included)")
    warmup: int = option(5, "override the preset's warmup (first steps run but left out of the step-time "
                         "statistics)")
    lr: float = option(1e-3, "override the preset's lr (AdamW's learning rate)")
    weight_decay: float = option(0.1, "override the preset's weight_decay (AdamW's)")
    seed: int = option(0, "override the preset's seed (initial weights and data order)")
    precision: str = option("fp32", "override the preset's precision: fp32, or bf16 (the same as the +bf16 "
                            "modifier)", choices=PRECISIONS)
    data: str = option("", "override the preset's data: a UTF-8 text file (classify: JSON lines); default the "
                       "embedded synthetic corpus")
    init_from: str = option("", "start from a local Hugging Face GPT-2/BERT checkpoint directory (config.json + "
                            "model.safetensors); its shape replaces the preset's")
    task: str = option("lm", "override the preset's task: 'lm' (next-token: GPT, Llama), 'classify' (sequence "
                       "classification: BERT) or 'custom' (the user's model)", choices=TASKS)
    slow_input: float = option(0.0, "override the preset's slow_input: ms of simulated extra host work per batch "
                               "in the input pipeline")


def flag(name: str) -> str:
    """The CLI flag of a field: ``d_model`` -> ``--d-model``."""
    return "--" + name.replace("_", "-")
