"""What a strategy builds: a :class:`Trainer` the measurement loop can drive without knowing the model."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from twinbench.models.weights import Canonical


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
