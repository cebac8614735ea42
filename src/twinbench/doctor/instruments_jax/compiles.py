"""Compilation: JAX's monitoring duration events (trace, lower, backend compile) and
``jax_explain_cache_misses`` (why a function was traced again), captured through ``logging``."""

from __future__ import annotations

import logging
from typing import Any

from twinbench.doctor.instruments_jax.common import Hooks, Instruments
from twinbench.doctor.recorder import Recorder
from twinbench.measure.compiles import JAX_BACKEND, JAX_LOWER, JAX_TRACE

CACHE_MISS_LOGGERS = ("jax._src.interpreters.partial_eval", "jax._src.pjit")


class _CacheMissFilter(logging.Filter):
    """Keeps ``jax_explain_cache_misses`` messages for the report instead of printing them."""

    def __init__(self, rec: Recorder, inst: Instruments) -> None:
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


class CompileHooks(Hooks):
    """Counts compilations and their seconds."""

    # -- compilation -----------------------------------------------------------------------------------
    def _on_duration(self, event: str, duration: float, **kw: Any) -> None:
        if self.rec.internal or event not in (JAX_TRACE, JAX_LOWER, JAX_BACKEND):
            return
        self.rec.add_seconds("compile_s", duration)
        if event == JAX_BACKEND:
            self.rec.count("compiles")
            self.rec.note("compile", fn=str(kw.get("fun_name", "?")), s=round(duration, 4))
