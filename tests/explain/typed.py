"""Explained sides and results as the tests write them: a side by hand as a dict of its fields (explain/side.py's
``Side``, every field not given at its default), a result read back as the JSON ``explain --json`` holds."""

from __future__ import annotations

from typing import Any

import msgspec

from twinbench.explain.side import Row, ShapeRow, Side


def side(d: dict[str, Any]) -> Side:
    """A side from the fields given (``run`` and ``step_ms`` default to '' and 0)."""
    return msgspec.convert({"run": "", "step_ms": 0.0, **d}, Side)


def rows(table: list[dict[str, Any]]) -> list[Row]:
    return msgspec.convert(table, list[Row])


def shape_rows(table: list[dict[str, Any]]) -> list[ShapeRow]:
    return msgspec.convert(table, list[ShapeRow])


def plain(x: Any) -> Any:
    """A typed result as its JSON holds it (dicts, lists; a row's unset fields left out)."""
    return msgspec.to_builtins(x)
