"""Compile time against step time: total wall time of a planned run, and where two runs cross."""

from __future__ import annotations

import math
from typing import Any


def total_s(record: dict[str, Any], steps: int) -> float | None:
    """Wall time of ``steps`` training steps: the first (with its compile) plus steady-state steps."""
    if record.get("status") != "ok" or record.get("first_step_s") is None or record.get("step_ms") is None:
        return None
    return record["first_step_s"] + (steps - 1) * record["step_ms"] / 1e3


def break_even_steps(a: dict[str, Any], b: dict[str, Any]) -> float | None:
    """Steps after which ``a`` (slower start, faster steps) has the lower total time than ``b``.

    ``0`` when ``a`` is never behind (it starts and steps at least as fast), ``inf`` when it never catches
    up (its steps are no faster), ``None`` when either run failed.
    """
    if any(r.get("status") != "ok" or r.get("first_step_s") is None or r.get("step_ms") is None for r in (a, b)):
        return None
    da = a["first_step_s"] - b["first_step_s"]  # extra start-up cost of a
    ds = (b["step_ms"] - a["step_ms"]) / 1e3  # per-step saving of a
    if da <= 0 and ds >= 0:
        return 0.0
    if ds <= 0:
        return math.inf
    return 1 + da / ds


def crossing_sentence(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """One line saying which of two ok runs wins at what number of steps."""
    la, lb = f"{a['framework']}/{a['strategy']}", f"{b['framework']}/{b['strategy']}"
    n_ab, n_ba = break_even_steps(a, b), break_even_steps(b, a)
    if n_ab is None or n_ba is None:
        return None
    if n_ab == 0:
        return f"{la} is ahead of {lb} from the first step"
    if n_ba == 0:
        return f"{lb} is ahead of {la} from the first step"
    if math.isfinite(n_ab):
        return f"{la} overtakes {lb} after {math.ceil(n_ab)} steps (it compiles longer but steps faster)"
    if math.isfinite(n_ba):
        return f"{lb} overtakes {la} after {math.ceil(n_ba)} steps (it compiles longer but steps faster)"
    return None
