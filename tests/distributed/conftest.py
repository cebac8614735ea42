"""The one-device references shared by the multi-device tests."""

from __future__ import annotations

from typing import Any

import pytest
from dist_helpers import run


@pytest.fixture(scope="session")
def one_device() -> dict[str, dict[str, Any]]:
    """The references: each framework's whole-step baseline on ONE device with the same global batch."""
    out = {"jax": run("jax", "jit", 1), "torch": run("torch", "eager", 1)}
    for fw, r in out.items():
        assert r["status"] == "ok", f"{fw} 1-device reference failed: {r['error']}"
    return out
