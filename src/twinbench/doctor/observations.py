"""What the findings read, declared: the observations (``summary.observations``, written as JSON by the script's
process) as typed structs (msgspec, as the record), read by attribute.

A key the findings misspell is an ``AttributeError`` (and a type checker's error), not a silent 0 that keeps a
finding from ever firing; a per-step counter is read through :meth:`Observations.per` and :data:`COUNTERS`, so a
misspelled counter raises too. The parts the script's process builds are the standard-library dataclasses of
:mod:`twinbench.doctor.observed` (that process may lack msgspec), fields of these Structs; this module re-exports
them. The observations' JSON (the ``observations`` of ``--json``, of ``doctor.json``) keeps its keys: every field
has a default, so the observations of an older doctor (fewer keys) still load, and the doctor writes them back
with :func:`msgspec.to_builtins` (a field an older doctor left out is written with its default). A key the
Structs do not declare fails the conversion (a test runs every example script through it): whoever adds an
observation declares it here or in ``observed``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from typing import Any

import msgspec

from twinbench.doctor.observed import (
    H2D,
    Attention,
    Carried,
    EagerFunction,
    EagerWork,
    FreshArg,
    Info,
    InputCheck,
    InputClock,
    Memory,
    Note,
    ReadCheck,
    ScriptError,
    StepProgram,
    ThreadCheck,
    TraceInfo,
    TraceTiming,
)

__all__ = ["COUNTERS", "H2D", "NOTES", "Attention", "Carried", "EagerFunction", "EagerWork", "FreshArg", "Info",
           "InputCheck", "InputClock", "Machine", "Medians", "Memory", "Note", "Observations", "OwnWork", "Python",
           "ReadCheck", "ScriptError", "Split", "StepProgram", "ThreadCheck", "TraceInfo", "TraceTiming", "typed"]

#: the per-step counters and second counters the instruments keep (``Recorder.count``, ``add_seconds``: a second
#: counter is read as ``name:s``)
COUNTERS = frozenset({
    "compiles", "cuda_syncs", "eager_ops", "h2d_guard", "h2d_guard_arrays", "h2d_numpy_args", "h2d_numpy_bytes",
    "jax_host_reads", "nnx_graph_calls", "optax_eager_updates", "pmap_calls", "torch_host_reads",
    "torch_loader_reads",
    "compile_s:s", "data_wait_s:s", "eager_s:s", "eager_cpu_s:s", "jax_host_read_blocked_s:s",
    "jax_host_read_span_s:s", "nnx_graph_s:s", "nnx_graph_cpu_s:s", "torch_loader_read_s:s", "torch_host_read_s:s",
    "proc_cpu_s:s", "loop_cpu_s:s", "jax_host_read_s:s", "to_forward_s:s", "to_forward_runq_s:s",
    "data_wait_runq_s:s",
})
#: the notes the instruments keep (``Recorder.note``)
NOTES = frozenset({"cache_miss", "compile", "recompile", "graph_break"})


class Struct(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A declared part of the observations: an undeclared key fails where the observations are read."""


class Part(msgspec.Struct, kw_only=True):
    """A part whose older versions had other keys (an older record's split): those are ignored, a misspelled read
    is still an ``AttributeError``."""


class Medians(Part):
    """The split's medians over every split iteration (one slow batch does not move them)."""
    it: float | None = None
    step: float | None = None
    data_raw: float | None = None
    host: float | None = None
    idle: float | None = None
    to_forward: float | None = None
    input_own: float | None = None


class Split(Part):
    """``Recorder.split``: one steady iteration cut into parts that add up to it (means over the central ones)."""
    iterations: int = 0
    iterations_split: int = 0
    iter_ms: float = 0.0
    step_ms: float = 0.0
    data_ms: float = 0.0
    host_ms: float = 0.0
    call_tail_ms: float = 0.0
    descheduled_ms: float = 0.0
    idle_ms: float | None = None
    idle_mean_ms: float | None = None
    to_forward_ms: float = 0.0
    between_ms: float | None = None
    between_cpu_ms: float | None = None
    medians: Medians | None = None  # an older record's split has none
    between_sites: dict[str, float] = msgspec.field(default_factory=dict)
    between_sampled_ms: float | None = None
    between_jax_share: float | None = None
    async_: bool = msgspec.field(default=False, name="async")


class Machine(Struct):
    """``Recorder.machine_load``: the machine's load over the steady steps."""
    cores: int = 0
    others_cores: float | None = None  # cores other processes kept busy over the steady steps
    own_cores: float | None = None  # this process's CPU seconds a second
    window_s: float = 0.0
    page_faults_per_s: float | None = None
    kernel_cpu_share: float | None = None
    fault_us: float | None = None  # one fault's cost, measured after the run (run_doctor)


class Python(Struct):
    """The interpreter the script ran under."""
    executable: str = ""
    version: str = ""


class OwnWork(Struct):
    """The doctor's own work in the loop's thread (``Recorder.own_work``)."""
    s: float = 0.0  # its seconds from the 2nd step call on
    left_out: int = 0  # the steady iterations that held it which the step time leaves out


class Observations(Struct):
    """``summary.observations``: everything ``findings.diagnose`` reads (see that function for each figure)."""
    frameworks: list[str] = msgspec.field(default_factory=list)
    frameworks_used: list[str] | None = None  # None: an older doctor's (every framework counted)
    python: Python | None = None
    python_given: bool = False
    wall_s: float = 0.0
    steps: int = 0
    step_fn: str | None = None
    step_kind: str | None = None
    step_signal: str | None = None
    split: Split | None = None
    steady_steps: int = 0
    steady_s: float = 0.0
    iter_ms: float | None = None
    iterations_used: int = 0
    step_ms: float | None = None
    step_timing: str | None = None
    dispatch_ms: float | None = None
    end_to_end_ms: float | None = None
    own_work: OwnWork | None = None
    read_check: ReadCheck | None = None
    input_check: InputCheck | None = None
    thread_check: ThreadCheck | None = None  # cpu-oversubscribed's A/B (thread_check.py)
    trace_timing: TraceTiming | None = None
    first_step_ms: float | None = None
    per_step: dict[str, float] = msgspec.field(default_factory=dict)
    counters: dict[str, int | float] = msgspec.field(default_factory=dict)  # counts stay integers
    seconds: dict[str, float] = msgspec.field(default_factory=dict)
    candidates: dict[str, int] = msgspec.field(default_factory=dict)
    notes: dict[str, list[Note]] = msgspec.field(default_factory=dict)  # kind (NOTES) -> its notes
    info: Info = msgspec.field(default_factory=Info)
    compile_s: float = 0.0
    stopped_early: bool = False
    timed_out: bool = False
    killed: bool = False
    partial: bool = False  # read from the snapshot the run kept as it went: it ended before the doctor's own end
    died: str | None = None  # how a script that ended before its own end died ("killed by SIGSEGV")
    error: ScriptError | None = None
    steady_from_t: float | None = None
    machine: Machine | None = None

    def per(self, key: str) -> float:
        """A counter's mean per steady step (0 where it never counted); a name not in :data:`COUNTERS` raises."""
        if key not in COUNTERS:
            raise KeyError(f"per-step counter {key!r} is not one the instruments keep (observations.COUNTERS)")
        return float(self.per_step.get(key, 0.0))

    def counted(self, key: str) -> float:
        """A counter's total over the run; a name not in :data:`COUNTERS` raises."""
        if key not in COUNTERS:
            raise KeyError(f"counter {key!r} is not one the instruments keep (observations.COUNTERS)")
        return float(self.counters.get(key, 0.0))

    def noted(self, kind: str) -> list[Note]:
        """The notes of ``kind`` (all of them); a kind not in :data:`NOTES` raises."""
        if kind not in NOTES:
            raise KeyError(f"note kind {kind!r} is not one the instruments keep (observations.NOTES)")
        return self.notes.get(kind, [])


def typed(obs: Observations | dict[str, Any]) -> Observations:  # a dict: JSON as read, validated here
    """The observations as :class:`Observations` (a dict, from JSON or ``summary.observations``, is converted: an
    undeclared key raises ``msgspec.ValidationError`` naming it)."""
    if isinstance(obs, Observations):
        return obs
    _declared(obs, Observations, "$")
    return msgspec.convert(obs, Observations, strict=False)


#: the parts whose older versions had other keys (ignored, as :class:`Part`'s are)
LENIENT = (ReadCheck, InputCheck, InputClock)


@functools.cache
def _hints(kind: type) -> dict[str, Any]:
    return typing.get_type_hints(kind)


def _declared(value: object, kind: Any, where: str) -> None:
    """Raise ``msgspec.ValidationError`` for a key ``value`` holds that a dataclass part of ``kind`` does not
    declare: msgspec ignores a dataclass's unknown keys, and a Struct's are its own to refuse."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        for a in args:
            _declared(value, a, where)
    elif origin is list and isinstance(value, list):
        for i, v in enumerate(value):
            _declared(v, args[0], f"{where}[{i}]")
    elif origin is dict and isinstance(value, dict):
        for k, v in value.items():
            _declared(v, args[1], f"{where}.{k}")
    elif isinstance(kind, type) and isinstance(value, dict) and (
            dataclasses.is_dataclass(kind) or issubclass(kind, msgspec.Struct)):
        hints = _hints(kind)
        unknown = next((k for k in value if k not in hints), None)
        if unknown is not None and dataclasses.is_dataclass(kind) and kind not in LENIENT:
            raise msgspec.ValidationError(f"Object contains unknown field `{unknown}` - at `{where}`")
        for k, v in value.items():
            if k in hints:
                _declared(v, hints[k], f"{where}.{k}")


# -- what the doctor adds to --trace's DIR/trace.json (trace.write_timing; explain.doctor_timing reads it) ------

class Load(msgspec.Struct, kw_only=True):
    """The load other processes put on the machine while the steps ran."""
    others_cores: float
    cores: int
    busy: bool  # the share the doctor warns at (findings.machine.BUSY_WARN_SHARE)


class CompileLog(msgspec.Struct, kw_only=True):
    """What compiled after step 1 (``trace.compile_log``), for explain's compilation row."""
    steps: int = 0
    compiles: int = 0  # backend compiles
    compile_s: float = 0.0
    retraces: int = 0  # the script's retraces (JAX's cache misses, Dynamo's recompiles)
    causes: dict[str, int] = msgspec.field(default_factory=dict)  # a retrace's cause -> how many
    shapes: list[str] = msgspec.field(default_factory=list)  # up to 3 shape changes, as JAX printed them
    finding: str = ""  # the finding that says the fix


class TraceTimes(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The keys the doctor adds to ``DIR/trace.json`` (beside the profiler's own: ``TraceInfo``), each written
    only where known: the step time with and without the profiler, and what decides whether a trace may name a
    cause (``trace.conditions``)."""
    traced_step_ms: float | None = None
    traced_steps: int | None = None
    untraced_step_ms: float | None = None
    untraced_steps: int | None = None
    untraced_spread: float | None = None  # how much the untraced steps move (explain's noise)
    load: Load | None = None
    step_kind: str | None = None
    eager_ops_per_step: float | None = None  # JAX primitives dispatched one by one outside jit per step
    compiles: CompileLog | None = None

    def merged(self, text: str) -> str:
        """``trace.json``'s text with these keys added (the profiler's own keys kept as written)."""
        info = json.loads(text)
        if not isinstance(info, dict):
            raise ValueError("not a JSON object")
        info.update(msgspec.to_builtins(self))
        return json.dumps(info, indent=1)
