"""Helpers of the multi-device tests: runs of the tiny preset (global batch 8) through the real runner."""

from __future__ import annotations

import socket
from typing import Any

from twinbench import runner
from twinbench.spec import from_preset, validate
from twinbench.strategies import registry

#: Few steps, tiny model: the whole multi-device suite fits its ~3 minute budget on a quiet 2-core machine.
TINY = {"batch": 8, "steps": 5, "warmup": 1}


def run(framework: str, strategy: str, devices: int, **over: Any) -> dict[str, Any]:
    """One run in its own process(es), exactly as ``twinbench compare`` starts it; returns the record."""
    spec = validate(from_preset("tiny", {**TINY, "devices": devices, **over}, framework=framework,
                                strategy=strategy))
    registry.check_devices(spec)
    return runner.run_one(spec, timeout=300).flat()  # the flat view: the tests read fields by name


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
