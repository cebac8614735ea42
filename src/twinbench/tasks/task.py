"""What a task is (:class:`Task`): the one object every module asks about a run's task, instead of comparing its
name. A leaf: it imports nothing of twinbench (``config`` reads the registered names for ``--task``'s choices),
and reaches its data functions by ``"module:function"`` names imported when first called.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def _call(target: str, *args: Any) -> Any:
    module, func = target.split(":")
    return getattr(importlib.import_module(module), func)(*args)


@dataclass(frozen=True)
class Task:
    """A training task: its data, the shape of its logits and loss, and its rules for strategies and limits."""

    name: str  # the --task value, and a family's ``Family.task``
    summary: str
    #: "module:function" (spec, k, n_calls) -> data.tasks.RunData: the run's batches, k steps per call
    data: str
    #: "module:function" (spec) -> None: a --data file read and checked before any run (SpecError, one line)
    check_data: str
    #: the model predicts the next token at every position: a row of the vocabulary per token (logits and their
    #: gradient held by a step; ``score``'s perplexity needs it); else a few logits per sequence
    next_token: bool = False
    #: batches of text of varying length, padded by a length policy (+pad-max, +bucket, +dynamic), with held-out
    #: accuracy: the length policies apply, and the report shows padding and accuracy columns
    variable_length: bool = False
    #: bytes a run keeps per example of every step until it ends (the drawn example indices), for --steps' limit
    bytes_per_example: int = 0
    #: a one-line refusal of a spec's shape for this task (spec, family) -> str | None (spec.validate)
    check: Callable[[Any, Any], str | None] | None = None

    def run_data(self, spec: Any, k: int, n_calls: int) -> Any:
        """The batches of ``spec``'s run (``data/tasks.py``'s :class:`RunData`)."""
        return _call(self.data, spec, k, n_calls)

    def read_data(self, spec: Any) -> None:
        """Check ``spec``'s --data file as this task reads it (SpecError, one line)."""
        _call(self.check_data, spec)

    def refusal(self, spec: Any, family: Any) -> str | None:
        """Why ``spec`` cannot run this task with ``family`` (None: it can)."""
        return self.check(spec, family) if self.check else None
