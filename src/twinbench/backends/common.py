"""What every backend hands back in the same shape (a leaf: the backends import it, it imports no backend)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RecordFields:
    """The record fields a run's framework decides: the record's ``conditions.xla_flags`` and
    ``run.attention_impl``."""

    xla_flags: str | None  # the XLA_FLAGS the run's compiles saw (None: a framework that reads none)
    attention_impl: str  # the --attention-impl the twins ran (models/options.py ATTENTION_IMPLS)
