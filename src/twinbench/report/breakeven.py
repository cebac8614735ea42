"""Compile time against step time: total wall time of a planned run, and where two runs cross."""

from __future__ import annotations

import math

from twinbench.record import Record


def total_s(record: Record, steps: int) -> float | None:
    """Wall time of ``steps`` training steps: the first (with its compile) plus steady-state steps."""
    t = record.timing
    if not record.usable() or t.first_step_s is None or t.step_ms is None:
        return None
    return t.first_step_s + (steps - 1) * t.step_ms / 1e3


def break_even_steps(a: Record, b: Record) -> float | None:
    """Steps after which ``a`` (slower start, faster steps) has the lower total time than ``b``.

    ``0`` when ``a`` is never behind (it starts and steps at least as fast), ``inf`` when it never catches
    up (its steps are no faster), ``None`` when either run failed.
    """
    ta, tb = a.timing, b.timing
    if not (a.usable() and b.usable()) or None in (ta.first_step_s, tb.first_step_s, ta.step_ms, tb.step_ms):
        return None
    da = ta.first_step_s - tb.first_step_s  # type: ignore[operator]  # extra start-up cost of a
    ds = (tb.step_ms - ta.step_ms) / 1e3  # type: ignore[operator]  # per-step saving of a
    if da <= 0 and ds >= 0:
        return 0.0
    if ds <= 0:
        return math.inf
    return 1 + da / ds


def crossing_sentence(a: Record, b: Record) -> str | None:
    """One line saying which of two ok runs wins at what number of steps."""
    la, lb = a.label(), b.label()
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
