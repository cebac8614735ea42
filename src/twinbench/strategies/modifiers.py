"""Every strategy modifier, declared once: its name, the frameworks and bases it applies to, what it does, whether
the model family must support it, and whether it is data-side. A name's modifiers are parsed once into a typed
value: ``compile+bf16+remat`` -> ``Modifiers(bf16=True, remat=True)``; code asks ``spec.strategy.mods.remat``,
never a name in a string. The registry (``strategies/registry.py``) reads :data:`DECLARED` to check a strategy
name; ``spec.validate`` reads it for the length policies. A leaf module: it imports nothing of twinbench, so
``spec.py`` can use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

BOTH = ("torch", "jax")


@dataclass(frozen=True)
class Modifier:
    """What one modifier is: the frameworks (and bases: None for every base) it applies to, a one-line summary,
    whether the family must support it (``Family.supports``), and whether it is data-side (padding, input pipeline:
    it leaves the step as the base builds it)."""

    name: str
    frameworks: tuple[str, ...]
    summary: str
    bases: tuple[str, ...] | None = None
    family_option: bool = False
    data: bool = False
    length: bool = False  # a padding policy of classify batches: at most one per name


def _mod(frameworks: tuple[str, ...], summary: str, **what: Any) -> Any:
    """A flag of :class:`Modifiers` declared with its :class:`Modifier` facts (the name is the field's, dashed)."""
    return field(default=False, metadata={"modifier": (frameworks, summary, what)})


@dataclass(frozen=True)
class Modifiers:
    """Each modifier a name can carry, as a flag (``length``: the padding policy named, or None). The fields are
    the declaration: their metadata says where each applies (read into :data:`DECLARED`)."""

    bf16: bool = _mod(BOTH, "bf16 compute (torch.autocast / bf16 Linear+attention), fp32 master weights and "
                      "optimizer state; same as --precision bf16", family_option=True)
    remat: bool = _mod(BOTH, "activation checkpointing per block (torch.utils.checkpoint, use_reentrant=False / "
                       "nnx.remat with --remat-policy: full, dots-saveable, nothing-saveable)", family_option=True)
    nodonate: bool = _mod(("jax",), "do not donate params and optimizer state to the step (shows what donation "
                          "buys)", bases=("jit", "scan-steps", "scan-layers", "torchax", "port"))
    fused_qkv: bool = _mod(("jax",), "the JAX twin's q, k, v as one full-width product laid out for the attention by "
                           "one transpose of the three (a layout choice; ModelOptions.fused_qkv)", bases=("jit",),
                           family_option=True)
    optc: bool = _mod(("torch",), "also torch.compile the optimizer half of the step (grad clipping + AdamW)",
                      bases=("compile", "compile-regional"))
    symbolic: bool = _mod(("torch",), "torch.compile(dynamic=True): symbolic shapes from the first call (use with "
                          "+dynamic)", bases=("compile",), data=True)
    prefetch: bool = _mod(BOTH, "input pipeline with background workers (DataLoader / Grain) and device prefetch "
                          "(pinned non_blocking copies / grain.experimental.device_put)", family_option=True,
                          data=True)
    replicate_batch: bool = _mod(("jax",), "anti-pattern (claim C10): the batch replicated on every device instead "
                                 "of split; flagged in the record's warnings", bases=("mesh-dp",))
    nosync: bool = _mod(("jax",), "anti-pattern (claim C13): no lax.pmean of the gradients, each device trains its "
                        "own model; flagged in the record's warnings", bases=("pmap",))
    fused_loss: bool = _mod(("jax",), "torchax: F.cross_entropy lowered as the JAX twins' loss (log-sum-exp and the "
                            "target's logit, fused reductions in fp32) instead of torchax's own log_softmax + "
                            "nll_loss (an fp32 copy of the logits)", bases=("torchax",))
    length: str | None = None

    @classmethod
    def parse(cls, names: tuple[str, ...] | list[str]) -> Modifiers:
        """The flags of ``names`` (``("bf16", "replicate-batch")``); names this value does not know, and a
        second length policy, are left to the registry and ``spec.validate`` to refuse with their reasons."""
        flags = {f.name for f in fields(cls)} - {"length"}
        known = {n.replace("-", "_") for n in names} & flags
        length = next((n for n in names if n in LENGTH_POLICIES), None)
        return cls(**{n: True for n in known}, length=length)

    @property
    def lengths(self) -> tuple[str, ...]:
        return (self.length,) if self.length else ()


#: How classify batches are padded (at most one per name): the modifiers that are a length policy.
_LENGTHS = (
    Modifier("pad-max", BOTH, "classify: pad every batch to --seq (the default): one shape, one compiled program",
             data=True, length=True),
    Modifier("bucket", BOTH, "classify: pad each batch to the smallest bucket (seq/8, seq/4, seq/2, seq) that fits: "
             "one program per bucket (torch.compile: dynamic=False)", data=True, length=True),
    Modifier("dynamic", BOTH, "classify: pad each batch only to its longest example: JAX compiles per new length; "
             "torch.compile default (dynamic=None: marks dynamic on recompile)", data=True, length=True),
)
LENGTH_POLICIES = tuple(m.name for m in _LENGTHS)


def _declared() -> dict[str, Modifier]:
    """The flags' modifiers, the length policies after the last one of the step's (``optc``)."""
    flags = []
    for f in fields(Modifiers):
        if "modifier" in f.metadata:
            frameworks, summary, what = f.metadata["modifier"]
            flags.append(Modifier(f.name.replace("_", "-"), frameworks, summary, **what))
    cut = [m.name for m in flags].index("optc") + 1
    return {m.name: m for m in (*flags[:cut], *_LENGTHS, *flags[cut:])}


#: Every modifier by its name in a strategy name (``fused-qkv``), in the order ``twinbench strategies`` lists them.
DECLARED: dict[str, Modifier] = _declared()
#: Modifiers that are data-side (padding policy, input pipeline): they do not touch the step.
DATA_MODIFIERS = tuple(n for n, m in DECLARED.items() if m.data)
