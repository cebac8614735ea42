"""The sections of a record (msgspec structs): what a run was, the conditions it ran in, what it measured, and
one section per optional analysis. :class:`twinbench.record.Record` holds one of each.

A field keeps the name it had in the flat records of schema version 1 (``step_ms`` is ``timing.step_ms``),
except where the section already says it (``trace_path`` is ``trace.path``): :data:`FLAT` maps every flat
name to its section and field, which is how a flat record migrates on read (``record.from_flat``) and how
the flat view (``Record.flat``, ``compare --json``) is made.
"""

from __future__ import annotations

from typing import Any

import msgspec

from twinbench.config import Identity
from twinbench.spec import IDENTITY, RunSpec
from twinbench.spec_sections import flat_spec


class Section(msgspec.Struct, kw_only=True, omit_defaults=False):
    """A part of a record; every field has a default, so a record of an earlier version lacking it loads."""


class Run(Section):
    """What was run: the spec's identifying fields (the whole spec is ``Record.spec``)."""

    framework: str
    strategy: str
    preset: str | None = None
    task: str = "lm"
    run_id: str = ""
    config_id: str = ""  # the run_id of its configuration, shared by its repeats
    repeat: int = 0  # compare --repeats N: which repeat of its configuration this run is (0-based)
    n_params: int | None = None
    # the shape (None: not recorded, in a hand-made record or one of an older twinbench; the spec may say)
    batch: int | None = None
    seq: int | None = None
    layers: int | None = None
    d_model: int | None = None
    heads: int | None = None
    vocab: int | None = None
    context: int | None = None
    steps: int | None = None
    warmup: int | None = None
    steps_per_call: int = 1  # scan-steps: K steps per call; step times are call time / K
    precision: str | None = None
    attention_impl: str = "default"  # the twins' attention formulation (models/options.py ATTENTION_IMPLS)
    compile_cache: str = "cold"
    device: str | None = None
    device_count: int = 1  # the devices the run used
    devices_visible: int | None = None  # the devices the process saw


class Conditions(Section):
    """The conditions of the measurement: the machine, its load, the settings the frameworks ran under."""

    threads: int = 0
    cpu_count: int | None = None  # cores available to the run (the runner's CPU affinity)
    host_cpu: str | None = None  # the host's CPU model and instruction set (measure/host.py)
    platform: str | None = None
    versions: dict[str, str] = msgspec.field(default_factory=dict)
    matmul_precision: str | None = None
    attention_kernel: str | None = None  # the twins' attention: torch SDPA's kernel, JAX's implementation
    xla_flags: str | None = None  # JAX runs: the XLA_FLAGS the run used (xla_flags.py)
    glibc_tunables: str | None = None  # the host allocator setting the run had (host_malloc.py)
    load_avg_1m: float | None = None  # os.getloadavg()[0] right before the worker started
    load_avg_1m_external: float | None = None  # load_avg_1m less what twinbench's own ended runs still add
    # measured during the timed steps (measure/interference.py): cores other processes kept busy
    interference_cores: float | None = None
    cpu_busy_per_core: dict[str, float | None] = msgspec.field(default_factory=dict)
    interference_window_s: float | None = None
    # the run's own process over its steady steps (measure/page_faults.py)
    page_faults_per_step: float | None = None
    kernel_cpu_share: float | None = None
    fault_cpu_share: float | None = None  # the faults a step times one fault's measured cost, of the same CPU time
    device_shared: int | None = None  # other processes on the run's GPU(s) around its timed steps (NVML)


class Timing(Section):
    """The steps' times: the first step (with its compile), the steady ones."""

    first_step_s: float | None = None
    step_ms: float | None = None  # median steady-state step
    step_ms_p10: float | None = None
    step_ms_p90: float | None = None
    step_ms_mean: float | None = None
    step_ms_async: float | None = None  # the steady steps again unsynchronised (sync at the ends only)
    step_times_ms: list[float] = msgspec.field(default_factory=list)  # every steady step (scan-steps: /K)
    wall_s: float | None = None


class Speed(Section):
    """Throughput and FLOPs, and the matmul peak the MFU is measured against (measure/peak.py)."""

    tokens_per_s: float | None = None
    flops_per_token: int | float | None = None
    flops_convention: str | None = None  # how FLOPs were counted (a user's model: models/family.py)
    achieved_tflops: float | None = None
    peak_tflops: float | None = None
    mfu: float | None = None
    peak_tflops_datasheet: float | None = None
    mfu_datasheet: float | None = None
    peak_measured_at: str | None = None  # ISO time (UTC) the peak was measured
    peak_spread: float | None = None  # max/min - 1 over the peak's timed repeats
    peak_load_per_core: float | None = None  # load per core while the peak was measured
    peak_device_shared: int | None = None  # other processes on the GPU while the peak was measured (NVML)


class Compile(Section):
    """Compilation: the time, the programs compiled, the persistent cache's hits."""

    compile_s: float | None = None
    compiles_during_steps: int | None = None
    compiles_total: int | None = None
    compiles_in_loop: int | None = None  # programs compiled during the training steps, the first included
    compile_cache_hits: int | None = None  # programs loaded from the persistent cache / FX-graph cache hits


class Memory(Section):
    """Peak memory, where it went (measure/memory.py), and the state one device holds (many devices)."""

    peak_mem_bytes: int | None = None
    peak_mem_source: str | None = None
    breakdown: dict[str, Any] = msgspec.field(default_factory=dict)  # parts, unaccounted, the preflight
    state_bytes_per_device: int | None = None


class Input(Section):
    """The input pipeline and variable-length text: waiting for batches, padding."""

    input_wait_ms: float | None = None  # median time a steady step waited for its batch
    input_stall_pct: float | None = None  # steady-state waiting share of step time
    pad_pct: float | None = None  # share of processed tokens that are padding, whole run
    real_tokens_per_s: float | None = None  # steady state, counting only real (non-pad) tokens
    distinct_lengths: int | None = None  # distinct padded batch lengths the run fed the model


class Loss(Section):
    """The training's outcome: losses, and held-out accuracy (task "classify")."""

    loss_first: float | None = None
    loss_last: float | None = None
    losses: list[float] = msgspec.field(default_factory=list)
    accuracy_first: float | None = None
    accuracy_last: float | None = None


class Trace(Section):
    """--trace DIR: a profiler trace of a few steps after the measured ones."""

    path: str | None = None
    error: str | None = None


class Explain(Section):
    """--explain: the step's phases by timing and the JAX step's HLO text (twinbench/explain)."""

    timing: dict[str, float | None] = msgspec.field(default_factory=dict)
    hlo_path: str | None = None
    error: str | None = None


class Launch(Section):
    """--launcher local|slurm (launch/): the job a run was, and its state when the scheduler ended it."""

    launcher: str | None = None
    job_id: str | None = None
    job_nodes: list[str] = msgspec.field(default_factory=list)
    launcher_state: str | None = None


class Outputs(Section):
    """What a run left beside its record: the trained weights (--save-weights)."""

    weights_path: str | None = None


class Analysis(msgspec.Struct, kw_only=True, omit_defaults=False):
    """An optional analysis a record carries whole; every field has a default, so the ``{}`` of a run without it
    (and a record of an earlier version) loads, and such an empty one is written back as ``{}``."""

    def __bool__(self) -> bool:
        return self != type(self)()


class Placement(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """One array of a sharding report: its partition spec and bytes per device (distributed/sharding_report.py)."""

    name: str
    shape: list[int]
    dtype: str
    spec: str  # JAX's PartitionSpec, torch's DTensor placements, or how DDP replicates it
    bytes: int
    bytes_per_device: int
    devices: int
    sharded: bool  # a device holds less than the whole array
    #: (device label, [(start, stop) per dimension]) of every block: the arrays ``--show-sharding`` draws
    layout: list[tuple[str, list[tuple[int, int]]]] | None = None


class PlacementGroup(msgspec.Struct, kw_only=True, frozen=True):
    """The parameters or the optimizer state of a sharding report: totals and how often each spec occurs."""

    arrays: int = 0
    bytes: int = 0
    bytes_per_device: int = 0
    specs: dict[str, int] = msgspec.field(default_factory=dict)
    replicated: list[str] = msgspec.field(default_factory=list)  # names of arrays every device holds whole
    entries: list[Placement] = msgspec.field(default_factory=list)


class Sharding(Analysis):
    """Where every array of a multi-device run lives (distributed/sharding_report.py ``build``)."""

    kind: str = ""  # what the strategy means to do: dp, fsdp, pmap, ddp...
    mesh: str = ""
    device_count: int = 0
    batch: list[Placement] = msgspec.field(default_factory=list)
    params: PlacementGroup = msgspec.field(default_factory=PlacementGroup)
    opt_state: PlacementGroup = msgspec.field(default_factory=PlacementGroup)
    state_bytes_per_device: int = 0  # params + optimizer state one device holds
    state_bytes_total: int = 0
    drawn: list[Placement] = msgspec.field(default_factory=list)  # the arrays with their layout
    replicas_max_abs_diff: float | None = None  # copies of the same block that disagree after the run


class Tolerances(msgspec.Struct, kw_only=True, frozen=True):
    """The parity check's tolerances (byo/parity.py)."""

    loss_rel: float = 0.0
    grad_rel: float = 0.0
    steps_abs: float = 0.0


class Trajectory(msgspec.Struct, kw_only=True, frozen=True):
    """A user-model run's losses against torch eager's, step by step (byo/run.py ``trajectory``)."""

    vs: str = "torch eager"
    steps: int = 0
    first_rel: float = 0.0
    max_rel: float = 0.0
    tolerance: float = 0.0
    ok: bool = True


class Parity(Analysis, omit_defaults=True):
    """The user's JAX port against their torch module (byo/parity.py), and the run's loss trajectory."""

    loss_torch: float | None = None
    loss_jax: float | None = None
    loss_rel: float | None = None
    grad_rel: float | None = None
    grad_worst: list[tuple[str, float]] = msgspec.field(default_factory=list)  # the leaves that differ most
    losses_torch: list[float] = msgspec.field(default_factory=list)
    losses_jax: list[float] = msgspec.field(default_factory=list)
    steps_abs: float | None = None
    steps: int | None = None
    tolerances: Tolerances | None = None
    ok: bool | None = None  # None: the port's check did not run (a trajectory alone)
    trajectory: Trajectory | None = None

    def failed(self) -> bool:
        """The port failed its check, or the run's losses left torch eager's."""
        return self.ok is False or (self.trajectory is not None and not self.trajectory.ok)


#: section name -> its struct, in the order a record holds them
SECTIONS: dict[str, type[Section]] = {
    "run": Run, "conditions": Conditions, "timing": Timing, "speed": Speed, "compile": Compile,
    "memory": Memory, "input": Input, "loss": Loss, "trace": Trace, "explain": Explain, "launch": Launch,
    "outputs": Outputs,
}
#: the opaque analyses a record carries whole, each a section of its own: sharding (distributed/
#: sharding_report.py), parity (byo/parity.py), doctor (the doctor's findings over a user's run)
OPAQUE = ("sharding", "parity", "doctor")
#: of those, the typed ones (an empty one is written ``{}``)
ANALYSES = ("sharding", "parity")
#: flat names (schema version 1) that a section holds under a shorter name
RENAMED = {"trace_path": ("trace", "path"), "trace_error": ("trace", "error"),
           "explain_timing": ("explain", "timing"), "explain_hlo_path": ("explain", "hlo_path"),
           "explain_error": ("explain", "error"), "memory_breakdown": ("memory", "breakdown")}


def _flat_names() -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    for section, cls in SECTIONS.items():
        for name in cls.__struct_fields__:
            flat = next((k for k, v in RENAMED.items() if v == (section, name)), name)
            out[flat] = (section, name)
    return out


#: every flat (schema version 1) field name held in a section -> (section, field)
FLAT: dict[str, tuple[str, str]] = _flat_names()

def _plain(v: Any) -> Any:
    """A value msgspec does not encode as it is, as the plain JSON value it stands for: a number or string of a
    library's own type (numpy's float64, torch's version string)."""
    for t in (bool, int, float, str):
        if isinstance(v, t):
            return t(v)
    if hasattr(v, "item"):  # a numpy scalar
        return v.item()
    raise TypeError(f"a record holds a {type(v).__name__}, which is no JSON value")


#: The version of the record's layout (``schema_version``): raised when a field changes its meaning, type or
#: place, so a reader can tell which fields a record may carry; docs/record.schema.json is this version's
#: schema. 0: records before the field existed; 1: flat; 2: in sections.
SCHEMA_VERSION = 2
#: Spec fields never used to tell runs apart: those that do not identify a run (where things live, what runs after
#: the measured steps: their declared identity), and the framework and strategy, which the label's name says.
NOT_LABELS = {"framework", "strategy", "spec", *(k for k, kind in IDENTITY.items() if kind is Identity.NONE)}


class Record(msgspec.Struct, kw_only=True):
    """One run: a line of results.jsonl. A failed run is a record too, with ``status == "failed"``, the
    reason in ``error`` and the measured fields ``None``."""

    schema_version: int = SCHEMA_VERSION
    status: str  # "ok" | "failed" | "skipped" | "planned"
    error: str | None = None
    warnings: list[str] = msgspec.field(default_factory=list)
    run: Run
    conditions: Conditions = msgspec.field(default_factory=Conditions)
    timing: Timing = msgspec.field(default_factory=Timing)
    speed: Speed = msgspec.field(default_factory=Speed)
    compile: Compile = msgspec.field(default_factory=Compile)
    memory: Memory = msgspec.field(default_factory=Memory)
    input: Input = msgspec.field(default_factory=Input)
    loss: Loss = msgspec.field(default_factory=Loss)
    trace: Trace = msgspec.field(default_factory=Trace)
    explain: Explain = msgspec.field(default_factory=Explain)
    launch: Launch = msgspec.field(default_factory=Launch)
    outputs: Outputs = msgspec.field(default_factory=Outputs)
    sharding: Sharding = msgspec.field(default_factory=Sharding)  # distributed/sharding_report.py build()
    parity: Parity = msgspec.field(default_factory=Parity)  # byo: the port's parity check
    # byo: the doctor's report over a JAX run (doctor/report.py to_json), carried whole: its observations are the
    # doctor's own, free-form here (byo/plan.py decodes the part it prints)
    doctor: dict[str, Any] = msgspec.field(default_factory=dict)
    spec: dict[str, Any] = msgspec.field(default_factory=dict)  # the RunSpec's dict (spec.py to_dict)

    # -- the record as JSON ---------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The record as it is written: sections of plain JSON values (an analysis the run did not make: ``{}``)."""
        out = msgspec.to_builtins(self, enc_hook=_plain)
        return out | {k: out[k] if getattr(self, k) else {} for k in ANALYSES}

    def flat(self) -> dict[str, Any]:
        """The record in the flat layout of schema version 1 (every field at the top level, under its flat
        name): what ``compare --json`` writes."""
        out: dict[str, Any] = {"status": self.status, "error": self.error}
        for name, (section, field) in FLAT.items():
            out[name] = getattr(getattr(self, section), field)
        whole = self.to_dict()
        return out | {"warnings": self.warnings, **{k: whole[k] for k in OPAQUE}, "spec": self.spec,
                      "schema_version": self.schema_version}

    @classmethod
    def from_flat(cls, d: dict[str, Any]) -> Record:
        """A record from the flat layout (schema versions 0 and 1; ``for_spec``'s keywords): each field
        into its section; fields no section names are left out. The values are taken as they are (the loader,
        ``record.read_records``, checks them first)."""
        parts: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
        for name, v in d.items():
            where = FLAT.get(name)
            if where is not None:
                parts[where[0]][where[1]] = v
        top = {k: d[k] for k in ("status", "error", "warnings", *OPAQUE, "spec") if k in d}
        return msgspec.convert(top | {"run": parts.pop("run"), **parts, "schema_version": SCHEMA_VERSION}, cls)

    # -- what the commands ask of a record ------------------------------------------------------------------
    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def usable(self) -> bool:
        """An ok run with its first step and steady step time measured (a record without them, hand-made or of
        an older twinbench, has no total time, no curve, no break-even)."""
        return self.ok and self.timing.step_ms is not None and self.timing.first_step_s is not None

    def run_spec(self) -> RunSpec | None:
        """The record's spec decoded (either layout: sections, or the flat form of earlier records; a field it
        lacks, made before the field existed, has its declared default); None for a record without one, or whose
        spec is no spec (a hand-made record, a foreign one: a record is data)."""
        if not isinstance(self.spec, dict) or not self.spec:
            return None
        try:
            return RunSpec.from_dict(self.spec)
        except (TypeError, ValueError, KeyError, AttributeError):
            return None

    def field(self, name: str) -> Any:
        """A field by its flat name (``step_ms``, ``platform``); None for a name no section holds."""
        where = FLAT.get(name)
        return getattr(getattr(self, where[0]), where[1]) if where else None

    def value(self, key: str) -> Any:
        """A run-spec field of a record: a record field (by its flat name), else the spec's model/train/
        top-level field; None when neither has it."""
        where = FLAT.get(key)
        if where is not None and key not in NOT_LABELS:
            v = getattr(getattr(self, where[0]), where[1])
            if v is not None:
                return v
        spec = flat_spec(self.spec)  # a spec of either layout (flat before the sections, or in sections)
        for part in (spec.get("model") or {}, spec.get("train") or {}, spec):
            if isinstance(part, dict) and key in part:
                return part[key]
        return None

    def label(self, vary: list[str] | tuple[str, ...] = (), *, warm: bool = False) -> str:
        """``torch/compile``, with the fields that vary between the runs shown (``varying``): ``layers=4 warm``;
        ``warm``: a run measured on a warm compile cache says so even where the cache does not vary."""
        extra = [str(self.value(k)) if k == "compile_cache" else f"{k}={self.value(k)}" for k in vary]
        if warm and "compile_cache" not in vary and self.run.compile_cache == "warm":
            extra.append("warm")
        return " ".join([f"{self.run.framework}/{self.run.strategy}", *extra])


def varying(records: list[Record], keys: tuple[str, ...] | None = None) -> list[str]:
    """The fields whose values differ between the runs: by default the spec's fields and the cache state (a
    sweep's axes, ``--cache both``); else ``keys``. A field missing from some records (written by an older
    twinbench) does not tell runs apart."""
    if keys is None:
        found: list[str] = []
        for r in records:
            spec = flat_spec(r.spec)
            for k in [*(spec.get("model") or {}), *(spec.get("train") or {}), *spec]:
                if k not in NOT_LABELS and k not in ("model", "train", "precision") and k not in found:
                    found.append(k)  # precision: +bf16 says it
        if "compile_cache" not in found:
            found.append("compile_cache")
        keys = tuple(found)
    return [k for k in keys if len({repr(v) for r in records if (v := r.value(k)) is not None}) > 1]
