"""What explain says of one run or trace (:class:`Side`) and of the rows of a pair's gap (:class:`Row`), typed.

Each field is declared once here, with what it means; gap.py builds a side from a trace's breakdown (and the
record, or what ``twinbench doctor`` wrote beside the trace), causes.py, why.py, answer.py and the printing
read its attributes: a misspelled field fails in ``mypy``/at the first read, not as a None a cause never fires
on. ``explain --json`` and ``compare --explain``'s ``explain.json`` hold these as JSON (:mod:`.result`).
"""

from __future__ import annotations

from typing import Any

import msgspec

from twinbench.explain.doctor_timing import Conditions, Timing


class Rate(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """One phase/category's work and rates a step on one side (``ops.throughput``'s cell; a gap row's
    ``a_throughput``/``b_throughput``). A rate is None where no device could reach it or nothing was counted."""

    ms: float = 0.0  # the row's ms on the gap table's scale (shares of the measured step)
    raw_ms: float = 0.0  # the ops' own traced time, what the rates are over
    flops: float = 0.0
    bytes: float = 0.0
    opaque_ms: float = 0.0  # traced time of kernels whose work nobody counted (a Pallas custom call)
    tflops: float | None = None
    peak_share: float | None = None  # tflops over the side's measured matmul peak
    gbps: float | None = None  # memory-bound categories only


class Op(msgspec.Struct, kw_only=True, frozen=True):
    """One grouped op of a side (``ops.OpGroup.to_dict``): its phase and category, time and work a step, and
    its matmul shape where it has one (``key``: batch, m, k, n; ``trans``: the operands' layout)."""

    phase: str
    category: str
    name: str
    scope: str = ""
    ms: float = 0.0
    raw_ms: float = 0.0
    calls: float = 0.0
    flops: float = 0.0
    bytes: float = 0.0
    shape: str = ""
    key: list[int] = []
    trans: str = ""
    linearization: bool = False  # JAX: a forward op only the backward reads (moved to backward)
    shared: bool = False  # a forward op whose result the backward reads too
    where: str = ""  # JAX: the tail of the instruction's op_name


class Kernel(msgspec.Struct, kw_only=True, frozen=True):
    """One kernel or op as the trace named it (``breakdown.OpTime``), ms a step before any overlap scaling."""

    name: str
    category: str
    phase: str
    op: str = ""  # the framework op that launched it (aten op, XLA instruction)
    shapes: str = ""
    ms: float = 0.0
    count: int = 0


class Cut(msgspec.Struct, kw_only=True, frozen=True):
    """What a trace's step annotation spans (``breakdown.step_cut``)."""

    span_ms: float
    iteration_ms: float  # the median start-to-start time of the loop
    coverage: float  # span over iteration
    aligned: float = 0.0  # 1.0: the steps were re-cut start to start because the ops ran after the annotation


class Peak(msgspec.Struct, kw_only=True, frozen=True):
    """The matmul peak a side's rates are a share of: the record's measured one, or a datasheet's."""

    tflops: float | None = None
    measured_at: str | None = None
    age: str = ""  # how long before now it was measured ("3 h ago")
    source: str = ""  # where a peak that is not measured came from ("" for a measured one)


class Moved(msgspec.Struct, kw_only=True, frozen=True):
    """A set of ops said as one (JAX's forward-pass linearization, the forward results the backward reads)."""

    ms: float = 0.0
    ops: int = 0
    largest: list[str] = []


class Measured(msgspec.Struct, kw_only=True, frozen=True):
    """The part of a record's ``memory_breakdown`` (``measure.memory.Breakdown.to_dict``) the rows read; a
    breakdown with no ``parts`` (only its error) has none."""

    parts: dict[str, float] | None = None  # part -> bytes at the peak
    peak_bytes: float = 0
    unaccounted_bytes: float = 0  # the peak less the parts
    peak_source: str = ""  # what the peak was read from (the allocator, the program, the process's RSS)


class Side(msgspec.Struct, kw_only=True, frozen=True):
    """One explained run or trace: its step, its phases by the timing method and by the trace (on the measured
    step's scale), its cells (phase -> category -> ms), its ops and rates, and what decides whether a row of
    its may be named (noise, the doctor's clock, the evidence checks)."""

    run: str  # its label: ``torch/eager`` for a run, ``jax:folder/stem`` for a trace
    step_ms: float  # the measured step (a run) or the traced one (a trace file)
    traced_step_ms: float = 0.0  # the profiled step the shares came from
    timing: dict[str, float] = {}  # phase -> ms by the timing method, scaled to the measured step
    timing_raw: dict[str, float] = {}  # as timed, before that scaling
    timing_scale: float = 1.0
    timing_apart: dict[str, float] = {}  # phases whose two methods are over gap.APART times apart, and by how much
    trace: dict[str, float] = {}  # phase -> ms by the trace
    cells: dict[str, dict[str, float]] = {}  # phase -> category -> ms
    scopes: dict[str, dict[str, float]] = {}  # scope -> phase -> ms
    categorized_share: float = 1.0
    other: dict[str, float] = {}  # the largest uncategorized ops -> ms
    notes: list[str] = []
    source: str = ""
    device: str = ""  # "GPU", "TPU" or "CPU": where the ops ran
    idle: str = ""  # what rest / idle means for this trace
    device_name: str | None = None  # the run's device model (for its datasheet bound)
    cores: int | None = None
    programs: dict[str, int] = {}  # XLA programs besides the step's own -> their runs a step
    step_method: str = ""
    steps_traced: int = 0
    steps_used: int = 0
    kernels: list[Kernel] = []
    cut: Cut | None = None
    step_spread_ms: float = 0.0  # slowest less fastest attributed step that compiled nothing
    step_times_ms: list[float] = []  # those steps, ms each: the noise causes.noise measures
    compiles: int = 0  # compiles that started inside the attributed steps
    compiler: str = ""  # the fusing compiler whose kernels the trace holds ("XLA"; "" for torch's)
    ops: list[Op] = []
    throughput: dict[str, dict[str, Rate]] = {}  # phase -> category -> its work and rates
    linearization: Moved = Moved()
    shared_forward: Moved = Moved()
    warnings: list[str] = []  # the record's machine-busy warnings
    peak: Peak = Peak()
    impossible: list[str] = []  # rates no device reaches, withheld (causes.physical)
    run_id: str | None = None  # a measured run's id; None for a trace file
    trace_path: str | None = None
    #: the part of the record's memory breakdown explain reads (memory_rows.measured: parts, peak...)
    memory_breakdown: Measured | None = None
    busy: bool = False  # measured on a busy machine
    host_malloc: str | None = None
    glibc_tunables: str | None = None
    page_faults: str | None = None  # the step's page faults, said, where they cost
    recorded: Conditions | None = None  # a trace file: what twinbench doctor recorded beside it
    measured: Timing | None = None  # a trace file: the doctor's step without the profiler

    def phase_ms(self, phase: str) -> float:
        """A phase's ms by the trace (0 where it has none)."""
        return self.trace.get(phase, 0.0)

    def cell_ms(self, phase: str, category: str) -> float:
        """A phase / category's ms (0 where it has none)."""
        return self.cells.get(phase, {}).get(category, 0.0)


class Unreadable(msgspec.Struct, kw_only=True, frozen=True):
    """A run of ``compare --explain`` whose trace could not be read."""

    run: str
    error: str


class Split(msgspec.Struct, kw_only=True, frozen=True):
    """A compute row's B-A as work + peak + efficiency (why.split)."""

    work_ms: float
    peak_ms: float
    efficiency_ms: float


class Row(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One row of a pair's gap table: a phase (level 0) or a phase / category or scope (level 1). The rest is
    filled in by causes.mark (what may be named, its noise) and why.pair_extras (rates, split, timing B-A)."""

    row: str  # ``forward`` or ``forward / matmul``
    level: int
    a_ms: float
    b_ms: float
    diff_ms: float
    share: float  # of the whole gap
    uncertainty_ms: float | None = None  # K times its measured noise, where both sides' was measured
    named_ms: float | None = None  # the part of B-A that may be named (level 1)
    within_noise_ms: float | None = None  # the noise that withheld it
    fused_with: list[str] | None = None  # the rows of its phase the other side fused this work into
    timing_diff_ms: float | None = None  # the timing method's B-A (phases)
    a_throughput: Rate | None = None
    b_throughput: Rate | None = None
    split: Split | None = None

    @property
    def phase(self) -> str:
        return self.row.split(" / ")[0]

    @property
    def category(self) -> str:
        return self.row.split(" / ")[-1]

    @property
    def nameable_ms(self) -> float:
        """The part of the row a summary may name (``named_ms``), its whole B-A where none was marked."""
        return self.diff_ms if self.named_ms is None else self.named_ms


class Disagreement(msgspec.Struct, kw_only=True, frozen=True):
    """A phase whose B-A differs between the two methods (why.disagreements)."""

    phase: str
    timing_diff_ms: float
    trace_diff_ms: float


class GateFailure(msgspec.Struct, kw_only=True, frozen=True):
    """An evidence check that failed for a pair (causes.gates): its id and the fact that decides it."""

    check: str
    fact: str


class ShapeSide(msgspec.Struct, kw_only=True, frozen=True):
    ms: float = 0.0
    calls: float = 0.0
    tflops: float | None = None
    peak_share: float | None = None
    layout: str = ""


class ShapeRow(msgspec.Struct, kw_only=True, frozen=True):
    """One matmul shape of the pair (shapes.table): its phase, shape, each side's figures, matched or not."""

    phase: str
    key: list[int]
    shape: str
    matched: bool
    a: ShapeSide
    b: ShapeSide
    diff_ms: float


class MemoryRow(msgspec.Struct, kw_only=True, frozen=True):
    row: str
    a_bytes: int
    b_bytes: int
    diff_bytes: int
    share: float


class MemoryGap(msgspec.Struct, kw_only=True, frozen=True):
    """The two runs' memory breakdowns side by side (memory_rows.rows)."""

    a_peak_bytes: float
    b_peak_bytes: float
    gap_bytes: int
    a_source: str
    b_source: str
    rows: list[MemoryRow]
    largest: str


class Clock(msgspec.Struct, kw_only=True, frozen=True):
    """What the doctor's clock says of a pair where both sides carry its untraced step (causes.clock)."""

    gap_ms: float  # B-A without the profiler
    slower: str
    faster: str
    untraced_ms: dict[str, float]  # run -> its untraced step
    traced_gap_ms: float  # the gap the rows split
    compile_left_out: dict[str, float]  # run -> compile ms the clock's median leaves out
    profiler: dict[str, float]  # run -> traced over untraced, less 1
    floor_ms: float


def typed(value: Any, kind: Any) -> Any:
    """A reader's value (a dict, or already an object) as the typed ``kind`` (msgspec.convert)."""
    return msgspec.convert(value, kind, from_attributes=True)
