"""The compilation row: time a step spent compiling (XLA's backend compile and its tracing and lowering, a
``torch.compile`` frame's Dynamo and Inductor passes: :func:`taxonomy.compile_event`), never idle.

Each side's trace counts the compiles that started inside its attributed steps (:func:`breakdown.compile_time`);
where ``twinbench doctor --trace`` recorded the run, its log beside the trace (``compiles`` in its
``trace.json``: :func:`doctor_timing.compile_log`) says how many compiled over the whole run, how many steps ran,
why the step was traced again (JAX's ``jax_explain_cache_misses``: the argument and its shapes before and
after; Dynamo's recompiles) and the finding that says the fix. :func:`facts` is what a joined answer reads;
:func:`said` is the summary's words for the row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import msgspec

from twinbench.explain.doctor_timing import Conditions
from twinbench.explain.taxonomy import COMPILATION

ROW = f"rest / {COMPILATION}"
_SHAPE = re.compile(r"at ([^,]+), now (\w+\[[\d,]*\])\S* and before (\w+\[[\d,]*\])")


@dataclass(frozen=True)
class Facts:
    """One explained side's compilation (:func:`facts`): what the trace counted, and the doctor's log beside it
    where there is one (None: no log, or the log left it out)."""

    ms: float  # a step, traced
    traced_compiles: int  # compiles that started in the attributed steps
    traced_steps: int
    compiles: int | None = None  # over the run (the doctor's)
    steps: int | None = None  # the run's steps (the doctor's)
    compile_s: float | None = None
    retraces: int | None = None
    finding: str = ""  # the doctor's finding id ("jax-recompile")
    cause: str = ""  # the most common cause of a retrace ("shape")
    argument: str = ""  # the argument of the first shape change the log printed
    shapes: list[str] = field(default_factory=list)  # its shape now, before
    axes: list[int] = field(default_factory=list)  # the dimensions that changed


class _Side(msgspec.Struct, kw_only=True, frozen=True):
    """The part of an explained side :func:`facts` reads (the trace's counts, the doctor's conditions)."""

    run: str = ""
    cells: dict[str, dict[str, float]] = msgspec.field(default_factory=dict)
    recorded: Conditions | None = None
    compiles: int | None = None
    steps_used: int | None = None


def facts(e: Any) -> Facts | None:
    """One explained side's compilation (:class:`Facts`); None when it compiled nothing."""
    return _facts(msgspec.convert(e, _Side, from_attributes=True))


def _facts(side: _Side) -> Facts | None:
    ms = side.cells["rest"].get(COMPILATION, 0.0) if "rest" in side.cells else 0.0
    log = side.recorded.compiles if side.recorded is not None else None
    if not ms and log is None:
        return None
    traced = {"ms": ms, "traced_compiles": side.compiles or 0, "traced_steps": side.steps_used or 0}
    if log is None:
        return Facts(**traced)
    causes = log.causes or {}
    first = next((m for m in map(_SHAPE.search, log.shapes or []) if m), None)
    return Facts(**traced, compiles=log.compiles, steps=log.steps, compile_s=log.compile_s, retraces=log.retraces,
                 finding=log.finding, cause=max(causes, key=lambda c: causes[c]) if causes else "",
                 argument=first.group(1).strip() if first else "",
                 shapes=[first.group(2), first.group(3)] if first else [],
                 axes=_axes(first.group(2), first.group(3)) if first else [])


def _axes(now: str, before: str) -> list[int]:
    """The dimensions two shapes (``i32[32,55]``, ``i32[32,39]``) differ in; [] when their ranks differ."""
    a = [d for d in now[now.index("[") + 1:-1].split(",") if d]
    b = [d for d in before[before.index("[") + 1:-1].split(",") if d]
    return [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y] if len(a) == len(b) else []


def _named_axis(shape: str, dims: list[int]) -> str:
    """What a changing dimension is where the shape says it: axis 0 of any input is the batch; axis 1 of a
    two-dimensional integer input (token ids, ``i32[32,55]``) is the sequence length."""
    if dims == [0]:
        return ", the batch"
    if dims == [1] and re.match(r"^[iu]\d+\[\d+,\d+\]$", shape):
        return ", the sequence length"
    return ""


class _Row(msgspec.Struct, kw_only=True, frozen=True):
    """The part of a gap row :func:`said` reads."""

    diff_ms: float
    uncertainty_ms: float | None = None


def said(row: Any, a: Any, b: Any, pm: str = "") -> str:
    """The summary's words for the compilation row: ``compilation +10.3 s a step: 24 compiles in 60 steps,
    caused by the shape of ids (i32[32,55] against i32[32,39]: its dimension 1) (see the doctor's
    jax-recompile)`` for the side it is larger on; ``pm``: its uncertainty as printed (`` ±0.4``), in the
    row's unit."""
    r = msgspec.convert(row, _Row, from_attributes=True)
    d, u = r.diff_ms, r.uncertainty_ms
    side = msgspec.convert(b if d >= 0 else a, _Side, from_attributes=True)
    f = _facts(side)
    size = (f"{abs(d) / 1e3:.1f}" + (f" ±{u / 1e3:.1f}" if u is not None else "") + " s" if abs(d) >= 1000
            else f"{abs(d):.1f}{pm} ms")
    text = f"{COMPILATION} +{size} a step on {side.run}"
    if f is None:
        return text
    if f.compiles is not None and f.steps:
        text += f": {f.compiles} compiles in {f.steps} steps (twinbench doctor)"
    elif f.traced_compiles:
        text += f": {f.traced_compiles} compiles in the {f.traced_steps} traced steps"
    if f.shapes:
        dims = f.axes
        which = f": its dimension{'s' if len(dims) > 1 else ''} {', '.join(map(str, dims))}" if dims else ""
        which += _named_axis(f.shapes[0], dims)
        text += f", caused by the shape of {f.argument} ({f.shapes[0]} against {f.shapes[1]}{which})"
    elif f.cause:
        text += f", caused by a changing {f.cause}"
    if f.finding:
        text += f" (see the doctor's {f.finding})"
    return text
