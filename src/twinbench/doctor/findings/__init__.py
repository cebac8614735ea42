"""What is wrong, from the observations: one small function per finding id, each next to its threshold.

Each finding is one declaration: ``@finding(id, severity=, about=, threshold=, fix=, example=)`` on its check
(``base.finding``), in its module; ``IDS``, ``CHECKS``, ``diagnose``'s order, the examples test and the table of
docs/doctor-findings.md are read from that registry, and this package imports every module in it, so a new
finding touches its module and its example script. The ids are a contract (JSON output, docs, tests). Every
check reads the typed observations (``doctor.observations.Observations``: a dict is converted, an undeclared key
fails) and returns a :class:`Finding` or ``None``. Rates are per *steady* step:
counted between the start of step 2 and the start of the last step, so step 1 (compilation) and whatever
runs after the loop (evaluation, saving) do not count.

One module per kind of problem, as ``explain/`` is split: ``errors`` (the script failed), ``recompiles``,
``eager`` (work outside the compiled step), ``donation``, ``host_sync``, ``transfers`` (where the batch goes),
``input``, ``compilation``, ``overhead`` (Python around the step), ``attention``, ``machine``; ``base`` holds the
:class:`Finding` record and the per-step helpers they share. Everything is re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable

from twinbench.doctor.findings.attention import (
    ATTN_WARN_BYTES,
    jax_attention_kernel,
)
from twinbench.doctor.findings.base import (
    ABOUT,
    JAX_DOCS,
    MIN_STEADY_STEPS,
    REGISTRY,
    SEVERITIES,
    TORCH_DOCS,
    Finding,
    Obs,
    _step_location,
    rank,
)
from twinbench.doctor.findings.compilation import (
    COMPILE_MIN_S,
    COMPILE_SHARE,
    COMPILE_WARN_S,
    UNROLL_WARN_S,
    compile_dominates,
    jax_unrolled_loop,
)
from twinbench.doctor.findings.donation import (
    DONATION_MIN_BYTES,
    DONATION_SHARE,
    jax_no_donation,
)
from twinbench.doctor.findings.eager import (
    EAGER_OPS_WARN,
    EAGER_OPTAX_WARN,
    jax_eager_ops,
)
from twinbench.doctor.findings.errors import (
    ERROR_DOCS,
    MEANINGS,
    TRACER_ERRORS,
    jax_python_control_flow,
    script_error,
)
from twinbench.doctor.findings.host_sync import (
    HOST_SYNC_WAIT_SHARE,
    HOST_SYNC_WARN,
    LIB_CONVERSIONS,
    jax_host_sync,
    torch_host_sync,
)
from twinbench.doctor.findings.input import (
    INPUT_MIN_MS,
    INPUT_WAIT_SHARE,
    input_bound,
)
from twinbench.doctor.findings.machine import (
    BUSY_INFO_SHARE,
    BUSY_WARN_SHARE,
    cpu_oversubscribed,
    page_faults,
)
from twinbench.doctor.findings.overhead import (
    NNX_GRAPH_INFO_SHARE,
    NNX_GRAPH_WARN_LEAVES,
    NNX_GRAPH_WARN_SHARE,
    nnx_graph_overhead,
)
from twinbench.doctor.findings.recompiles import (
    LIBRARY_PATHS,
    RECOMPILE_FIX,
    RECOMPILE_WARN,
    jax_recompile,
    recompile_cause,
    torch_graph_break,
    torch_recompile,
)
from twinbench.doctor.findings.transfers import (
    TRANSFER_WARN_SHARE,
    jax_host_transfer,
    jax_pmap_legacy,
    jax_replicated_batch,
)
from twinbench.doctor.observations import typed


def _register_all() -> None:
    """Import every module of this package: each registers its findings where they are defined (a new module
    needs no line here)."""
    import importlib
    import pkgutil

    for m in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{m.name}")


_register_all()
#: derived from the registry (findings.base.finding): the script's failures, then speed, the machine, memory
KINDS = tuple(sorted(REGISTRY.values(), key=lambda k: ABOUT.index(k.about)))
IDS: tuple[str, ...] = tuple(k.id for k in KINDS)
CHECKS: tuple[Callable[[Obs], Finding | None], ...] = tuple(k.check for k in KINDS)


def diagnose(obs: Obs) -> list[Finding]:
    """Every finding for these observations, worst first; within a severity, speed before the machine's load
    before memory alone (each finding's ``about``)."""
    obs = typed(obs)  # read once as declared (JSON as read, a test's, is converted: an undeclared key fails here)
    found = [f for check in CHECKS if (f := check(obs)) is not None]
    where = _step_location(obs)
    for f in found:  # a finding about the step, with no line of its own: the step's definition
        if not f.location and where and REGISTRY[f.id].locate:
            f.location = where
    return sorted(found, key=lambda f: (SEVERITIES.index(f.severity), rank(REGISTRY[f.id].about)))


def serious(findings: list[Finding]) -> bool:
    """True when something of severity warning or worse was found (the doctor then exits 1)."""
    return any(f.severity in ("error", "warning") for f in findings)


__all__ = [
    "ATTN_WARN_BYTES",
    "BUSY_INFO_SHARE",
    "BUSY_WARN_SHARE",
    "CHECKS",
    "COMPILE_MIN_S",
    "COMPILE_SHARE",
    "COMPILE_WARN_S",
    "DONATION_MIN_BYTES",
    "DONATION_SHARE",
    "EAGER_OPS_WARN",
    "EAGER_OPTAX_WARN",
    "ERROR_DOCS",
    "HOST_SYNC_WAIT_SHARE",
    "HOST_SYNC_WARN",
    "IDS",
    "INPUT_MIN_MS",
    "INPUT_WAIT_SHARE",
    "JAX_DOCS",
    "KINDS",
    "LIBRARY_PATHS",
    "LIB_CONVERSIONS",
    "MEANINGS",
    "MIN_STEADY_STEPS",
    "NNX_GRAPH_INFO_SHARE",
    "NNX_GRAPH_WARN_LEAVES",
    "NNX_GRAPH_WARN_SHARE",
    "RECOMPILE_FIX",
    "RECOMPILE_WARN",
    "REGISTRY",
    "SEVERITIES",
    "TORCH_DOCS",
    "TRACER_ERRORS",
    "TRANSFER_WARN_SHARE",
    "UNROLL_WARN_S",
    "Finding",
    "Obs",
    "compile_dominates",
    "cpu_oversubscribed",
    "diagnose",
    "input_bound",
    "jax_attention_kernel",
    "jax_eager_ops",
    "jax_host_sync",
    "jax_host_transfer",
    "jax_no_donation",
    "jax_pmap_legacy",
    "jax_python_control_flow",
    "jax_recompile",
    "jax_replicated_batch",
    "jax_unrolled_loop",
    "nnx_graph_overhead",
    "page_faults",
    "recompile_cause",
    "script_error",
    "serious",
    "torch_graph_break",
    "torch_host_sync",
    "torch_recompile",
]
