"""Step candidates: ``jax.jit``/``jax.pmap`` wrapped to count calls (:class:`_Jitted`), ``jax.grad`` calls outside
jit, and the Python time of a Flax NNX ``nnx.jit`` call around its ``jax.jit``."""

from __future__ import annotations

import functools
import sys
import time
import types
from collections.abc import Callable
from typing import Any

from twinbench.doctor.instruments_jax.common import (
    Hooks,
    Instruments,
    _describe,
    _device_bytes,
    _fun_key,
    _has_tracer,
    _lib_dirs,
    _nbytes,
)
from twinbench.doctor.observed import Carried, FreshArg


class StepHooks(Hooks):
    """Wraps the transforms that make a step."""

    # -- step candidates -------------------------------------------------------------------------------
    def _wrap_transform(self, transform: Callable, kind: str) -> Callable:
        inst = self

        @functools.wraps(transform)
        def wrapped_transform(fun: Any = None, *args: Any, **kwargs: Any) -> Any:
            if fun is None:  # decorator factory use: @jax.jit(static_argnums=...) in newer JAX
                return lambda f: wrapped_transform(f, *args, **kwargs)
            jitted = transform(fun, *args, **kwargs)
            key, name = _fun_key(fun)
            if type(fun).__module__.startswith("flax") and not inst.flax_patched:
                inst.patch_flax_calls()
            # A library's own jitted helpers (optax, flax internals) are never the user's step.
            lib = key.startswith(_lib_dirs()) or "/site-packages/" in key
            return _Jitted(inst, jitted, fun, key, name, f"{kind}-lib" if lib else kind, kwargs)

        return wrapped_transform

    def patch_flax_calls(self) -> None:
        """Time a Flax NNX jit step from the user's call: ``nnx.jit`` splits and merges the graph in Python
        around the ``jax.jit`` it calls, which is the step's dispatch, not time between steps."""
        self.flax_patched = True
        try:
            from flax.nnx.transforms import compilation
        except ImportError:
            return
        inst = self
        try:
            from flax.nnx.graph import is_graph_node as is_node
        except ImportError:
            def is_node(x: Any) -> bool:
                return False
        for name in ("JitWrapped", "SimpleJitWrapped", "SimpleJitPartialWrapped"):
            cls = getattr(compilation, name, None)
            if cls is None or "__call__" not in cls.__dict__:
                continue

            def outer_call(obj: Any, *args: Any, _orig: Callable = cls.__dict__["__call__"], **kwargs: Any) -> Any:
                if inst.outer_start is not None or inst.rec.internal:  # nested, or the doctor's own call
                    return _orig(obj, *args, **kwargs)
                inst.outer_start = t0 = time.perf_counter()
                c0 = time.thread_time()
                inst.rec.in_call = True  # nnx.jit's graph split is the call's, not the loop's between calls
                inst.inner_s, inst.inner_cpu, inst.outer_call = 0.0, 0.0, None
                try:
                    out = _orig(obj, *args, **kwargs)
                finally:
                    inst.outer_start = None
                if inst.outer_call is not None:  # nnx.jit called a jit: its own Python (graph split before, merge
                    # after) is the call less the jitted call inside it, both timed here, so never more than the call
                    inst.rec.seconds["nnx_graph_s"] += max(time.perf_counter() - t0 - inst.inner_s, 0.0)
                    # ... and in the loop thread's CPU time (a busy machine stretches the wall time, not this)
                    inst.rec.seconds["nnx_graph_cpu_s"] += max(time.thread_time() - c0 - inst.inner_cpu, 0.0)
                    with inst.guard("nnx graph args"):  # modules/optimizers passed in: traversed every call
                        cached = sys._getframe(1).f_code.co_name == "cache_args_wrapper"  # nnx.cached_partial
                        nodes = [] if cached else [a for a in (*args, *kwargs.values()) if is_node(a)]
                        if nodes and inst.rec.info.nnx_node_args is None:  # the user's arguments that are
                            inst.rec.info.nnx_node_args = _node_args(obj, args, kwargs, is_node)  # modules
                        if nodes:
                            inst.rec.count("nnx_graph_calls")
                            if inst.rec.info.nnx_graph_leaves is None:  # the graph's size: its state leaves
                                from flax import nnx

                                inst.rec.internal += 1
                                try:
                                    inst.rec.info.nnx_graph_leaves = len(
                                        inst.jax.tree_util.tree_leaves(nnx.state(tuple(nodes))))
                                finally:
                                    inst.rec.internal -= 1
                    inst.rec.step_returned(*inst.outer_call)  # the step returns after the merge and the doctor's work
                return out

            functools.update_wrapper(outer_call, cls.__dict__["__call__"])
            self._patch(cls, "__call__", outer_call)

    def _wrap_grad(self, transform: Callable, how: str) -> Callable:
        """``jax.grad``/``value_and_grad``: a call of the gradient function outside jit is a step candidate
        (a step signal in an eager loop, used where no jitted function of the script marks the step)."""
        inst = self

        @functools.wraps(transform)
        def wrapped_transform(fun: Any, *args: Any, **kwargs: Any) -> Any:
            grad_fun = transform(fun, *args, **kwargs)
            _, name = _fun_key(fun)
            key = f"grad:{how}({name})"

            @functools.wraps(grad_fun)
            def grad_call(*a: Any, **k: Any) -> Any:
                rec = inst.rec
                if rec.internal or _has_tracer(inst.jax, (a, k)):  # inside jit: part of a jitted step
                    return grad_fun(*a, **k)
                with inst.guard("eager step"):
                    inst.eager_step.seen(inst.jax, "grad", 1)
                rec.step_call(key, "grad")
                out = grad_fun(*a, **k)
                rec.step_done(key)
                return out

            return grad_call

        return wrapped_transform

    def adopt(self, namespace: dict[str, Any]) -> list[str]:  # a module's globals: any names, any values
        """Wrap jitted functions already bound in ``namespace`` (for ``watch()`` in a notebook)."""
        adopted = []
        for name, value in list(namespace.items()):
            if type(value).__name__ in ("PjitFunction", "PmapFunction") and hasattr(value, "lower"):
                fun = getattr(value, "__wrapped__", value)
                key, fname = _fun_key(fun)
                namespace[name] = _Jitted(self, value, fun, key, fname, "jit", {})
                self.undo.append(functools.partial(namespace.__setitem__, name, value))
                adopted.append(name)
        return adopted


class _Jitted:
    """A jitted (or pmapped) function that counts its calls as step candidates; otherwise transparent."""

    def __init__(self, inst: Instruments, jitted: Any, fun: Any, key: str, name: str, kind: str,
                 options: dict[str, Any]) -> None:  # options: jax.jit's keywords as the script gave them
        self.inst, self.jitted, self.kind, self.options = inst, jitted, kind, options
        self.fun = fun
        self.key, self.name = f"{kind}:{key}", name
        self.rec_key = f"{kind}:{name}"  # same name and place = one candidate (a re-created jit too)
        self.ncalls = 0
        self.prev_out: list[Any] = []
        self.carried: Carried | None = None  # None until the 2nd call
        self.carried_out: set[int] = set()  # positions of the outputs that the next call takes back in
        self.carry_map: dict[int, int] = {}  # input leaf position -> the output leaf position it came from
        self.carried_args: list[str] = []  # the step's arguments that hold carried state (named or positional)
        self.fresh: list[FreshArg] = []
        self.specs: tuple[tuple, dict] | None = None
        functools.update_wrapper(self, fun, updated=())

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["jitted"], name)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self if obj is None else types.MethodType(self, obj)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        t_enter = time.perf_counter()  # the doctor's own work below is part of the call, not between steps
        c_enter = time.thread_time()
        inst = self.inst
        rec, jax = inst.rec, inst.jax
        if rec.internal:
            return self.jitted(*args, **kwargs)
        leaves = jax.tree_util.tree_leaves((args, kwargs))
        if any(isinstance(leaf, jax.core.Tracer) for leaf in leaves):  # called while tracing: not a step
            return self.jitted(*args, **kwargs)
        key = self.rec_key
        with inst.guard("jit call"):
            inst.wrappers[key] = self
            if self.kind.startswith("pmap"):
                rec.count("pmap_calls")
            if self.kind.endswith("-lib"):  # a library's jitted helper called outside jit: one eager dispatch
                rec.count("eager_ops")
            self._host_arrays(leaves)
            if self.ncalls in (1, 2):
                self._inspect_inputs(leaves, args, kwargs)
        rec.step_call(key, self.kind, t_enter if inst.outer_start is None else inst.outer_start)
        index = rec.call_index(key)
        if inst.outer_start is not None and not self.kind.endswith("-lib"):  # nnx.jit's call: its own Python is
            inst.outer_call = (key, index)  # the whole call less this one, and it returns after the graph's merge
        self.ncalls += 1
        if not inst.call_depth:
            inst.call_missed = False
        inst.call_depth += 1
        try:
            if self.kind.endswith("-lib"):  # a library's helper run eagerly: host work of the loop
                with inst.eager_time():
                    out = self.jitted(*args, **kwargs)
            else:
                out = self.jitted(*args, **kwargs)
        finally:
            inst.call_depth -= 1
        with inst.guard("jit outputs"):
            out_leaves = jax.tree_util.tree_leaves(out)
            self.prev_out = out_leaves if self.ncalls <= 2 else []
            leaf = None if self.kind.endswith("-lib") else self._ready_leaf(out_leaves)  # a library's helper
            if leaf is not None:  # is no step: no need to see when it ends
                inst.watcher.submit(key, index, leaf.block_until_ready)
            if leaf is not None:
                inst.step_outputs(key, index, out_leaves)
        inst.inner_s += time.perf_counter() - t_enter  # the doctor's own work in this call is not nnx.jit's
        if leaf is not None:
            t_check = time.perf_counter()
            inst.input_check(self, index, args, kwargs, out)
            inst.inner_s += time.perf_counter() - t_check
        inst.inner_cpu += time.thread_time() - c_enter
        rec.step_done(key)
        return out

    def _specs(self, args: tuple, kwargs: dict) -> Any:
        jax = self.inst.jax
        pmap = self.kind.startswith("pmap")  # pmap places its inputs itself: lowered from shapes only

        def spec(x: Any) -> Any:
            if isinstance(x, jax.Array):  # an uncommitted array (not placed by the user) has no sharding in
                # jit's cache key: giving it one would miss the cache and compile the step again
                sharding = x.sharding if getattr(x, "committed", True) and not pmap else None
                return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)
            return x
        return jax.tree_util.tree_map(spec, (args, kwargs))

    def _ready_leaf(self, leaves: list[Any]) -> Any:
        """The output to wait on for the step's end: the smallest one the next call does not take back in
        (a carried output may be donated, i.e. deleted, before the watcher waits on it). All outputs of
        one executable are ready together."""
        arrays = [(i, x) for i, x in enumerate(leaves) if isinstance(x, self.inst.jax.Array)]
        fresh = [(i, x) for i, x in arrays if i not in self.carried_out] or arrays
        return min(fresh, key=lambda ix: _nbytes(ix[1]))[1] if fresh else None

    def _host_arrays(self, leaves: list[Any]) -> None:
        import numpy as np

        for leaf in leaves:
            if isinstance(leaf, np.ndarray) and leaf.size > 1:
                self.inst.rec.count("h2d_numpy_args")
                self.inst.rec.count("h2d_numpy_bytes", leaf.nbytes)

    def _inspect_inputs(self, leaves: list[Any], args: tuple, kwargs: dict) -> None:
        """Calls 2 and 3: which inputs are the previous call's outputs (carried state; the larger of the two
        counts, since another function run between two steps, e.g. an NNX eval step every N steps, may have
        written the state last)? Call 3: the fresh ones."""
        jax = self.inst.jax
        out_ids = {id(x) for x in self.prev_out}
        carried = [x for x in leaves if id(x) in out_ids]
        nbytes = sum(_nbytes(x) for x in carried)
        if self.specs is None:  # the step's argument shapes, to read its program back at the end
            self.specs = self._specs(args, kwargs)
        if self.carried is None or nbytes > self.carried.bytes:
            in_ids = {id(x) for x in leaves}
            self.carried_out = {i for i, x in enumerate(self.prev_out) if id(x) in in_ids}
            out_pos = {id(x): j for j, x in enumerate(self.prev_out)}
            self.carry_map = {i: out_pos[id(x)] for i, x in enumerate(leaves) if id(x) in out_pos}
            self.carried_args = _carried_args(jax, self.fun, args, kwargs, out_ids)
            self.carried = Carried(leaves=len(carried), bytes=nbytes,
                                   device_bytes=max(_device_bytes(jax, carried).values(), default=0))
            if carried:
                self.specs = self._specs(args, kwargs)
        if self.ncalls == 2:
            fresh = [x for x in leaves if id(x) not in out_ids and getattr(x, "ndim", 0) >= 1]
            fresh.sort(key=_nbytes, reverse=True)
            self.fresh = [_describe(jax, x) for x in fresh[:4]]


def _carried_args(jax: Any, fun: Any, args: tuple, kwargs: dict, out_ids: set[int]) -> list[str]:
    """The step's arguments that hold the previous call's outputs (the state carried from step to step), each as
    ``"name"`` with its position where the signature gives one (``"0:state"``), else ``"0"``/``"name"``."""
    import inspect

    try:
        names = list(inspect.signature(fun).parameters)
    except (TypeError, ValueError):
        names = []
    out = []
    for i, a in enumerate(args):
        leaves = jax.tree_util.tree_leaves(a)
        if leaves and any(id(x) in out_ids for x in leaves):
            out.append(f"{i}:{names[i]}" if i < len(names) else str(i))
    for k, v in kwargs.items():
        if any(id(x) in out_ids for x in jax.tree_util.tree_leaves(v)):
            out.append(k)
    return out


def _node_args(obj: Any, args: tuple, kwargs: dict, is_node: Callable[[Any], bool]) -> list[str]:
    """The names of an ``nnx.jit`` call's arguments that are graph nodes (modules, optimizers: state the call
    updates in place), from the user's function's signature (``obj.fun``); positions where it has no name."""
    import inspect

    try:
        names = list(inspect.signature(getattr(obj, "fun", None)).parameters)
    except (TypeError, ValueError):
        names = []
    return [names[i] if i < len(names) else str(i) for i, a in enumerate(args) if is_node(a)] + \
        [k for k, v in kwargs.items() if is_node(v)]
