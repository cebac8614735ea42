"""Undoable patches of a library's functions and methods: what the doctor's torch and JAX instruments share."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

_MISSING = object()


class Patches:
    """Patches that :meth:`undo_all` takes back, last first; each instrument set keeps its ``undo`` list (other
    undoable changes, e.g. a removed hook or a restored setting, are appended to it too)."""

    undo: list[Callable[[], None]]

    def _patch(self, owner: Any, name: str, new: Any) -> None:
        """``owner.name = new`` (a module, a class): undone by putting back ``owner``'s own attribute, or by
        removing the patch where ``owner`` had none of its own (an inherited method)."""
        old = vars(owner).get(name, _MISSING)
        setattr(owner, name, new)
        self.undo.append(lambda: setattr(owner, name, old) if old is not _MISSING else delattr(owner, name))

    def undo_all(self) -> None:
        """Every change in ``undo``, taken back in reverse order; one that fails does not stop the others."""
        for fn in reversed(self.undo):
            with contextlib.suppress(Exception):
                fn()
        self.undo.clear()
