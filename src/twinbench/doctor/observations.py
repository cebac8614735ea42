"""What the findings read, declared: the observations (``summary.observations``, written as JSON by the script's
process) as typed structs (msgspec, as the record), instead of ``dict[str, Any]`` read with ``.get("...")``.

A key the findings misspell is an ``AttributeError`` (and a type checker's error), not a silent 0 that keeps a
finding from ever firing; a per-step counter is read through :meth:`Observations.per` and :data:`COUNTERS`, so a
misspelled counter raises too. The observations' JSON (the ``observations`` of ``--json``, of ``doctor.json``)
is unchanged: these structs read it, they do not write it, and every field has a default, so the observations of
an older doctor (fewer keys) still load. A key these structs do not declare fails the conversion (a test runs
every example script through it): whoever adds an observation declares it here.
"""

from __future__ import annotations

from typing import Any

import msgspec

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


class ReadCheck(Part):
    """``summary.read_check``: the host-read check's A/B (reads waited for, against reads answered a step late)."""
    waited_n: int = 0
    waited_ms: float | None = None
    waited_iqr_ms: float | None = None
    deferred_n: int = 0
    deferred_ms: float | None = None
    deferred_iqr_ms: float | None = None


class InputCheck(Part):
    """``summary.input_ab``: the input check's A/B; ``wall`` and ``cpu`` each the loop against the pre-built batch
    (``loop_ms``, ``loop_less_known_ms``, ``prebuilt_ms``, their samples, ``block_ms``)."""
    blocks: int = 0
    replays: int = 0
    iterations: int = 0
    wall: dict[str, Any] | None = None
    cpu: dict[str, Any] | None = None


class Machine(Struct):
    cores: int = 0
    others_cores: float | None = None  # cores other processes kept busy over the steady steps
    own_cores: float | None = None  # this process's CPU seconds a second
    window_s: float = 0.0
    page_faults_per_s: float | None = None
    kernel_cpu_share: float | None = None
    fault_us: float | None = None  # one fault's cost, measured after the run (run_doctor)


class Carried(Struct):
    leaves: int = 0
    bytes: int = 0
    device_bytes: int | None = None


class Memory(Struct):
    argument_size_in_bytes: int = 0
    output_size_in_bytes: int = 0
    alias_size_in_bytes: int = 0
    temp_size_in_bytes: int = 0


class StepProgram(Struct):
    eqns: int = 0
    backend: str = "?"
    repeat: dict[str, int] | None = None  # program.find_repeat
    compile_s: float = 0.0
    attention: dict[str, Any] | None = None  # program.attention
    attention_skipped: str | None = None
    read_s: float | None = None


class H2D(Struct):
    bytes_per_s: float | None = None
    latency_s: float = 0.0


class Info(Struct):
    """``Recorder.info``: what the instruments learnt about the script and its step."""
    threads: dict[str, int] = msgspec.field(default_factory=dict)
    backend: str | None = None
    devices: int = 1
    step_def: str | None = None
    carried: Carried = msgspec.field(default_factory=Carried)
    carried_args: list[str] = msgspec.field(default_factory=list)
    jit_options: dict[str, Any] = msgspec.field(default_factory=dict)
    jit_kind: str | None = None
    fresh_args: list[dict[str, Any]] = msgspec.field(default_factory=list)
    donated_bytes: int | None = None
    memory: Memory | None = None
    memory_capacity_bytes: int | None = None
    donation_skipped: str | None = None
    donation_error: str | None = None
    step_program: StepProgram | None = None
    skipped: dict[str, str] = msgspec.field(default_factory=dict)
    h2d: H2D | None = None
    eager_sources: dict[str, int] = msgspec.field(default_factory=dict)
    eager_step: dict[str, Any] | None = None
    jax_host_read_sites: dict[str, int] = msgspec.field(default_factory=dict)
    torch_host_read_sites: dict[str, Any] = msgspec.field(default_factory=dict)
    torch_loader_read_sites: dict[str, Any] = msgspec.field(default_factory=dict)
    torch_optimizers: dict[str, str] = msgspec.field(default_factory=dict)
    torch_graphs: int | None = None
    torch_graph_break_counts: dict[str, Any] = msgspec.field(default_factory=dict)
    cuda: bool = False
    nnx_node_args: list[str] = msgspec.field(default_factory=list)
    nnx_graph_leaves: int | None = None
    child_processes: dict[str, int] = msgspec.field(default_factory=dict)
    input_check_error: str | None = None
    trace: dict[str, Any] | None = None
    trace_error: str | None = None
    instrument_errors: list[str] = msgspec.field(default_factory=list)
    finalize_errors: list[str] = msgspec.field(default_factory=list)
    snapshot_error: str | None = None
    drain_error: str | None = None


class Observations(Struct):
    """``summary.observations``: everything ``findings.diagnose`` reads (see that function for each figure)."""
    frameworks: list[str] = msgspec.field(default_factory=list)
    frameworks_used: list[str] | None = None  # None: an older doctor's (every framework counted)
    python: dict[str, str] = msgspec.field(default_factory=dict)
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
    own_work: dict[str, float] = msgspec.field(default_factory=dict)
    read_check: ReadCheck | None = None
    input_check: InputCheck | None = None
    trace_timing: dict[str, Any] | None = None
    first_step_ms: float | None = None
    per_step: dict[str, float] = msgspec.field(default_factory=dict)
    counters: dict[str, float] = msgspec.field(default_factory=dict)
    seconds: dict[str, float] = msgspec.field(default_factory=dict)
    candidates: dict[str, int] = msgspec.field(default_factory=dict)
    notes: dict[str, list[dict[str, Any]]] = msgspec.field(default_factory=dict)
    info: Info = msgspec.field(default_factory=Info)
    compile_s: float = 0.0
    stopped_early: bool = False
    timed_out: bool = False
    killed: bool = False
    partial: bool = False  # read from the snapshot the run kept as it went: it ended before the doctor's own end
    died: str | None = None  # how a script that ended before its own end died ("killed by SIGSEGV")
    error: dict[str, Any] | None = None
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

    def noted(self, kind: str) -> list[dict[str, Any]]:
        """The notes of ``kind`` (all of them); a kind not in :data:`NOTES` raises."""
        if kind not in NOTES:
            raise KeyError(f"note kind {kind!r} is not one the instruments keep (observations.NOTES)")
        return self.notes.get(kind, [])


def typed(obs: Observations | dict[str, Any]) -> Observations:
    """The observations as :class:`Observations` (a dict, from JSON or ``summary.observations``, is converted: an
    undeclared key raises ``msgspec.ValidationError`` naming it)."""
    if isinstance(obs, Observations):
        return obs
    return msgspec.convert(obs, Observations, strict=False)
