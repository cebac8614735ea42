"""Where in the user's code the doctor saw something: the first frame of the stack in the user's own files, not
an installed package's, the standard library's or the doctor's."""

from __future__ import annotations

import linecache
import os
from typing import Any

_STDLIB = os.path.dirname(os.__file__)
_LIBRARY_MARKS = ("/site-packages/", "/dist-packages/", "<frozen", "/twinbench/doctor/")


def is_library_file(filename: str) -> bool:
    """A file of an installed package, the standard library or the doctor itself: not the user's code."""
    return filename.startswith(_STDLIB) or any(m in filename for m in _LIBRARY_MARKS)


def short_path(filename: str) -> str:
    """An installed package's file from its package folder on (``datasets/formatting/formatting.py``)."""
    for mark in ("/site-packages/", "/dist-packages/"):
        if mark in filename:
            return filename.split(mark, 1)[1]
    return filename


def user_location(frame: Any) -> tuple[str, Any] | None:
    """Where the user's code is in the stack above ``frame`` (the frame that called a wrapper): the first
    frame in the user's own files, written ``file:line `code```, followed by the library frame that did the
    work when a library sits between them (``your line -> datasets/formatting/formatting.py:96``); and the
    user frame itself (a key for the reads one line makes). None when no frame of the stack is the user's."""
    lib = frame if is_library_file(frame.f_code.co_filename) else None
    f = frame
    while f is not None and is_library_file(f.f_code.co_filename):
        f = f.f_back
    if f is None:
        return None
    code = linecache.getline(f.f_code.co_filename, f.f_lineno).strip()
    where = f"{f.f_code.co_filename}:{f.f_lineno}" + (f" `{code[:80]}`" if code else "")
    if lib is not None:
        where += f" -> {short_path(lib.f_code.co_filename)}:{lib.f_lineno}"
    return where, f
