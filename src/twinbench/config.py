"""The leaf of the package: the model and training configuration dataclasses, and the user-error type.

Imported by the models, the Hugging Face format adapter and ``spec.py`` alike; it imports nothing of
twinbench, so no import cycle can run through it (``spec`` -> ``models.hf`` -> ``config``).
"""

from __future__ import annotations

from dataclasses import dataclass

#: The family of a ModelConfig that names none (and of records written before families had names).
DEFAULT_FAMILY = "gpt"
#: The family of ``--model FILE.py:build`` (twinbench/byo); the models ask for it here, never through ``spec``.
USER_FAMILY = "user"


class SpecError(ValueError):
    """An impossible or unknown value given by the user. The message is one line, fit to print."""


@dataclass(frozen=True)
class ModelConfig:
    """Transformer shape. ``d_ff`` of 0 means 4 * d_model (GPT-2)."""

    family: str = DEFAULT_FAMILY
    layers: int = 4
    d_model: int = 256
    heads: int = 4
    d_ff: int = 0
    vocab: int = 256
    context: int = 128
    num_labels: int = 2  # classifier classes (bert)
    mask_impl: str = "where"  # bert padding mask: "where" (select) | "mul" (0/1 -> additive bias) | "cond"

    @property
    def ff(self) -> int:
        return self.d_ff or 4 * self.d_model


@dataclass(frozen=True)
class TrainConfig:
    """What is trained and how long. ``warmup`` steps run but are excluded from step-time statistics."""

    batch: int = 8
    seq: int = 128
    steps: int = 30
    warmup: int = 5
    lr: float = 1e-3
    weight_decay: float = 0.1
    seed: int = 0
    precision: str = "fp32"
    data: str = ""  # path of a UTF-8 text file; "" means the embedded synthetic corpus
    init_from: str = ""  # local Hugging Face GPT-2/BERT checkpoint directory to start from; "" = fresh init
    task: str = "lm"  # "lm" (next-token, gpt) | "classify" (sequence classification, bert)
    slow_input: float = 0.0  # ms of simulated extra host work per batch in the input pipeline


def flag(name: str) -> str:
    """The CLI flag of a field: ``d_model`` -> ``--d-model``."""
    return "--" + name.replace("_", "-")
