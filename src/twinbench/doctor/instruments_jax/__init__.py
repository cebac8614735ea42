"""JAX instruments: record what a training script does, through JAX's own hooks where it has them.

Official hooks: ``jax.monitoring`` duration events (trace, lower, backend compile; each names its function),
``jax_explain_cache_misses`` (why a function was traced again, captured through ``logging``), the transfer
guard in ``log`` mode (implicit host-to-device copies; written by XLA's C++ logger to fd 2, read back by
``StderrTee``), ``Lowered.args_info`` (which arguments are donated) and ``Compiled.memory_analysis()``,
``Array.sharding``. Where JAX has no hook, thin wrappers: ``jax.jit``/``jax.pmap`` (count calls to find the
step), ``jax.Array`` conversion methods (host reads: ``float``, ``.item()``, printing), the eager primitive
dispatch (op-by-op work outside ``jit``) and Optax's ``update`` (the optimizer run outside ``jit``).
Everything here only records into a :class:`Recorder`; nothing here decides what is wrong.

One module per signal: ``compiles`` (monitoring events, cache misses), ``steps`` (jit/pmap/grad wrappers,
NNX calls), ``host_reads``, ``eager`` (op-by-op work, eager Optax), ``transfers`` (the transfer guard,
copy bandwidth), ``facts`` (donation and the step's program, at the end); ``common`` the plumbing they share.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter
from collections.abc import Callable

from twinbench.doctor.instruments_jax.compiles import CACHE_MISS_LOGGERS, CompileHooks, _CacheMissFilter
from twinbench.doctor.instruments_jax.eager import EagerHooks
from twinbench.doctor.instruments_jax.eager_step import EagerStep
from twinbench.doctor.instruments_jax.facts import StepFacts
from twinbench.doctor.instruments_jax.host_reads import HostReads
from twinbench.doctor.instruments_jax.input_check import InputCheck
from twinbench.doctor.instruments_jax.steps import StepHooks, _Jitted
from twinbench.doctor.instruments_jax.transfers import StderrTee
from twinbench.doctor.ready import ReadyWatcher
from twinbench.doctor.recorder import Recorder


class JaxInstruments(CompileHooks, StepHooks, HostReads, EagerHooks, StepFacts, InputCheck):
    """Installs every JAX hook on construction; ``uninstall()`` puts JAX back as it was."""

    def __init__(self, rec: Recorder, capture_stderr: bool = False) -> None:
        import jax
        import jax.monitoring

        self.rec = rec
        self.jax = jax
        self.undo: list[Callable[[], None]] = []
        self.wrappers: dict[str, _Jitted] = {}
        self.eager_sources: Counter[str] = Counter()
        self.eager_step = EagerStep()  # the user's function an eager step runs in (jax-eager-ops's fix)
        self.read_sites: Counter[str] = Counter()
        self.in_optax = False
        self.call_depth, self.call_missed = 0, False  # inside a watched jitted call; a cache miss seen in it
        self.outer_start: float | None = None  # when the user called an NNX transform that wraps a jit
        self.inner_s = 0.0  # the time in the jit it called
        self.inner_cpu = 0.0  # ... and the loop thread's CPU time in it
        self.outer_call: tuple[str, int] | None = None  # that jit's step candidate and call index, once called
        self.flax_patched = False
        self.op_depth = 0  # > 0 inside an array operator counted as one eager op
        self.eager_depth = 0  # > 0 inside timed eager work (eager_s counts the outermost level only)
        self.watcher = ReadyWatcher(rec)  # when each step's outputs are ready (the loop is not stalled)
        rec.drain = self._drain
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

    def _drain(self) -> None:
        """Wait for every array alive now (the steps dispatched so far)."""
        for arr in self.jax.live_arrays():
            try:
                arr.block_until_ready()
            except Exception:  # deleted (donated) meanwhile
                continue

    def uninstall(self) -> None:
        self.undo_all()
        self.watcher.close()
        if self.tee is not None:
            self.tee.close()
            self.tee = None
