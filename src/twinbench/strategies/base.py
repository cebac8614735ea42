"""What a strategy builds: a :class:`Trainer` the measurement loop can drive without knowing the model.

Every trainer has ``step``, ``sync`` and ``weights``. The optional members are declared by
:class:`OptionalMembers` (the worker reads them with ``getattr``/``hasattr``): ``steps_per_call`` (K steps per
call on K stacked batches, scan-steps), ``predict`` (classification accuracy) and ``report`` (multi-device
record fields).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from twinbench.models.weights import Canonical


@runtime_checkable
class Trainer(Protocol):
    """One training setup (model, optimizer, compiled step) ready to run."""

    def step(self, x: np.ndarray, y: np.ndarray) -> Any:
        """Dispatch one optimizer step on a host batch; return the loss as a device scalar (no sync)."""
        ...

    def sync(self) -> None:
        """Block until every dispatched step has finished on the device."""
        ...

    def weights(self) -> Canonical:
        """Current parameters in the canonical layout (for parity tests and export)."""
        ...


class OptionalMembers(Protocol):
    """What a trainer MAY have besides the :class:`Trainer` members (each read with a default by the worker)."""

    #: training steps one ``step`` call runs, on K batches stacked on a leading axis (default 1)
    steps_per_call: int

    def predict(self, x: Any) -> np.ndarray:
        """Predicted classes of a host batch (classification), without touching the training state."""
        ...

    def report(self) -> dict[str, Any]:
        """Record fields of a multi-device run: device_count, state_bytes_per_device, sharding, warnings."""
        ...


#: the optional members and the value the worker assumes when a trainer lacks one
OPTIONAL_DEFAULTS: dict[str, Any] = {"steps_per_call": 1, "predict": None, "report": None}
