"""``twinbench sweep``: the grid of run-spec values a compare is repeated over.

``--over layers=2,4,8,12`` gives one axis; several ``--over`` make the grid of their product. Any field a
flag can override is an axis (``layers``, ``batch``, ``seq``, ``d_model``, ``devices``, ``scan_k``, ...;
``d-model`` is accepted for ``d_model``). Values are parsed with the type of that flag.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

from twinbench.plan import Override, Overrides
from twinbench.spec import OVERRIDABLE, RunSpec, SpecError

Axis = tuple[str, list[Override]]


def parse_over(items: list[str]) -> list[Axis]:
    """``["layers=2,4", "batch=1,8"]`` -> ``[("layers", [2, 4]), ("batch", [1, 8])]``; SpecError if bad."""
    allowed = ", ".join(OVERRIDABLE)
    if not items:
        raise SpecError(f"--over: give at least one FIELD=V1,V2,...; fields: {allowed}")
    axes: list[Axis] = []
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not raw.strip():
            raise SpecError(f"--over {item!r}: expected FIELD=V1,V2,... (e.g. layers=2,4,8)")
        if key not in OVERRIDABLE:
            raise SpecError(f"--over: unknown field {key!r}; allowed: {allowed}")
        if key in (k for k, _ in axes):
            raise SpecError(f"--over: field {key!r} given twice")
        typ = OVERRIDABLE[key]
        values: list[Override] = []
        for v in (v.strip() for v in raw.split(",")):
            try:
                values.append(typ(v))
            except ValueError:
                raise SpecError(f"--over {key}: {v!r} is not a valid {typ.__name__}") from None
        axes.append((key, list(dict.fromkeys(values))))
    return axes


def points(axes: list[Axis]) -> list[Overrides]:
    """Every point of the grid, in order (the last axis varies fastest)."""
    from twinbench.limits import check_runs

    check_runs(math.prod(len(v) for _, v in axes), "--over")  # the grid's size, before a point of it is made
    keys = [k for k, _ in axes]
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(v for _, v in axes))]


def grid_specs(axes: list[Axis], overrides: Overrides, build: Callable[[Overrides], list[RunSpec]]) -> list[RunSpec]:
    """The specs of every point: ``build`` (the compare's spec builder) applied to overrides + the point."""
    clash = [k for k, _ in axes if overrides.get(k) is not None]  # a flag left out is None
    if clash:
        raise SpecError(f"--over {clash[0]} and --{clash[0].replace('_', '-')} both given; keep one")
    specs: list[RunSpec] = []
    for point in points(axes):
        try:
            specs += build({**overrides, **point})
        except SpecError as e:
            where = ", ".join(f"{k}={v}" for k, v in point.items())
            raise SpecError(f"at sweep point {where}: {e}") from None
    return specs
