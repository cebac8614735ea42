"""What a strategy builds: a :class:`Trainer` the measurement loop can drive without knowing the model.

Every trainer has ``step``, ``sync`` and ``weights``. The optional members are declared by
:class:`OptionalMembers` (the worker reads them with the defaults of ``OPTIONAL_DEFAULTS``):
``steps_per_call`` (K steps per call on K stacked batches, scan-steps), ``predict`` (classification accuracy)
and ``report`` (multi-device record fields).

What a command needs beyond that is a protocol here too, checked with ``isinstance`` by the command that
needs it (never probed attribute by attribute): :class:`JaxStepTrainer` (one jitted step over a parameter
pytree: the JAX memory breakdown and preflight), :class:`TorchModuleTrainer` (an ``nn.Module`` and its
optimizer: the torch memory breakdown), :class:`Explainable` (the step's forward/backward parts: ``explain``'s
phases by timing) and :class:`HloExplainable` (the compiled step's HLO: ``explain``'s op attribution). A
trainer that lacks one is refused by that command with :func:`lacks`' one-line reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Trainer(Protocol):
    """One training setup (model, optimizer, compiled step) ready to run."""

    def step(self, x: np.ndarray, y: np.ndarray) -> Any:
        """Dispatch one optimizer step on a host batch; return the loss as a device scalar (no sync)."""
        ...

    def sync(self) -> None:
        """Block until every dispatched step has finished on the device."""
        ...

    def weights(self) -> dict[str, np.ndarray]:
        """Current parameters in the canonical layout (``models.weights.Canonical``: for parity tests and
        export)."""
        ...


class OptionalMembers(Protocol):
    """What a trainer MAY have besides the :class:`Trainer` members (each read with a default by the worker)."""

    #: training steps one ``step`` call runs, on K batches stacked on a leading axis (default 1)
    steps_per_call: int

    def predict(self, x: Any) -> np.ndarray:
        """Predicted classes of a host batch (classification), without touching the training state."""
        ...

    def report(self) -> Any:
        """Record fields of a multi-device run (distributed/sharding_report.py ``Report``: device_count,
        state_bytes_per_device, sharding, warnings); typed there, as strategies/base.py imports no record."""
        ...


#: the optional members and the value the worker assumes when a trainer lacks one
OPTIONAL_DEFAULTS: dict[str, int | None] = {"steps_per_call": 1, "predict": None, "report": None}


def optional(trainer: Any, name: str) -> Any:
    """The optional member ``name`` of ``trainer``, or the value the worker assumes without it."""
    return getattr(trainer, name, OPTIONAL_DEFAULTS[name])


@runtime_checkable
class JaxStepTrainer(Protocol):
    """One jitted step ``train_step(params, opt_state, x, y) -> (params, opt_state, loss)`` over a parameter
    pytree, and the loss it differentiates (``make_loss()``: with the strategy's shardings applied)."""

    params: Any
    opt_state: Any
    train_step: Any

    def make_loss(self) -> Any: ...


@runtime_checkable
class TorchModuleTrainer(Protocol):
    """An ``nn.Module`` (``model``, the unwrapped one), its optimizer and the step's loss half."""

    model: Any
    optimizer: Any

    def forward_loss(self, x: Any, y: Any) -> Any: ...


@dataclass(frozen=True)
class StepParts:
    """A step's parts, for ``explain``'s phases by timing (explain/timing.py): each on a placed batch."""

    place: Callable[[Any, Any], tuple[Any, Any]]  # a host batch (x, y) on the device
    forward: Callable[[Any, Any], Any]  # the loss alone
    forward_backward: Callable[[Any, Any], Any]  # the loss and its gradients
    wait: Callable[[Any], Any]  # until what one of them returned is computed


@runtime_checkable
class Explainable(Protocol):
    """The step's parts, each synced, for ``explain``'s phases by timing: ``place``, ``forward``,
    ``forward_backward``, ``wait``."""

    def explain_parts(self) -> StepParts: ...


@runtime_checkable
class HloExplainable(Protocol):
    """The compiled step's HLO text (JAX), whose op metadata ``explain`` joins to the trace."""

    def explain_hlo(self, x: Any, y: Any) -> str: ...


def lacks(trainer: Any, protocol: type, command: str) -> str | None:
    """None if ``trainer`` provides ``protocol``; else the one-line reason ``command`` refuses it."""
    if isinstance(trainer, protocol):
        return None
    what = " ".join((protocol.__doc__ or "").split()).split(". ")[0].rstrip(".")
    return f"{command}: the {type(trainer).__name__} trainer does not provide {protocol.__name__} ({what})"
