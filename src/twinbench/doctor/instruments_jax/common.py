"""The plumbing every JAX hook shares: where a call comes from (the user's code or a library), a stable key
for a jitted function, array sizes, and the :class:`Hooks` base (guarded instruments, undoable patches)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from twinbench.doctor.observed import FreshArg
from twinbench.doctor.patching import Patches
from twinbench.doctor.ready import ReadyWatcher
from twinbench.doctor.recorder import Recorder

_LIB_DIRS: tuple[str, ...] = ()  # package folders whose own host reads are not the user's


def _lib_dirs() -> tuple[str, ...]:
    global _LIB_DIRS
    if not _LIB_DIRS:
        dirs = []
        for name in ("jax", "jaxlib", "flax", "optax", "numpy", "orbax", "chex"):
            mod = sys.modules.get(name)
            if mod is not None and getattr(mod, "__file__", None):
                dirs.append(os.path.dirname(mod.__file__))
        _LIB_DIRS = tuple(dirs)
    return _LIB_DIRS


def _user_site(depth: int = 2) -> str | None:
    """``file:line`` of the user frame that called a wrapper, or None when a library called it."""
    frame = sys._getframe(depth)
    name = frame.f_code.co_filename
    if name.startswith(_lib_dirs()):
        return None
    return f"{name}:{frame.f_lineno}"


def _unwrap(fun: Any) -> Any:
    for _ in range(8):
        inner = getattr(fun, "__wrapped__", None) or getattr(fun, "f", None) or getattr(fun, "func", None)
        if inner is None or inner is fun or not callable(inner):
            break
        fun = inner
    return fun


def _fun_key(fun: Any) -> tuple[str, str]:
    """A stable key for a jitted function (its code location), and its name for the report."""
    base = _unwrap(fun)
    code = getattr(base, "__code__", None)
    name = getattr(base, "__qualname__", None) or type(base).__name__
    if code is not None:
        return f"{code.co_filename}:{code.co_firstlineno}:{name}", name
    return f"{type(base).__module__}.{name}:{id(base)}", name


def _has_tracer(jax: Any, tree: Any) -> bool:
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(tree))


def _nbytes(x: Any) -> int:
    n = getattr(x, "nbytes", None)
    if n is not None:
        return int(n)
    shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
    if shape is None or dtype is None:
        return 0
    size = 1
    for d in shape:
        size *= int(d)
    import numpy as np

    return size * np.dtype(dtype).itemsize


def _device_bytes(jax: Any, leaves: list[Any]) -> dict[Any, int]:
    """Bytes of ``leaves`` held on each device (a sharded or pmapped array counts its shard on each)."""
    per: dict[Any, int] = {}
    for x in leaves:
        sharding = getattr(x, "sharding", None)
        if not isinstance(x, jax.Array) or sharding is None:
            per["host"] = per.get("host", 0) + _nbytes(x)
            continue
        try:
            shard = sharding.shard_shape(x.shape)
        except Exception:
            shard = x.shape
        size = 1
        for d in shard:
            size *= int(d)
        for dev in sharding.device_set:
            per[dev] = per.get(dev, 0) + size * x.dtype.itemsize
    return per


def _describe(jax: Any, leaf: Any) -> FreshArg:
    import numpy as np

    shape, nbytes = [int(d) for d in getattr(leaf, "shape", ())], _nbytes(leaf)
    if isinstance(leaf, np.ndarray):
        return FreshArg(shape=shape, bytes=nbytes, kind="numpy", devices=1, replicated=True)
    sharding = getattr(leaf, "sharding", None)
    n = len(sharding.device_set) if sharding is not None else 1
    return FreshArg(shape=shape, bytes=nbytes, kind="jax", devices=n, sharding=type(sharding).__name__,
                    replicated=bool(n == 1 or getattr(sharding, "is_fully_replicated", False)))


class Hooks(Patches):
    """What every group of hooks shares: the recorder, JAX, and patches that ``uninstall()`` undoes."""

    rec: Recorder
    jax: Any
    undo: list[Callable[[], None]]

    @contextlib.contextmanager
    def guard(self, what: str) -> Iterator[None]:
        """Instrument code on the user's call path: a bug here is recorded, never raised into the script."""
        try:
            yield
        except Exception as e:
            errors = self.rec.info.instrument_errors
            if len(errors) < 10:
                errors.append(f"jax {what}: {type(e).__name__}: {e}"[:300])

    def _config(self, name: str, value: Any) -> None:
        old = getattr(self.jax.config, name)
        self.jax.config.update(name, value)
        self.undo.append(lambda: self.jax.config.update(name, old))


class Instruments(Protocol):
    """What a helper holding the composed instruments (a watched jitted function, the cache-miss filter) uses
    of them: the state ``JaxInstruments`` sets up in its ``__init__``. A protocol here, so that the hook
    modules never import the package that composes them (no import circle, not even a type-only one)."""

    rec: Recorder
    jax: Any
    wrappers: dict[str, Callable[..., Any]]  # key -> the watched jitted function (steps._Jitted; steps imports this module)
    call_depth: int
    call_missed: bool
    outer_start: float | None
    inner_s: float
    inner_cpu: float
    outer_call: tuple[str, int] | None
    watcher: ReadyWatcher
    eager_step: Any  # eager_step.EagerStep

    def guard(self, what: str) -> contextlib.AbstractContextManager[None]: ...

    def eager_time(self) -> contextlib.AbstractContextManager[None]: ...

    def input_check(self, wrapper: Any, index: int, args: tuple, kwargs: dict, out: Any) -> None: ...
