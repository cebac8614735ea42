"""Where an eager step lives, for ``jax-eager-ops``'s fix: the user's function that calls the gradient (and the Optax
update) outside jit, its arguments, and which of them a ``jax.jit`` of it must take as static.

Recorded on the first calls of ``jax.grad``/``value_and_grad``'s function and of an eager Optax update: the stack's
frames in the user's own files. The function to jit is the innermost one both calls run in (one step: gradient and
update); when that same frame makes the calls of two steps, it holds the loop and is not a step to jit.
"""

from __future__ import annotations

import sys
from typing import Any

from twinbench.doctor.locations import is_library_file

CHAIN_CALLS = 3  # calls of each kind whose stacks are looked at


def user_frames(frame: Any) -> list[Any]:
    """The frames of the stack above ``frame`` in the user's own files, innermost first."""
    out = []
    while frame is not None:
        if not is_library_file(frame.f_code.co_filename):
            out.append(frame)
        frame = frame.f_back
    return out


def needs_static(jax: Any, value: Any) -> str | None:
    """Why an argument of this value cannot be traced by ``jax.jit`` (it must be static), or None: a Python int,
    bool or str (a shape, a count, a flag or a mode), a tuple of ints (a shape), a callable or any object whose
    leaves are not arrays or numbers (a model definition, an optimizer's functions)."""
    import numpy as np

    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, int):
        return "an int"
    if isinstance(value, str):
        return "a str"
    if isinstance(value, tuple) and value and all(isinstance(v, int) for v in value):
        return "a shape"
    leaves = jax.tree_util.tree_leaves(value)
    if callable(value) and not leaves:
        return "a function"
    numeric = (jax.Array, np.ndarray, np.generic, float, complex, int)
    if any(not isinstance(x, numeric) for x in leaves):
        return f"a {type(value).__name__} (not arrays)"
    return None


class EagerStep:
    """The user frames of the first eager gradient and update calls, and what they say about the step."""

    def __init__(self) -> None:
        self.chains: dict[str, list[list[Any]]] = {"grad": [], "optax": []}
        self.static: dict[Any, dict[str, str]] = {}  # a function's code -> its static arguments' names -> why

    def seen(self, jax: Any, kind: str, depth: int = 2) -> None:
        chains = self.chains[kind]
        if len(chains) >= CHAIN_CALLS:
            return
        frames = user_frames(sys._getframe(depth))
        chains.append(frames)
        for f in frames:  # the arguments each function of the chain was called with, now
            code = f.f_code
            if code.co_name == "<module>" or code in self.static:
                continue
            names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
            self.static[code] = {n: why for n in names if n in f.f_locals
                                 and (why := needs_static(jax, f.f_locals[n])) is not None}

    def describe(self) -> dict[str, Any] | None:
        """The step function to jit (innermost user function both kinds of call ran in), its static arguments,
        and whether that one frame made the calls of two steps (the loop itself); None when nothing was seen."""
        kinds = [c for c in self.chains.values() if c]
        if not kinds:
            return None
        first = [c[0] for c in kinds]
        common = [f for f in first[0] if all(any(g.f_code is f.f_code for g in other) for other in first[1:])]
        target = next(iter(common), None)
        out: dict[str, Any]
        if target is None or target.f_code.co_name == "<module>":
            where = first[0][0] if first[0] else None
            out = {"module": True, "at": f"{where.f_code.co_filename}:{where.f_lineno}" if where else ""}
        else:
            code = target.f_code
            calls = next(c for c in kinds if any(f is target for f in c[0]))
            loop = len(calls) > 1 and any(f is target for f in calls[1])  # the same frame, a second step
            out = {"module": False, "name": code.co_name, "file": code.co_filename, "line": code.co_firstlineno,
                   "params": list(code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]),
                   "static": self.static.get(code, {}), "loop": loop,
                   "at": f"{code.co_filename}:{target.f_lineno}"}
        self.chains = {"grad": [], "optax": []}  # frames hold the script's locals: let them go
        return out
