"""Compilation events from the frameworks' own hooks: how many programs were built, and how long it took.

JAX: ``jax.monitoring`` duration events (tracing, lowering to MLIR, XLA backend compile) and the
persistent-cache hit events. PyTorch: dynamo's ``counters`` and its per-phase compile time metrics
(``torch._dynamo.utils.compilation_time_metrics``): the frame compiles (forward, AOTAutograd, Inductor)
and the backward graphs AOTAutograd compiles lazily at the first ``backward()``, so both frameworks'
figures cover forward and backward.
"""

from __future__ import annotations

import sys
from typing import Any, Protocol

JAX_TRACE = "/jax/core/compile/jaxpr_trace_duration"
JAX_LOWER = "/jax/core/compile/jaxpr_to_mlir_module_duration"
JAX_BACKEND = "/jax/core/compile/backend_compile_duration"
JAX_CACHE_HIT = "/jax/compilation_cache/cache_hits"
#: dynamo_timed keys of torch >= 2.6 that are never nested in one another: every dynamo frame compile (it
#: includes AOTAutograd's forward and, when the backward is not deferred, the backward, and Inductor beneath
#: them), and the lazy compile of a backward graph, run by autograd at the first backward() outside any
#: frame compile (a frame that calls backward() breaks the graph there). Their nested sub-timers
#: (compile_fx_inner, aot_trace_joint_graph, ...) are not added again.
TORCH_FRAME = "_compile.compile_inner"
TORCH_BACKWARD = "backward._backward_impl"


class CompileMonitor(Protocol):
    def count(self) -> int: ...  # programs compiled so far
    def seconds(self) -> float: ...  # time spent compiling so far
    def cache_hits(self) -> int: ...  # programs (or graphs) loaded from a persistent compilation cache


class JaxCompiles:
    """Counts XLA backend compilations and sums trace + lower + compile time (jax.monitoring)."""

    def __init__(self) -> None:
        import jax.monitoring

        self.n_backend = 0
        self.cache_hits_n = 0
        self.total_s = 0.0
        jax.monitoring.register_event_duration_secs_listener(self._on_duration)
        jax.monitoring.register_event_listener(self._on_event)

    def _on_duration(self, event: str, duration: float, **_: object) -> None:
        # JAX_BACKEND wraps compile_or_get_cached: it fires for a persistent-cache hit too, timing the load.
        if event in (JAX_TRACE, JAX_LOWER, JAX_BACKEND):
            self.total_s += duration
        if event == JAX_BACKEND:
            self.n_backend += 1

    def _on_event(self, event: str, **_: object) -> None:
        if event == JAX_CACHE_HIT:
            self.cache_hits_n += 1

    def count(self) -> int:
        # Every program built for a new key, whether XLA compiled it or it was loaded from the persistent
        # cache (the backend event covers both; cache_hits() says how many were loads).
        return self.n_backend

    def seconds(self) -> float:
        return self.total_s

    def cache_hits(self) -> int:
        return self.cache_hits_n


class TorchCompiles:
    """Counts graphs dynamo compiled (``counters['stats']['unique_graphs']``) and their compile time, forward
    and lazily compiled backward. Dynamo is read only once something imported it (``torch.compile`` does):
    an eager run compiles nothing and does not pay dynamo's import."""

    @property
    def _utils(self) -> Any:
        return sys.modules.get("torch._dynamo.utils")

    def count(self) -> int:
        u = self._utils
        return int(u.counters["stats"]["unique_graphs"]) if u else 0

    def seconds(self) -> float:
        """Frame compiles plus lazily compiled backward graphs (see TORCH_FRAME / TORCH_BACKWARD)."""
        u = self._utils
        metrics = u.compilation_time_metrics if u else {}
        return float(sum(metrics.get(TORCH_FRAME, ())) + sum(metrics.get(TORCH_BACKWARD, ())))

    def backward_seconds(self) -> float:
        """The lazily compiled backward graphs' share of :meth:`seconds`."""
        u = self._utils
        return float(sum(u.compilation_time_metrics.get(TORCH_BACKWARD, ()))) if u else 0.0

    def cache_hits(self) -> int:
        """Graphs loaded whole from the persistent caches: AOTAutograd's cache hits, one per graph (its forward
        and backward, or an inference graph), as :meth:`count` counts graphs. Inductor's FX graph cache hits
        are not added: one graph's forward and backward are two of them."""
        u = self._utils
        return int(u.counters["aot_autograd"]["autograd_cache_hit"]) if u else 0
