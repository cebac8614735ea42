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
from twinbench.doctor.observed import EagerFunction, EagerWork

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
    if callable(value) and (not leaves or (len(leaves) == 1 and leaves[0] is value)):
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
        self.nnx: dict[Any, bool] = {}  # ... -> whether it is given Flax NNX modules (then nnx.jit)

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
            values = {n: f.f_locals[n] for n in names if n in f.f_locals}
            self.nnx[code] = any(_is_nnx(v) for v in values.values())
            self.static[code] = {n: why for n, v in values.items()
                                 if not _is_nnx(v) and (why := needs_static(jax, v)) is not None}

    def _function(self, frame: Any) -> EagerFunction:
        code = frame.f_code
        return EagerFunction(name=code.co_name, file=code.co_filename, line=code.co_firstlineno,
                             params=list(code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]),
                             static=self.static.get(code, {}), nnx=self.nnx.get(code, False))

    def describe(self) -> EagerWork | None:
        """The user functions to jit: the innermost one both kinds of call (gradient, update) ran in, when it runs
        one step; else, where that one holds the loop (the same frame made the calls of two steps) or there is
        none, the innermost function of each kind's calls that is neither the loop nor the module. Each with its
        parameters and the ones a jit must take as static. None when nothing was seen."""
        kinds = [c for c in self.chains.values() if c]
        if not kinds:
            return None

        def is_loop(frame: Any) -> bool:  # the same frame made the calls of two steps: it runs the loop
            return frame.f_code.co_name == "<module>" or any(
                len(c) > 1 and any(f is frame for f in c[1]) for c in kinds)

        first = [c[0] for c in kinds]
        common = [f for f in first[0] if all(any(g.f_code is f.f_code for g in other) for other in first[1:])]
        target = next(iter(common), None)
        if target is not None and not is_loop(target):
            funcs = [self._function(target)]
        else:
            funcs = []
            for frames in first:
                f = next((f for f in frames if not is_loop(f)), None)
                if f is not None and all(g.name != f.f_code.co_name or g.line != f.f_code.co_firstlineno
                                         for g in funcs):
                    funcs.append(self._function(f))
        where = first[0][0] if first[0] else None
        out = EagerWork(functions=funcs, loop=target is not None and is_loop(target),
                        at=f"{where.f_code.co_filename}:{where.f_lineno}" if where is not None else "")
        self.chains = {"grad": [], "optax": []}  # frames hold the script's locals: let them go
        return out


def _is_nnx(value: Any) -> bool:
    """A Flax NNX graph node (a Module, an Optimizer): nnx.jit takes it as it is, neither traced nor static."""
    nnx = sys.modules.get("flax.nnx")
    return nnx is not None and bool(getattr(nnx, "is_graph_node", lambda v: False)(value))
