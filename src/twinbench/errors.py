"""A failure in one line that says what, where and why: the form of every run's ``error`` field."""

from __future__ import annotations

import traceback
from pathlib import Path

#: frames inside these packages are not where a failure is to be looked for (the user's or a library's code is)
_INTERNAL = ("/jax/", "/jaxlib/", "/torch/", "/torchax/", "/numpy/", "/flax/", "/optax/", "/twinbench/", "<frozen")


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return f"{type(e).__name__}: {line}" if line else type(e).__name__


def error_line(e: BaseException) -> str:
    """The failure in one line, never cut: the exception's whole first line, where it was raised (the deepest
    frame outside the frameworks and twinbench: the user's or a library's code, e.g. the transformers function
    that concretized a traced value) and what caused it (``raise ... from`` or during the handling of)."""
    text = _first_line(e)
    frames = traceback.extract_tb(e.__traceback__) if e.__traceback__ else []
    outside = [f for f in frames if not any(p in f.filename.replace("\\", "/") for p in _INTERNAL)]
    frame = (outside or frames or [None])[-1]
    if frame is not None:
        text += f" (at {Path(frame.filename).name}:{frame.lineno} in {frame.name})"
    cause = e.__cause__ or (None if e.__suppress_context__ else e.__context__)
    if cause is not None:
        text += f"; caused by {_first_line(cause)}"
    return text
