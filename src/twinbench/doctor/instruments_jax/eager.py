"""Work outside jit: the eager primitive dispatch and jax.Array arithmetic (op-by-op work), and Optax's
``update`` run outside ``jit``."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from twinbench.doctor.instruments_jax.common import Hooks, _has_tracer

ARRAY_OPS = ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
             "__pow__", "__neg__", "__matmul__", "__rmatmul__")  # eager arithmetic on jax.Array (not indexing)


class EagerHooks(Hooks):
    """Counts and times eager JAX work and eager Optax updates."""

    # -- eager op-by-op dispatch -----------------------------------------------------------------------
    def _patch_eager_dispatch(self) -> None:
        try:
            from jax._src.core import EvalTrace  # no public hook counts eager primitives
        except ImportError:
            return
        orig = EvalTrace.__dict__["process_primitive"]
        rec, sources, inst = self.rec, self.eager_sources, self

        def process_primitive(trace: Any, primitive: Any, args: Any, params: Any, /) -> Any:
            if rec.internal or inst.op_depth or primitive.name in ("pjit", "jit", "pmap", "xla_pmap"):
                return orig(trace, primitive, args, params)
            rec.counters["eager_ops"] += 1
            if rec.counters["eager_ops"] % 25 == 1:  # sample where eager work comes from
                sources[_eager_source()] += 25
            with inst.eager_time():
                return orig(trace, primitive, args, params)

        self._patch(EvalTrace, "process_primitive", process_primitive)
        self._patch_array_ops()

    def _patch_array_ops(self) -> None:
        """Count arithmetic on concrete arrays (``p - lr * g`` in an eager ``jax.tree.map`` update): jax.numpy's
        operators are jitted functions that JAX dispatches from C++ once cached, so the primitive hook above
        never sees them."""
        try:
            from jax._src.array import ArrayImpl as array_type
        except ImportError:
            return
        rec, sources, inst = self.rec, self.eager_sources, self

        def wrap(orig: Callable) -> Callable:
            @functools.wraps(orig)
            def op(*args: Any, **kwargs: Any) -> Any:
                if rec.internal or inst.op_depth:
                    return orig(*args, **kwargs)
                rec.counters["eager_ops"] += 1
                if rec.counters["eager_ops"] % 25 == 1:
                    sources[_eager_source()] += 25
                inst.op_depth += 1
                try:
                    with inst.eager_time():
                        return orig(*args, **kwargs)
                finally:
                    inst.op_depth -= 1

            return op

        for name in ARRAY_OPS:
            if name in array_type.__dict__:
                self._patch(array_type, name, wrap(array_type.__dict__[name]))

    @contextlib.contextmanager
    def eager_time(self) -> Iterator[None]:
        """Time eager JAX work on the host into ``eager_s``, once for nested calls (an op in an update)."""
        self.eager_depth += 1
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            yield
        finally:
            self.eager_depth -= 1
            if not self.eager_depth:
                self.rec.seconds["eager_s"] += time.perf_counter() - t0
                self.rec.seconds["eager_cpu_s"] += time.thread_time() - c0  # a busy machine does not stretch it

    # -- Optax ------------------------------------------------------------------------------------------
    def patch_optax(self) -> None:
        """Count ``tx.update(...)`` calls made outside ``jit`` (the optimizer run op by op)."""
        try:
            from optax._src import base
        except ImportError:
            return
        inst = self
        for cls in (base.GradientTransformation, base.GradientTransformationExtraArgs):
            if "update" not in cls.__dict__:
                continue

            def update(tx: Any, _i: int = cls._fields.index("update")) -> Callable:
                fn = tuple.__getitem__(tx, _i)
                return functools.partial(inst._optax_update, fn)

            self._patch(cls, "update", property(update))

    def _optax_update(self, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        if self.in_optax or self.rec.internal or _has_tracer(self.jax, (args, kwargs)):
            return fn(*args, **kwargs)  # inside jit, or an inner transform of a chain: not a step
        self.rec.count("optax_eager_updates")
        with self.guard("eager step"):
            self.eager_step.seen(self.jax, "optax", 1)
        self.rec.step_call("optax:optax update", "optax")
        self.in_optax = True
        try:
            with self.eager_time():  # the whole eager update (its Python too) is host work, not input
                out = fn(*args, **kwargs)
        finally:
            self.in_optax = False
        self.rec.step_done("optax:optax update")
        return out


def _eager_source() -> str:
    """The first frame outside JAX that dispatched an eager op: the user's line or a library's name."""
    frame = sys._getframe(2)
    while frame is not None:
        mod = frame.f_globals.get("__name__", "")
        if not (mod.startswith("jax") or mod.startswith("twinbench.doctor")):
            if mod == "__main__":
                return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
            return mod.split(".")[0]
        frame = frame.f_back
    return "?"
