"""A strategy name's modifiers, parsed once into a typed value: ``compile+bf16+remat`` -> ``Modifiers(bf16=True,
remat=True)``. Code asks ``spec.mods.remat``; it never looks a name up in ``spec.modifiers`` as a string. The registry
(``strategies/registry.py``) says which modifiers exist and which bases they fit. A leaf module: it imports nothing
of twinbench, so ``spec.py`` can use it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

#: How classify batches are padded (at most one per name): the modifiers that are a length policy.
LENGTH_POLICIES = ("pad-max", "bucket", "dynamic")


@dataclass(frozen=True)
class Modifiers:
    """Each modifier a name can carry, as a flag (``length``: the padding policy named, or None)."""

    bf16: bool = False
    remat: bool = False
    nodonate: bool = False
    optc: bool = False
    symbolic: bool = False
    prefetch: bool = False
    replicate_batch: bool = False
    nosync: bool = False
    fused_loss: bool = False
    fused_qkv: bool = False
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
