"""What ``twinbench explain --json`` and ``compare --explain`` write (``explain.json``), typed and versioned.

``schema_version`` says the layout, as the record's does: files written before it was added (version 0) have
the same fields without it, and still read; ``compare --explain``'s file was a bare list of sides then, and
is ``{"schema_version": 1, "runs": [...], "unreadable": [...]}`` now. A file of a later version is refused
in one line (it may have changed a field's meaning). The files are data: decoded, never executed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from twinbench.explain.answer import Answer
from twinbench.explain.side import Disagreement, GateFailure, MemoryGap, Row, ShapeRow, Side, Unreadable

#: explain.json's layout: 1 added ``schema_version`` itself and compare --explain's object form
SCHEMA_VERSION = 1
MAX_BYTES = 256 << 20  # an explanation with every op of two long traces is a few MB


class Tried(msgspec.Struct, kw_only=True, frozen=True):
    """``--try``: one side run again as it was and with one option, and the rows that moved (try_flag.run)."""

    tried: str = msgspec.field(name="try")  # the --try argument as given
    label: str
    base: str  # the side's run
    base_step_ms: float
    step_ms: float
    base_p10_p90: list[float] | None = None
    p10_p90: list[float] | None = None
    rows: list[Row] = []
    moved: list[Row] = []
    shapes: list[ShapeRow] = []
    results: str = ""  # the folder its two runs were written to
    warnings: list[str] = []
    load_avg_1m: list[float | None] = []


class Growth(msgspec.Struct, kw_only=True, frozen=True):
    """One count of the compiled step's instructions that grows faster than the layer count (depth.growth)."""

    phase: str
    category: str
    opcode: str
    depths: list[int]
    counts: list[int]
    per_layer: list[float]
    excess: float  # the deeper count beyond the shallower one scaled linearly


class Depth(msgspec.Struct, kw_only=True, frozen=True):
    """``--depths``: one JAX side compiled at other layer counts (depth.for_pair)."""

    run: str
    growth: list[Growth]
    sentence: str


class Explained(msgspec.Struct, kw_only=True):
    """One trace's explanation (``a`` only), or a pair's: both sides, the gap table and what it names. ``--try``
    and ``--depths`` add theirs after the pair is explained."""

    schema_version: int = 0  # 0: written before the field was (the same layout); written as SCHEMA_VERSION
    a: Side
    b: Side | None = None
    gap_ms: float = 0.0
    rows: list[Row] = []
    largest: Row | None = None
    summary: str = ""
    shapes: list[ShapeRow] = []
    memory: MemoryGap | None = None
    disagreements: list[Disagreement] = []
    why: list[str] = []
    busy: list[str] = []  # the sides measured on a busy machine
    gates: list[GateFailure] = []  # the evidence checks that failed: no row named
    noise_ms: float | None = None  # the whole gap's measured uncertainty
    answer: Answer | None = None  # the doctor's findings joined with the gap (explain TRACE TRACE)
    #: the two runs' specs (``RunSpec.to_dict``, its own versioned form, read back by ``RunSpec.from_dict``)
    specs: list[dict[str, Any]] = []
    tries: list[Tried] = []
    depth: list[Depth] = []


class ExplainedRuns(msgspec.Struct, kw_only=True):
    """``compare --explain``'s ``explain.json``: each ok run explained, or why its trace could not be."""

    schema_version: int = 0
    runs: list[Side] = []
    unreadable: list[Unreadable] = []


class _Header(msgspec.Struct):
    schema_version: int = 0


def to_json(x: Explained | ExplainedRuns) -> bytes:
    """The file's bytes, at this version (one trace's: its side alone, as before the version)."""
    x.schema_version = SCHEMA_VERSION
    data: object = x
    if isinstance(x, Explained) and x.b is None:
        data = {"schema_version": x.schema_version, "a": x.a}
    return msgspec.json.format(msgspec.json.encode(data), indent=1)


def runs_of(sides: list[Side | Unreadable]) -> ExplainedRuns:
    return ExplainedRuns(schema_version=SCHEMA_VERSION, runs=[s for s in sides if isinstance(s, Side)],
                         unreadable=[s for s in sides if isinstance(s, Unreadable)])


def read(path: str | Path) -> Explained | ExplainedRuns:
    """An ``explain.json`` of any version up to this one; ValueError (one line) when it is not one."""
    from twinbench.folder_io import read_small, terminal

    try:
        raw = msgspec.json.decode(read_small(Path(path), MAX_BYTES))
    except (OSError, msgspec.DecodeError) as e:
        raise ValueError(f"{path}: not an explain.json ({terminal(e, 120)})") from None
    if isinstance(raw, list):  # version 0 of compare --explain's: a bare list of sides
        raw = {"runs": [x for x in raw if not (isinstance(x, dict) and "error" in x)],
               "unreadable": [x for x in raw if isinstance(x, dict) and "error" in x]}
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: not an explain.json (a JSON {type(raw).__name__})")
    try:  # the file's header first: a later version may have changed what its fields mean
        version = msgspec.convert(raw, _Header).schema_version
    except msgspec.ValidationError as e:
        raise ValueError(f"{path}: not an explain.json ({terminal(e, 160)})") from None
    if version > SCHEMA_VERSION:
        raise ValueError(f"{path}: explain.json schema_version {version}; this twinbench reads up to {SCHEMA_VERSION}")
    kind: type[Explained] | type[ExplainedRuns] = ExplainedRuns if "runs" in raw else Explained
    try:
        return msgspec.convert(raw, kind)
    except msgspec.ValidationError as e:
        raise ValueError(f"{path}: not an explain.json ({terminal(e, 160)})") from None
