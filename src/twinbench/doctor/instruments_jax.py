"""JAX instruments: record what a training script does, through JAX's own hooks where it has them.

Official hooks: ``jax.monitoring`` duration events (trace, lower, backend compile; each names its function),
``jax_explain_cache_misses`` (why a function was traced again, captured through ``logging``), the transfer
guard in ``log`` mode (implicit host-to-device copies; written by XLA's C++ logger to fd 2, read back by
``StderrTee``), ``Lowered.args_info`` (which arguments are donated) and ``Compiled.memory_analysis()``,
``Array.sharding``. Where JAX has no hook, thin wrappers: ``jax.jit``/``jax.pmap`` (count calls to find the
step), ``jax.Array`` conversion methods (host reads: ``float``, ``.item()``, printing), the eager primitive
dispatch (op-by-op work outside ``jit``) and Optax's ``update`` (the optimizer run outside ``jit``).
Everything here only records into a :class:`Recorder`; nothing here decides what is wrong.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import sys
import threading
import time
import types
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from twinbench.doctor.ready import ReadyWatcher
from twinbench.doctor.recorder import Recorder, user_location
from twinbench.measure.compiles import JAX_BACKEND, JAX_LOWER, JAX_TRACE

CACHE_MISS_LOGGERS = ("jax._src.interpreters.partial_eval", "jax._src.pjit")
HOST_READS = ("__bool__", "__float__", "__int__", "__index__", "item", "tolist", "__format__", "__repr__",
              "__str__", "__array__")
ARRAY_OPS = ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
             "__pow__", "__neg__", "__matmul__", "__rmatmul__")  # eager arithmetic on jax.Array (not indexing)
LOWER_CACHED_S = 0.05  # a lowering this fast came from JAX's cache (and so will the compile)
READ_COMPILE_MAX_S = 5.0  # a step that compiled faster may be compiled again to read its HLO
BURST_GAP_S = 0.05  # reads of one user line this close together are one burst (one call reading many values)
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


class StderrTee:
    """Route fd 2 through a pipe, count the transfer guard's lines, pass every other line on unchanged.

    XLA's C++ logger writes the transfer guard's ``log`` lines straight to file descriptor 2, so Python's
    ``sys.stderr`` never sees them: the only way to count them is to read fd 2 back.
    """

    MARK = b"host-to-device transfer:"
    AVAL = re.compile(rb"aval=ShapedArray\((\w+)\[([^\]]*)\]")

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        sys.stderr.flush()
        self.saved = os.dup(2)
        read, write = os.pipe()
        os.dup2(write, 2)
        os.close(write)
        self.read = read
        self.thread = threading.Thread(target=self._pump, name="twinbench-doctor-stderr", daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        buf = b""
        with os.fdopen(self.read, "rb", buffering=0) as pipe:
            while chunk := pipe.read(65536):
                buf += chunk
                *lines, buf = buf.split(b"\n")
                out = []
                for line in lines:
                    if self.MARK in line:
                        self._count(line)
                    else:
                        out.append(line + b"\n")
                if out:
                    os.write(self.saved, b"".join(out))
        if buf:
            os.write(self.saved, buf)

    def _count(self, line: bytes) -> None:
        if self.rec.internal:
            return
        self.rec.count("h2d_guard")
        m = self.AVAL.search(line)
        if m and m.group(2).strip():  # a shaped (non-scalar) array; scalars (a learning rate) are cheap
            self.rec.count("h2d_guard_arrays")

    def close(self) -> None:
        sys.stderr.flush()
        os.dup2(self.saved, 2)  # closes the pipe's last write end: the pump sees EOF and drains
        self.thread.join(timeout=5)


class _CacheMissFilter(logging.Filter):
    """Keeps ``jax_explain_cache_misses`` messages for the report instead of printing them."""

    def __init__(self, rec: Recorder, inst: JaxInstruments) -> None:
        super().__init__()
        self.rec, self.inst = rec, inst

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        if "TRACING CACHE MISS" not in msg:
            return True
        if not self.rec.internal:
            # Within one call of a watched jitted function, the first miss is that function's own trace; the
            # next ones are functions traced inside it (inlined into the same program, not compiles).
            inst = self.inst
            nested = inst.call_depth > 0 and inst.call_missed
            inst.call_missed = inst.call_missed or inst.call_depth > 0
            self.rec.note("cache_miss", message=msg[:1500], nested=nested)
        return False


class JaxInstruments:
    """Installs every JAX hook on construction; ``uninstall()`` puts JAX back as it was."""

    def __init__(self, rec: Recorder, capture_stderr: bool = False) -> None:
        import jax
        import jax.monitoring

        self.rec = rec
        self.jax = jax
        self.undo: list[Callable[[], None]] = []
        self.wrappers: dict[str, _Jitted] = {}
        self.eager_sources: Counter[str] = Counter()
        self.read_sites: Counter[str] = Counter()
        self.in_optax = False
        self.call_depth, self.call_missed = 0, False  # inside a watched jitted call; a cache miss seen in it
        self.outer_start: float | None = None  # when the user called an NNX transform that wraps a jit
        self.outer_jit, self.inner_s = False, 0.0  # its jit was called; the time in that call
        self.flax_patched = False
        self.op_depth = 0  # > 0 inside an array operator counted as one eager op
        self.eager_depth = 0  # > 0 inside timed eager work (eager_s counts the outermost level only)
        self.watcher = ReadyWatcher(rec)  # when each step's outputs are ready (the loop is not stalled)
        rec.frameworks.add("jax")
        rec.finalizers.append(self.finalize)

        self._config("jax_explain_cache_misses", True)
        for name in CACHE_MISS_LOGGERS:
            logger = logging.getLogger(name)
            filt = _CacheMissFilter(rec, self)
            logger.addFilter(filt)
            self.undo.append(functools.partial(logger.removeFilter, filt))

        jax.monitoring.register_event_duration_secs_listener(self._on_duration)
        self.undo.append(lambda: jax.monitoring.unregister_event_duration_listener(self._on_duration))

        self.tee: StderrTee | None = None
        if capture_stderr:
            self._config("jax_transfer_guard_host_to_device", "log")
            self.tee = StderrTee(rec)

        self._patch(jax, "jit", self._wrap_transform(jax.jit, "jit"))
        self._patch(jax, "pmap", self._wrap_transform(jax.pmap, "pmap"))
        for name in ("grad", "value_and_grad"):
            self._patch(jax, name, self._wrap_grad(getattr(jax, name), name))
        self._patch_host_reads()
        self._patch_eager_dispatch()

    # -- plumbing --------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def guard(self, what: str) -> Iterator[None]:
        """Instrument code on the user's call path: a bug here is recorded, never raised into the script."""
        try:
            yield
        except Exception as e:
            errors = self.rec.info.setdefault("instrument_errors", [])
            if len(errors) < 10:
                errors.append(f"jax {what}: {type(e).__name__}: {e}"[:300])

    def _config(self, name: str, value: Any) -> None:
        old = getattr(self.jax.config, name)
        self.jax.config.update(name, value)
        self.undo.append(lambda: self.jax.config.update(name, old))

    def _patch(self, owner: Any, name: str, new: Any) -> None:
        old = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        setattr(owner, name, new)
        self.undo.append(lambda: setattr(owner, name, old))

    def uninstall(self) -> None:
        for fn in reversed(self.undo):
            with contextlib.suppress(Exception):
                fn()
        self.undo.clear()
        self.watcher.close()
        if self.tee is not None:
            self.tee.close()
            self.tee = None

    # -- compilation -----------------------------------------------------------------------------------
    def _on_duration(self, event: str, duration: float, **kw: Any) -> None:
        if self.rec.internal or event not in (JAX_TRACE, JAX_LOWER, JAX_BACKEND):
            return
        self.rec.add_seconds("compile_s", duration)
        if event == JAX_BACKEND:
            self.rec.count("compiles")
            self.rec.note("compile", fn=str(kw.get("fun_name", "?")), s=round(duration, 4))

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
                inst.outer_jit, inst.inner_s = False, 0.0
                try:
                    out = _orig(obj, *args, **kwargs)
                finally:
                    inst.outer_start = None
                if inst.outer_jit:  # nnx.jit's own Python (graph split before, merge after): the call less the
                    # jitted call inside it, both timed here, so it can never exceed the call
                    inst.rec.seconds["nnx_graph_s"] += max(time.perf_counter() - t0 - inst.inner_s, 0.0)
                    with inst.guard("nnx graph args"):  # modules/optimizers passed in: traversed every call
                        cached = sys._getframe(1).f_code.co_name == "cache_args_wrapper"  # nnx.cached_partial
                        nodes = [] if cached else [a for a in (*args, *kwargs.values()) if is_node(a)]
                        if nodes:
                            inst.rec.count("nnx_graph_calls")
                            if "nnx_graph_leaves" not in inst.rec.info:  # the graph's size: its state leaves
                                from flax import nnx

                                inst.rec.internal += 1
                                try:
                                    inst.rec.info["nnx_graph_leaves"] = len(
                                        inst.jax.tree_util.tree_leaves(nnx.state(tuple(nodes))))
                                finally:
                                    inst.rec.internal -= 1
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
                rec.step_call(key, "grad")
                out = grad_fun(*a, **k)
                rec.step_done(key)
                return out

            return grad_call

        return wrapped_transform

    def adopt(self, namespace: dict[str, Any]) -> list[str]:
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

    # -- host reads ------------------------------------------------------------------------------------
    def _patch_host_reads(self) -> None:
        try:  # the concrete jax.Array class, without creating an array (that would start the backend
            # before the script could call jax.distributed.initialize or set jax_platforms)
            from jax._src.array import ArrayImpl as array_type
        except ImportError:
            array_type = type(self.jax.numpy.zeros(()))
        rec, sites, local, inst = self.rec, self.read_sites, threading.local(), self
        self.burst: tuple[Any, ...] | None = None  # user frame and line reading, its last read's end, compile_s then

        def wrap(how: str, orig: Callable) -> Callable:
            @functools.wraps(orig)
            def read(self: Any, *args: Any, **kwargs: Any) -> Any:
                depth = getattr(local, "depth", 0)
                loc = None
                if depth == 0 and not rec.internal and _user_site() is not None:
                    loc = user_location(sys._getframe(1))
                    if loc is not None:
                        rec.count("jax_host_reads")
                        sites[f"{loc[0]} ({how.strip('_')})"] += 1
                busy = rec.in_flight() if loc is not None else None
                local.depth = depth + 1
                t0 = time.perf_counter()
                try:
                    return orig(self, *args, **kwargs)
                finally:
                    local.depth = depth
                    if loc is not None:
                        inst._time_read(loc[1], t0, time.perf_counter(), busy)

            return read

        for how in HOST_READS:
            if how in array_type.__dict__:
                self._patch(array_type, how, wrap(how, array_type.__dict__[how]))

    def _time_read(self, frame: Any, t0: float, t1: float, busy: tuple[str, int] | None) -> None:
        """Account one host read (``t0``..``t1``) made by the user's ``frame``: its own time; the time of the
        line's burst of reads (from its first read to its last, with what the library did in between: one
        ``dataset[perm]`` with a JAX index is dozens of reads and small ops); and the part of it spent waiting
        for a step still running on the device (``busy``), which is the step's own time, not the host's."""
        rec = self.rec
        rec.seconds["jax_host_read_s"] += t1 - t0
        key = (id(frame), frame.f_lineno)
        compiled = rec.seconds.get("compile_s", 0.0)  # compilation in a burst is compile time, not the reads'
        if self.burst is not None and self.burst[:2] == key and t0 - self.burst[2] < BURST_GAP_S:
            rec.seconds["jax_host_read_span_s"] += max(t1 - self.burst[2] - (compiled - self.burst[3]), 0.0)
        else:
            rec.seconds["jax_host_read_span_s"] += t1 - t0
        self.burst = (*key, t1, compiled)
        if busy is not None:
            ready = rec.ready.get(busy[0], {}).get(busy[1])
            if ready is not None:  # the step ended during this read: the read waited for it until then
                rec.seconds["jax_host_read_blocked_s"] += max(min(t1, ready) - t0, 0.0)

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
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.eager_depth -= 1
            if not self.eager_depth:
                self.rec.seconds["eager_s"] += time.perf_counter() - t0

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
        self.rec.step_call("optax:optax update", "optax")
        self.in_optax = True
        try:
            with self.eager_time():  # the whole eager update (its Python too) is host work, not input
                out = fn(*args, **kwargs)
        finally:
            self.in_optax = False
        self.rec.step_done("optax:optax update")
        return out

    # -- end of run --------------------------------------------------------------------------------------
    def finalize(self) -> None:
        """Add static facts about the step function: donation (Lowered.args_info), memory, sharding."""
        rec = self.rec
        rec.info["eager_sources"] = dict(self.eager_sources.most_common(8))
        rec.info["jax_host_read_sites"] = dict(self.read_sites.most_common(8))
        flags = os.environ.get("XLA_FLAGS", "")
        m = re.search(r"intra_op_parallelism_threads=(\d+)", flags)
        # XLA's CPU client runs one thread per core unless told otherwise
        rec.info.setdefault("threads", {})["jax"] = int(m.group(1)) if m else len(os.sched_getaffinity(0))
        key = rec.step_key()
        wrapper = self.wrappers.get(key or "")
        if wrapper is None:
            return
        rec.info["step_def"] = wrapper.key
        rec.info["carried"] = wrapper.carried
        rec.info["fresh_args"] = wrapper.fresh
        rec.info["devices"] = self.jax.device_count()
        if wrapper.specs is not None and not wrapper.kind.startswith("pmap"):
            with self.guard("step program"):
                _read_program(self, wrapper)
        if rec.counters.get("h2d_numpy_args") or rec.counters.get("h2d_guard_arrays"):
            rec.internal += 1
            try:
                rec.info["h2d"] = _measure_h2d(self.jax)
            finally:
                rec.internal -= 1
        if wrapper.specs is not None and wrapper.carried.get("bytes", 0):
            rec.internal += 1
            try:
                with _nnx_context(wrapper.fun):
                    lowered = wrapper.jitted.lower(*wrapper.specs[0], **wrapper.specs[1])
                infos = self.jax.tree_util.tree_leaves(lowered.args_info)
                donated = sum(_nbytes(a) for a in infos if getattr(a, "donated", False))
                rec.info["donated_bytes"] = donated
                if donated >= 0.5 * wrapper.carried["bytes"]:
                    return  # donated: no finding, so no need to compile (from cache, normally) for memory
                # Lowered.args_info is not the whole truth (a pmapped step marks only the first leaf of a
                # donated argument): what the executable aliases, per device, decides.
                mem = lowered.compile().memory_analysis()
                if mem is not None:
                    rec.info["memory"] = {k: int(getattr(mem, k)) for k in (
                        "argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes",
                        "temp_size_in_bytes")}
            except Exception as e:  # the report says what it could not learn
                if type(wrapper.jitted).__module__.startswith("flax") or "update context" in str(e):
                    # a Flax NNX transform (nnx.jit & co.) cannot be re-lowered from shapes outside its
                    # graph context: the donation is not checked, which is not a failure of the doctor
                    rec.info["donation_skipped"] = f"{type(e).__name__}: {e}"[:300]
                    return
                rec.info["donation_error"] = f"{type(e).__name__}: {e}"[:300]
            finally:
                rec.internal -= 1


def _read_program(self: JaxInstruments, wrapper: _Jitted) -> None:
    """The step's program, traced again from its argument shapes (JAX's caches answer: no new compile): a
    Python loop unrolled into it (its jaxpr) and its attention (its compiled HLO)."""
    from twinbench.doctor import program

    rec = self.rec
    trace = getattr(wrapper.jitted, "trace", None)
    if trace is None:
        return
    rec.internal += 1
    t0 = time.perf_counter()
    try:
        with _nnx_context(wrapper.fun):
            traced = trace(*wrapper.specs[0], **wrapper.specs[1])
            seq = program.tokens(traced.jaxpr)
            info: dict[str, Any] = {"eqns": len(seq), "backend": self.jax.default_backend()}
            info["repeat"] = program.find_repeat(seq)
            # the step's own backend compile(s), from JAX's monitoring events
            names = (f"jit({wrapper.name})", f"pjit({wrapper.name})", wrapper.name)
            info["compile_s"] = round(sum(n["s"] for n in rec.notes.get("compile", []) if n["fn"] in names), 4)
            t1 = time.perf_counter()
            lowered = traced.lower()
            if time.perf_counter() - t1 < LOWER_CACHED_S or info["compile_s"] < READ_COMPILE_MAX_S:
                info["attention"] = program.attention(lowered.compile().as_text())
            else:  # the lowering missed JAX's cache, so would the compile: not worth a second compile
                info["attention_skipped"] = "the step's program is not in JAX's cache"
        info["read_s"] = round(time.perf_counter() - t0, 4)  # the doctor's own time reading it back
        rec.info["step_program"] = info
    finally:
        rec.internal -= 1



def _nnx_context(fun: Any) -> Any:
    """The context a Flax NNX transform's inner function is traced in: ``nnx.jit`` (graph mode) merges its
    arguments back into objects inside ``nnx.update_context(tag)``, so re-lowering it from shapes (the
    donation check) needs that same context; for anything else, none."""
    tag = getattr(fun, "ctxtag", None)
    if tag is None or "flax" not in sys.modules or not type(fun).__module__.startswith("flax"):
        return contextlib.nullcontext()
    from flax import nnx

    return nnx.update_context(tag)


def _measure_h2d(jax: Any) -> dict[str, float]:
    """Host-to-device bandwidth (a 32 MiB copy, best of 3) and per-transfer latency (a 16-float copy)."""
    import numpy as np

    def best(x: Any) -> float:
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            jax.block_until_ready(jax.device_put(x))
            times.append(time.perf_counter() - t0)
        return min(times)

    big = np.ones(2**23, np.float32)  # 32 MiB: long enough that the copy, not the call, is timed
    latency = best(np.ones(16, np.float32))
    # The whole copy's time, latency included (subtracting it can leave ~0 s and an impossible bandwidth).
    return {"bytes_per_s": big.nbytes / max(best(big), 1e-6), "latency_s": latency}


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


def _describe(jax: Any, leaf: Any) -> dict[str, Any]:
    import numpy as np

    d: dict[str, Any] = {"shape": list(getattr(leaf, "shape", ())), "bytes": _nbytes(leaf)}
    if isinstance(leaf, np.ndarray):
        d.update(kind="numpy", devices=1, replicated=True)
    else:
        sharding = getattr(leaf, "sharding", None)
        n = len(sharding.device_set) if sharding is not None else 1
        d.update(kind="jax", devices=n, sharding=type(sharding).__name__,
                 replicated=bool(n == 1 or getattr(sharding, "is_fully_replicated", False)))
    return d


class _Jitted:
    """A jitted (or pmapped) function that counts its calls as step candidates; otherwise transparent."""

    def __init__(self, inst: JaxInstruments, jitted: Any, fun: Any, key: str, name: str, kind: str,
                 options: dict[str, Any]) -> None:
        self.inst, self.jitted, self.kind, self.options = inst, jitted, kind, options
        self.fun = fun
        self.key, self.name = f"{kind}:{key}", name
        self.rec_key = f"{kind}:{name}"  # same name and place = one candidate (a re-created jit too)
        self.ncalls = 0
        self.prev_out: list[Any] = []
        self.carried: dict[str, Any] = {}
        self.carried_out: set[int] = set()  # positions of the outputs that the next call takes back in
        self.fresh: list[dict[str, Any]] = []
        self.specs: tuple[tuple, dict] | None = None
        functools.update_wrapper(self, fun, updated=())

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["jitted"], name)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self if obj is None else types.MethodType(self, obj)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        t_enter = time.perf_counter()  # the doctor's own work below is part of the call, not between steps
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
        if inst.outer_start is not None and not self.kind.endswith("-lib"):
            inst.outer_jit = True  # nnx.jit's call: its own Python is the whole call less this one
        rec.step_call(key, self.kind, t_enter if inst.outer_start is None else inst.outer_start)
        index = rec.call_index(key)
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
        inst.inner_s += time.perf_counter() - t_enter  # the doctor's own work in this call is not nnx.jit's
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
        if nbytes > self.carried.get("bytes", -1):
            in_ids = {id(x) for x in leaves}
            self.carried_out = {i for i, x in enumerate(self.prev_out) if id(x) in in_ids}
            self.carried = {"leaves": len(carried), "bytes": nbytes,
                            "device_bytes": max(_device_bytes(jax, carried).values(), default=0)}
            if carried:
                self.specs = self._specs(args, kwargs)
        if self.ncalls == 2:
            fresh = [x for x in leaves if id(x) not in out_ids and getattr(x, "ndim", 0) >= 1]
            fresh.sort(key=_nbytes, reverse=True)
            self.fresh = [_describe(jax, x) for x in fresh[:4]]
