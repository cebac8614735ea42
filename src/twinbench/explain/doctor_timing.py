"""The step time ``twinbench doctor --trace DIR`` measured without the profiler, read from ``DIR/trace.json``.

A profiler slows the step it records (``torch.profiler`` with shapes costs per op, so rows with many small ops
grow most): a trace's own step is not the script's step. The doctor times the script's steady steps with the
traced ones left out, and writes that beside the trace (``untraced_step_ms``, with ``traced_step_ms``, the
traced steps' own wall time). explain shows it as the run's measured step, says how much the profiler added,
and, for a pair, the gap without the profiler.

Beside the timing, the doctor records what decides whether the trace may name a cause (read by
:func:`conditions`): the load other processes put on the machine (``load``: ``others_cores``, ``cores``,
``busy``), how the step ran (``step_kind``), the JAX primitives it dispatched one by one a step
(``eager_ops_per_step``) and what compiled after step 1 (``compiles``: :func:`compile_log`). A JAX trace folder holds the step's compiled HLO as ``step.hlo.txt``
(:func:`step_hlo`), which explain reads without ``--hlo``.

The file is data: read with :mod:`json` (never executed), only when small (a Chrome trace that happens to be
named ``trace.json`` is not the doctor's, and is left alone), and decoded into the parts declared here
(:class:`Timing`, :class:`Conditions`: msgspec structs, as the record). A malformed timing is one note, a
malformed condition is left out; the trace itself is read all the same.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import msgspec

NAME = "trace.json"
MAX_BYTES = 1 << 16  # the doctor's trace.json is a few hundred bytes; anything larger is someone else's file
PROFILER_NOTE = 0.10  # the profiler's share of the traced step above which each run says so

Count = Annotated[int, msgspec.Meta(ge=0)]
StepKind = Annotated[str, msgspec.Meta(max_length=40)]
EagerOps = Annotated[float, msgspec.Meta(ge=0, le=1e12)]


class Part(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """A declared part of the doctor's ``trace.json``; ``omit_defaults``: what the file left out stays out of
    explain's JSON (``recorded``, ``measured``), as it always did."""


class Timing(Part):
    """The step ``twinbench doctor --trace`` timed beside its trace, each a finite number >= 0 or absent (a
    malformed one: the whole timing is unused, :func:`read`'s note)."""

    untraced_step_ms: float | None = None  # the steady step with the traced steps left out (no profiler)
    traced_step_ms: float | None = None  # the traced steps' own wall time
    untraced_steps: float | None = None
    traced_steps: float | None = None
    untraced_spread: float | None = None  # how much the untraced steps move (explain's noise)

    def __post_init__(self) -> None:
        for k in self.__struct_fields__:
            v = getattr(self, k)
            if v is not None and not (math.isfinite(v) and v >= 0):
                raise ValueError(f"{k} is {v}")


class Load(Part):
    """The load other processes put on the machine while the doctor recorded the steps."""

    others_cores: Annotated[float, msgspec.Meta(ge=0, le=1e6)]  # cores other processes kept busy
    cores: Annotated[int, msgspec.Meta(gt=0)]  # the machine's
    busy: bool  # the share the doctor warns at


class CompileLog(Part):
    """The doctor's log of what compiled after step 1 (``compiles``, ``doctor/trace.py``'s ``compile_log``):
    :mod:`.compilation` reads it."""

    steps: Count | None = None  # the steps the run took
    compiles: Count | None = None  # the backend compiles after step 1
    compile_s: Annotated[float, msgspec.Meta(ge=0, le=1e9)] | None = None
    retraces: Count | None = None  # the script's retraces (JAX's cache misses, Dynamo's recompiles)
    causes: dict[Annotated[str, msgspec.Meta(max_length=40)], Count] | None = None  # retraces by cause
    # up to 3 of the shape changes jax_explain_cache_misses printed
    shapes: Annotated[list[Annotated[str, msgspec.Meta(max_length=200)]], msgspec.Meta(max_length=3)] | None = None
    finding: Annotated[str, msgspec.Meta(pattern=r"^([a-z][a-z0-9-]{0,40})?$")] = ""  # the doctor's finding id

    @property
    def any(self) -> bool:
        """Whether anything compiled or retraced after step 1."""
        return bool(self.compiles or self.retraces)


class Conditions(Part):
    """What twinbench doctor recorded of the run beside its trace (see the module), each part left out where
    the file has none or a malformed one."""

    load: Load | None = None
    step_kind: StepKind | None = None  # how the step ran
    eager_ops_per_step: EagerOps | None = None  # JAX primitives dispatched one by one a step
    compiles: CompileLog | None = None


class _Parts(msgspec.Struct, kw_only=True, frozen=True):
    """The parts of the file :func:`conditions` reads, still as parsed: each decoded on its own, so that one
    malformed part leaves the others read."""

    load: object = None
    step_kind: object = None
    eager_ops_per_step: object = None
    compiles: object = None


def candidates(arg: str, trace: Path) -> list[Path]:
    """Where the doctor's ``trace.json`` of a trace would be: in the folder given, in the trace file's folder,
    and, for a JAX profile under ``DIR/plugins/profile/RUN/``, in ``DIR``."""
    out = [Path(arg) / NAME] if Path(arg).is_dir() else []
    folder = trace.parent
    out.append(folder / NAME)
    if folder.parent.name == "profile" and folder.parent.parent.name == "plugins":
        out.append(folder.parent.parent.parent / NAME)
    unique: dict[Path, Path] = {}  # each place once (a folder given and the trace's own folder may be one)
    for p in out:
        if p.resolve() != trace.resolve():
            unique.setdefault(p.resolve(), p)
    return list(unique.values())


def load(path: Path) -> dict[str, object] | None:
    """``path``'s JSON as parsed (decoded by :func:`read` and :func:`conditions`) when it is a doctor
    ``trace.json`` (a small JSON object naming the ``framework``, not a Chrome trace), else None;
    :class:`OSError` / :class:`ValueError` when a small file cannot be read or is not JSON."""
    if path.name != NAME or path.stat().st_size > MAX_BYTES:
        return None  # a Chrome trace named trace.json is larger than this: not the doctor's
    data = json.loads(path.read_bytes())
    return data if isinstance(data, dict) and "framework" in data and "traceEvents" not in data else None


def is_doctor_file(path: Path) -> bool:
    """Whether ``path`` is the doctor's ``trace.json`` (not a trace: a folder's search passes over it)."""
    try:
        return load(path) is not None
    except (OSError, ValueError):
        return False


def read(arg: str, trace: Path) -> tuple[Timing | None, str | None]:
    """(the doctor's timing of this trace, a note): the timing when a doctor ``trace.json`` beside the trace
    has an ``untraced_step_ms``; the note when one is there but malformed, or says the step could not be
    timed without the profiler. (None, None) when there is none."""
    for path in candidates(arg, trace):
        if not path.is_file():
            continue
        try:
            data = load(path)
        except (OSError, ValueError) as e:
            return None, f"{path}: not the JSON twinbench doctor writes ({type(e).__name__}); its step time unused"
        if data is not None:  # else someone else's JSON
            return validate(path, data)
    return None, None


def validate(path: Path, data: dict[str, object]) -> tuple[Timing | None, str | None]:
    """The timing of a doctor ``trace.json`` (:class:`Timing`), or the note that says why it is unused."""
    try:
        t = msgspec.convert(data, Timing)
    except msgspec.ValidationError as e:
        return None, f"{path}: {str(e)[:120]}, not a number of ms or steps; its step time unused"
    if not t.untraced_step_ms:
        if t.traced_step_ms:
            return None, (f"{path}: twinbench doctor could not time the step without the profiler (too few steps "
                          "ran outside the trace: --steps N larger); the traced step is the only one")
        return None, None
    return t, None


class _Measured(msgspec.Struct, kw_only=True, frozen=True):
    """The part of an explained side :func:`notes` and :func:`gap_line` read: its traced step and the doctor's
    timing beside it."""

    traced_step_ms: float = 0.0
    measured: Timing | None = None


def _measured(e: Any) -> _Measured:
    """An explained side (a dict, or a typed side) as the part read here."""
    return msgspec.convert(e, _Measured, from_attributes=True)


def notes(e: Any) -> list[str]:
    """One run's line when the profiler added more than ``PROFILER_NOTE`` to its step (``e``: an explained
    side with the doctor's timing)."""
    side = _measured(e)
    m = side.measured
    if m is None or not m.untraced_step_ms:
        return []
    traced, untraced = m.traced_step_ms or side.traced_step_ms, m.untraced_step_ms
    if traced <= untraced * (1 + PROFILER_NOTE):
        return []
    return [f"the profiler added {traced / untraced - 1:.0%} to this run's step (traced {traced:.1f} ms, untraced "
            f"{untraced:.1f} ms, measured by twinbench doctor); rows with many small ops grow most"]


def gap_line(a: Any, b: Any) -> str:
    """The gap without the profiler when both traces (two explained sides) have the doctor's untraced step (''
    otherwise)."""
    sa, sb = _measured(a), _measured(b)
    if sa.measured is None or sb.measured is None or not sa.measured.untraced_step_ms \
            or not sb.measured.untraced_step_ms:
        return ""
    traced = sb.traced_step_ms - sa.traced_step_ms
    untraced = sb.measured.untraced_step_ms - sa.measured.untraced_step_ms
    return f"measured without the profiler the gap is {untraced:+.1f} ms (traced: {traced:+.1f} ms)"


STEP_HLO = "step.hlo.txt"


def step_hlo(arg: str) -> str | None:
    """The doctor's ``step.hlo.txt`` for a trace argument: in the folder given, or beside the trace file, or
    (a JAX profile under ``DIR/plugins/profile/RUN/``) in ``DIR``; None when there is none."""
    p = Path(arg)
    places = [p] if p.is_dir() else [p.parent]
    if p.parent.parent.name == "profile" and p.parent.parent.parent.name == "plugins":
        places.append(p.parent.parent.parent.parent)
    for d in places:
        if (d / STEP_HLO).is_file():
            return str(d / STEP_HLO)
    return None


def conditions(arg: str, trace: Path) -> Conditions:
    """What twinbench doctor recorded of the run beside its trace (see the module): a part of the wrong shape is
    left out, every part when there is no doctor ``trace.json``."""
    for path in candidates(arg, trace):
        if not path.is_file():
            continue
        try:
            data = load(path)
        except (OSError, ValueError):
            return Conditions()
        if data is None:
            continue
        parts = msgspec.convert(data, _Parts)
        return Conditions(load=_part(Load, parts.load), step_kind=_part(StepKind, parts.step_kind),
                          eager_ops_per_step=_part(EagerOps, parts.eager_ops_per_step),
                          compiles=compile_log(parts.compiles))
    return Conditions()


def _part(t: Any, v: object) -> Any:
    """``v`` decoded as ``t``; None where it is absent or of another shape."""
    if v is None:
        return None
    try:
        return msgspec.convert(v, t)
    except msgspec.ValidationError:
        return None


def compile_log(v: object) -> CompileLog | None:
    """The doctor's log of what compiled after step 1 (``compiles`` in its ``trace.json``), None when there is
    none, it is malformed, or nothing compiled or retraced."""
    log = _part(CompileLog, v)
    return log if log is not None and log.any else None
