"""The Record: one JSON object per run, the contract every later command (report, claims, advise) reads.

``results.jsonl`` holds one record per line, appended the moment its run ends. A failed run is a record
too, with ``status == "failed"``, the reason in ``error`` and the measured fields ``None``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import time
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec

from twinbench import folder_io
from twinbench.config import SpecError
from twinbench.folder_io import MAX_NAME, LinkRefused, cut, lines, open_append, write_all
from twinbench.machine import HIGH_LOAD, MAX_SPREAD
from twinbench.measure.device import host_cpu
from twinbench.measure.interference import busy_warning
from twinbench.models.family import n_params_of
from twinbench.record_sections import FLAT, SCHEMA_VERSION, SECTIONS, Conditions, Record, Run, varying
from twinbench.spec import RunSpec

__all__ = ["FLAT", "SCHEMA_VERSION", "Record", "varying"]

#: Record warnings about the conditions of a measurement start with one of these (the others are sharding's).
CONDITION_WARNINGS = ("machine busy:", "matmul peak:", "device shared:")


def _cores() -> int:
    """The threads a run of ``threads=0`` gets (all cores of this process's affinity), for records made
    before or without the worker (failed, skipped, timed out) to say what the run was given."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def for_spec(spec: RunSpec, status: str, **measured: Any) -> Record:
    """A record of ``spec`` with its identifying fields, the machine and ``status``; ``measured`` (flat
    field names: ``error``, ``step_ms``, ``memory_breakdown``...) fills the rest, for the records made outside
    the worker (failed, skipped, timed out, planned, a job the scheduler ended)."""
    m, t = spec.model, spec.train
    run = Run(framework=spec.framework, strategy=spec.strategy.name, preset=spec.preset, task=t.task,
              run_id=spec.run_id(), config_id=spec.config_id(), repeat=spec.repeat, batch=t.batch, seq=t.seq,
              layers=m.layers, d_model=m.d_model, heads=m.heads, vocab=m.vocab, context=m.context, steps=t.steps,
              warmup=t.warmup, precision=t.precision, attention_impl=spec.strategy.attention_impl,
              compile_cache=spec.host.compile_cache, device_count=spec.launch.devices,
              n_params=n_params_of(spec.model))  # known from the shape, also of a run that never started
    conditions = Conditions(threads=spec.host.threads or _cores(), host_cpu=host_cpu())
    rec = Record(status=status, run=run, conditions=conditions, spec=spec.to_dict())
    return with_fields(rec, measured) if measured else rec


class Known(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What a worker knows of itself before its record exists (record fields by their flat names): a run that
    fails or times out later still says what it was (worker.py keeps it, runner.py reads it back)."""

    device: str | None = None
    platform: str | None = None
    matmul_precision: str | None = None
    devices_visible: int | None = None
    versions: dict[str, str] | None = None
    n_params: int | None = None

    def fields(self) -> dict[str, object]:
        """The fields it knows (by flat name), for :func:`for_spec`."""
        return msgspec.to_builtins(self, enc_hook=str)  # a library's own str (torch's TorchVersion) as its text


def with_fields(rec: Record, flat: dict[str, Any]) -> Record:
    """``rec`` with the fields ``flat`` names (flat names, as :meth:`Record.flat` has them) set."""
    return Record.from_flat(rec.flat() | flat)


def as_record(r: Record | dict[str, Any]) -> Record:
    """``r`` typed: a record as it is, a dict as :func:`load` reads a line (flat or in sections; a hand-made
    one lacking a record's identity is given ``?`` for framework and strategy). ValueError when it is none."""
    if isinstance(r, Record):
        return r
    got = load({"framework": "?", "strategy": "?", "status": "ok"} | r)
    if isinstance(got, str):
        raise ValueError(f"not a record: {got}")
    return got


def typed(records: Iterable[Record | dict[str, Any]]) -> list[Record]:
    """:func:`as_record` of each: what the commands' entry points do with the records they are given."""
    return [as_record(r) for r in records]


def condition_warnings(r: Record | dict[str, Any]) -> list[str]:
    """Warnings about the conditions of a run: a busy machine, a matmul peak that is not to be trusted.

    Busy: from the CPU time other processes used during the timed steps (``interference_cores``,
    measure/interference.py) when the record has it; otherwise (records of an older twinbench) from the load:

    The load counted is ``load_avg_1m_external`` when known (the 1-minute load average less what
    twinbench's own ended runs still contribute to it), else ``load_avg_1m``; per core of ``cpu_count``.
    """
    out = []
    r = as_record(r)
    c, sp = r.conditions, r.speed
    load = c.load_avg_1m if c.load_avg_1m_external is None else c.load_avg_1m_external
    cpus = c.cpu_count
    measured = busy_warning(c.interference_cores, cpus)
    if measured:
        out.append(measured)
    elif c.interference_cores is not None:
        pass  # measured during the steps and quiet: the load average at the start is only secondary
    elif load is not None and cpus and load / cpus > HIGH_LOAD:
        out.append(f"machine busy: load average {load:.2f} on {cpus} core(s) ({load / cpus:.2f} per core, above "
                   f"{HIGH_LOAD}) when the run started; its timings are not reliable")
    if sp.peak_spread is not None and sp.peak_spread > MAX_SPREAD:
        out.append(f"matmul peak: its repeats disagree by {sp.peak_spread:.0%} (above {MAX_SPREAD:.0%}), so the "
                   "MFU is uncertain; `twinbench peak --remeasure` on an idle machine")
    if sp.peak_load_per_core is not None and sp.peak_load_per_core > HIGH_LOAD:
        out.append(f"matmul peak: measured on a busy machine ({sp.peak_load_per_core:.2f} load per core), so the "
                   "MFU is overstated; `twinbench peak --remeasure` on an idle machine")
    if sp.peak_device_shared:
        out.append(f"matmul peak: measured while {sp.peak_device_shared} other process(es) used the GPU, so the "
                   "MFU is overstated; `twinbench peak --remeasure` on an idle GPU")
    if c.device_shared:
        out.append(f"device shared: {c.device_shared} other process(es) held a context on this run's GPU(s) "
                   "around its timed steps; its timings are not reliable")
    return out


class RecordWriteError(OSError):
    """A record could not be appended to its results file; ``kept`` says where it was kept instead."""

    def __init__(self, path: Path, cause: OSError, kept: Path | None) -> None:
        self.path, self.cause, self.kept = Path(path), cause, kept
        where = f"; the record was kept in {kept}" if kept else "; the record could not be kept anywhere"
        super().__init__(f"cannot write {path}: {cause.strerror or cause}{where}")


def _write_all(fd: int, data: bytes) -> None:
    write_all(fd, data)


def unsaved_dir() -> Path:
    """Where records that could not be written to their results file are kept (one file per run)."""
    import tempfile

    return Path(os.getenv("TWINBENCH_UNSAVED_DIR") or Path(tempfile.gettempdir()) / "twinbench-unsaved")


def keep_unsaved(record: dict[str, Any], path: Path) -> Path | None:
    """Keep a record that could not be appended to ``path``: first beside it (``path``.unsaved.jsonl, a separate
    file may still fit where an append failed), else in :func:`unsaved_dir`. None when both fail."""
    line = (json.dumps(record) + "\n").encode()
    name = f"{int(time.time())}-{os.getpid()}-{record.get('run_id') or 'run'}.jsonl"
    for target in (Path(path).with_name(Path(path).name + ".unsaved.jsonl"), unsaved_dir() / name):
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd = open_append(target, os.O_WRONLY)  # never through a link the results folder holds
            try:
                _write_all(fd, _newline_first(fd) + line)
                os.fsync(fd)
            finally:
                os.close(fd)
            return target
        except (OSError, SpecError):
            continue
    return None


def _newline_first(fd: int) -> bytes:
    """``b"\\n"`` when the file of ``fd`` does not end with a newline (a torn last line): a record always starts on
    a line of its own."""
    size = os.fstat(fd).st_size
    if not size:
        return b""
    try:
        return b"" if os.pread(fd, 1, size - 1) == b"\n" else b"\n"
    except OSError:  # opened write-only: a newline first is harmless (the reader skips a blank line)
        return b"\n"


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one record and flush it to disk, so an interrupted run keeps every finished row.

    The record starts on a line of its own (after a torn last line, a newline first). When the write fails
    (disk full, no permission, ``path`` a directory, a symbolic link: folder_io.open_append), what was written
    of it is cut off again and the record is kept elsewhere (:func:`keep_unsaved`); :class:`RecordWriteError`
    says where.
    """
    line = (json.dumps(record) + "\n").encode()
    try:
        fd = open_append(path)
    except LinkRefused as e:
        raise RecordWriteError(path, OSError(errno.ELOOP, str(e).partition(": ")[2]), keep_unsaved(record, path)) \
            from None
    except OSError as e:
        raise RecordWriteError(path, e, keep_unsaved(record, path)) from None
    try:
        size = os.fstat(fd).st_size
        try:
            _write_all(fd, _newline_first(fd) + line)
            os.fsync(fd)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)  # no torn line left behind
            raise RecordWriteError(path, e, keep_unsaved(record, path)) from None
    finally:
        os.close(fd)


#: the fields every record has, whatever its status
REQUIRED = ("framework", "strategy", "status")
#: fields that name a run (its label, identity, the conditions it is grouped by): over folder_io's MAX_NAME
#: characters, the record is rejected
NAMES = ("framework", "strategy", "status", "preset", "precision", "run_id", "config_id", "task", "device",
         "platform", "compile_cache", "attention_impl")
#: fields whose non-finite or non-positive value makes a record unusable (skipped, counted as malformed)
TIMES = ("step_ms", "step_ms_p10", "step_ms_p90", "step_ms_mean", "compile_s", "first_step_s")


def _kind(t: Any) -> tuple[str, bool, bool]:
    """A field's annotation as the gate checks it: its kind (str, num, list, dict), whether None is allowed and
    whether it is a whole number (``int``, not ``int | float``)."""
    args = typing.get_args(t) if typing.get_origin(t) in (types.UnionType, typing.Union) else (t,)
    base = next(a for a in args if a is not type(None))
    origin = typing.get_origin(base) or base
    if isinstance(origin, type) and issubclass(origin, msgspec.Struct):  # a typed analysis: an object in JSON
        origin = dict
    kind = {list: "list", dict: "dict", int: "num", float: "num", str: "str"}.get(origin, "")
    return kind, type(None) in args, int in args and float not in args


def _field_types() -> dict[str, tuple[str, bool, bool]]:
    """Each field of a record by its flat name: :func:`_kind` of its annotation."""
    out = {name: _kind(t) for name, t in typing.get_type_hints(Record).items() if name not in SECTIONS}
    for name, (section, field) in FLAT.items():
        out[name] = _kind(typing.get_type_hints(SECTIONS[section])[field])
    return out


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


#: a number beyond this is no measurement (a count, bytes, a rate): read as null, as NaN is
HUGE = 1e18
#: a timing beyond this (ms or s: over 30 years) rejects its record, as a NaN timing does
HUGE_TIME = 1e12


def _finite(v: Any) -> bool:
    """A number that is finite and within :data:`HUGE` (an int of 300 digits is not; nor is NaN)."""
    try:
        return math.isfinite(v) and abs(v) <= HUGE
    except OverflowError:  # an int too large for a float
        return False


def _scrub(v: Any, line: bool = False) -> Any:
    """Nested values with every NaN, infinite or :data:`HUGE` number read as None (explain_timing, breakdowns),
    every string cut to folder_io's cap (with ``line``: made one line, :func:`folder_io.one_line`)."""
    if isinstance(v, dict):
        return {_scrub(k, True) if isinstance(k, str) else k: _scrub(x, line) for k, x in v.items()}
    if isinstance(v, list):
        return [_scrub(x, line) for x in v]
    if isinstance(v, str):
        return folder_io.one_line(cut(v)) if line else cut(v)
    return None if _number(v) and not _finite(v) else v


#: the fields whose strings may hold lines of their own (the doctor's code, a port's parity report); every other
#: string of a record is one line: none of its newlines reaches a terminal (a spoofed ``error:`` line)
MULTILINE = frozenset({"doctor", "parity", "sharding", "spec"})


def check_record(rec: Any) -> str | None:
    """Why ``rec`` (a parsed line) is not a usable record, or None. Non-finite numbers (and numbers beyond
    :data:`HUGE`) outside the timings become None (not measured), in nested fields too; a timing that is not a
    positive finite number within :data:`HUGE_TIME` rejects the record."""
    if not isinstance(rec, dict):
        return f"a JSON {type(rec).__name__}, not a record"
    missing = [k for k in REQUIRED if k not in rec]
    if missing:
        return f"no {missing[0]!r} field"
    for name in NAMES:  # what labels a run: a long one is no run's name (and would fill a terminal)
        if isinstance(rec.get(name), str) and len(rec[name]) > MAX_NAME:
            return f"{name} is a {len(rec[name])}-character string (at most {MAX_NAME})"
    long_key = next((k for k in rec if len(k) > MAX_NAME), None)
    if long_key is not None:
        return f"a field name of {len(long_key)} characters"
    for name, (kind, nullable, whole) in _FIELD_TYPES.items():
        if name not in rec:
            continue
        v = rec[name]
        if v is None:
            if not nullable and name in REQUIRED:
                return f"{name} is null"
            if not nullable:  # null where the type takes none (explain.timing: null): not measured, the default
                del rec[name]
            continue
        ok = {"str": isinstance(v, str), "num": _number(v), "list": isinstance(v, list),
              "dict": isinstance(v, dict)}[kind]
        if not ok:
            return f"{name} is a {type(v).__name__}"
        if whole and isinstance(v, float) and v.is_integer() and _finite(v):
            rec[name] = v = int(v)  # a count written as 4.0
        elif whole and isinstance(v, float) and _finite(v):
            return f"{name} is {v:g} (not a whole number)"
        if kind == "num" and not (_finite(v) and (name not in TIMES or abs(v) <= HUGE_TIME)):
            if name in TIMES:
                return f"{name} is {str(v)[:20]}" + ("..." if len(str(v)) > 20 else "") + " (not a time)"
            rec[name] = None
        elif name in TIMES and kind == "num" and v <= 0 and name != "compile_s":
            return f"{name} is {v:g} (not a positive time)"
        elif kind in ("dict", "list") and name not in ("losses", "step_times_ms"):
            rec[name] = _scrub(v, name not in MULTILINE)
        elif kind == "str":
            rec[name] = folder_io.one_line(cut(v))  # cut to folder_io's cap, no control characters (nothing a terminal obeys)
    times = rec.get("step_times_ms") or []
    if any(not _number(t) or not _finite(t) or t <= 0 or t > HUGE_TIME for t in times):
        return "step_times_ms holds a value that is not a positive finite number"
    if any(not _number(x) for x in rec.get("losses") or []):
        return "losses holds a value that is not a number"
    if rec.get("compile_s") is not None and rec["compile_s"] < 0:
        return f"compile_s is {rec['compile_s']:g} (negative)"
    return None


#: (section, field) -> the field's flat name, for the fields a section holds under a shorter name
_FLAT_NAME = {where: name for name, where in FLAT.items()}


def _flatten(rec: dict[str, Any]) -> dict[str, Any] | str:
    """A record of schema version 2 (in sections) in the flat layout the gate checks, or why it cannot be."""
    flat = {k: v for k, v in rec.items() if k not in SECTIONS}
    for section in SECTIONS:
        part = rec.get(section)
        if part is None:
            continue
        if not isinstance(part, dict):
            return f"{section} is a {type(part).__name__}"
        flat |= {_FLAT_NAME.get((section, k), k): v for k, v in part.items()}
    return flat


#: how a record of a newer schema version than this twinbench's is said (its warning, the reader's note)
NEWER = "written by a newer twinbench"


def load(rec: Any) -> Record | str:
    """A parsed line as a typed record, or why it is not one: the one way a record is read. A line in the
    flat layout (schema versions 0 and 1) migrates into sections; the gate (:func:`check_record`: the
    fields every record has, types, NaN and huge numbers, long strings) is the same for every version."""
    if isinstance(rec, dict) and isinstance(rec.get("schema_version"), int) and rec["schema_version"] >= 2:
        rec = _flatten(rec)
        if isinstance(rec, str):
            return rec
    version = rec.get("schema_version") if isinstance(rec, dict) else None
    why = check_record(rec)
    if why is not None:
        return why
    try:
        got = Record.from_flat(rec)
    except msgspec.ValidationError as e:
        return str(e)
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        from twinbench.limits import count

        shown = version if version < 10**6 else count(version)
        got.warnings = [*got.warnings, f"{NEWER} (schema_version {shown}; this one reads "
                        f"{SCHEMA_VERSION}): read as version {SCHEMA_VERSION}, what it added is not read"]
    return got


def _parse(raw: bytes) -> Any:
    """A line's JSON; Python's parser for what msgspec's strict one refuses (NaN, Infinity, 1e400)."""
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return json.loads(raw.decode(errors="replace"))


def read_records(path: Path, problems: list[str] | None = None,
                 line_numbers: list[int] | None = None) -> tuple[list[Record], int]:
    """The twinbench records of a results file, typed, and how many of its non-blank lines were not one
    (malformed JSON, a torn last line, a line over folder_io's cap, JSON that is not an object with the fields
    every record has, a field of the wrong type, a timing that is NaN or not positive): the one reader of
    results files every command uses, bounded by folder_io (a file over its cap is an OSError from its size
    alone). Records of every schema version load (:func:`load`).

    ``problems`` (when given) receives the first :data:`MAX_EXAMPLES` skipped lines with their reasons (``line 3:
    not JSON``) and, when more were skipped, one line counting them by reason (:class:`Reasons`): a file of 31
    million bad lines costs a few counters, not a string each. ``line_numbers`` (when given) the 1-based line
    of each record returned, in order.
    """
    records, bad, why = [], 0, Reasons()
    most = max_records()
    for n, raw in lines(path):
        if raw is not None and not raw.strip():
            continue
        if raw is None:
            got: Record | str = f"a line of over {folder_io.MAX_LINE / 2**20:g} MB (no record is that long)"
        else:
            try:
                got = load(_parse(raw))
            except (ValueError, RecursionError):
                got = "not JSON (a torn or garbled line)"
        if isinstance(got, Record):
            if len(records) >= most:
                raise NotResults(f"{path}: over {most:,} records; a typed record takes up to {RECORD_BYTES >> 10} "
                                 "KiB here and this host keeps at most a quarter of its available memory for them "
                                 "(split the file)")
            records.append(got)
            if line_numbers is not None:
                line_numbers.append(n)
            continue
        bad += 1
        why.add(n, got)
        if bad >= MAX_BAD_LINES and bad > 10 * len(records):
            raise NotResults(f"{path}: {bad:,} of its first {n:,} lines are not twinbench records (first: "
                             f"{why.examples[0]}); not a results file twinbench wrote")
    if problems is not None:
        problems += why.lines()
    newer = [r for r in records if r.warnings and any(w.startswith(NEWER) for w in r.warnings)]
    if newer:  # said once per file, by the one reader every command uses (a record's warnings are not printed)
        import sys

        print(f"note: {folder_io.terminal(path)}: {len(newer)} record(s) {NEWER} than this one; each read as "
              f"version {SCHEMA_VERSION}, what that version added is not read", file=sys.stderr)
    return records, bad


#: host bytes one typed record may take, at most (a whole run's record, its steps' times and losses included, takes
#: most of it; a line of a few fields less, but no reader trusts a file to hold only small ones)
RECORD_BYTES = 16 << 10


def max_records() -> int:
    """The records one results file may give: a quarter of the host's available memory at
    :data:`RECORD_BYTES` each (at least 10,000: a results folder of a long sweep on a small host)."""
    from twinbench.measure.memory_readings import host_available_bytes

    return max(host_available_bytes() // 4 // RECORD_BYTES, 10_000)


#: lines that are not records a results file may hold before it is refused, when they outnumber its records ten
#: to one: a file twinbench wrote has one torn line per interrupted write, never thousands (a bound on time)
MAX_BAD_LINES = 10_000


class NotResults(OSError):
    """A file whose lines are mostly not records: refused once :data:`MAX_BAD_LINES` of them are read."""


#: skipped lines a reader names one by one (the rest are counted by reason)
MAX_EXAMPLES = 5
#: distinct reasons a reader counts apart (the rest are counted together as "other reasons")
MAX_REASONS = 16


class Reasons:
    """Why lines were skipped, bounded whatever the file holds: the first :data:`MAX_EXAMPLES` lines with their
    reason, and a count per reason (at most :data:`MAX_REASONS` kept apart)."""

    def __init__(self) -> None:
        self.examples: list[str] = []
        self.counts: dict[str, int] = {}
        self.total = 0

    def add(self, line: int, reason: str) -> None:
        self.total += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(f"line {line}: {reason}")
        key = reason if reason in self.counts or len(self.counts) < MAX_REASONS else "other reasons"
        self.counts[key] = self.counts.get(key, 0) + 1

    def lines(self) -> list[str]:
        """The examples, then (when there were more) one line of the counts by reason, most frequent first."""
        if self.total <= len(self.examples):
            return list(self.examples)
        by = sorted(self.counts.items(), key=lambda kv: -kv[1])
        counted = "; ".join(f"{n:,} {folder_io.terminal(r, 80)}" for r, n in by[:4])
        more = f"; {len(by) - 4} more reasons" if len(by) > 4 else ""
        return [*self.examples, f"{self.total:,} lines in all: {counted}{more}"]


def latest_per_run(records: list[Record]) -> list[Record]:
    """One record per run id, the last one written (a run retried with ``--retry-failed`` replaces its failed
    row; records without a run id are all kept), in the order the runs were first written."""
    first: dict[Any, int] = {}
    out: list[Record] = []
    for r in records:
        rid = r.run.run_id
        if rid and rid in first:
            out[first[rid]] = r
            continue
        if rid:
            first[rid] = len(out)
        out.append(r)
    return out


def duplicates(records: list[Record]) -> dict[str, int]:
    """Run ids that appear more than once, with how many times (the same configuration measured twice)."""
    counts: dict[str, int] = {}
    for r in records:
        if r.run.run_id:
            counts[r.run.run_id] = counts.get(r.run.run_id, 0) + 1
    return {k: n for k, n in counts.items() if n > 1}


def skipped_note(path: Path, bad: int, problems: list[str]) -> str:
    """One line saying how many lines of ``path`` were skipped, and why the first one was."""
    first = f" (first: {problems[0]})" if problems else ""
    return f"skipped {bad} line(s) of {path} that are not twinbench records{first}"


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every complete JSON object of a results file (bounded as :func:`read_records` is): a record in sections as
    its flat view (:meth:`Record.flat`), a flat line (a record of before the sections, or no record) as it is;
    a torn last line (killed mid-write) is skipped."""
    out: list[dict[str, Any]] = []
    if not Path(path).is_file():
        return out
    for _, raw in lines(path):
        try:
            rec = json.loads(raw.decode(errors="replace")) if raw else None
        except (ValueError, RecursionError):
            continue
        if isinstance(rec, dict):
            got = load(dict(rec)) if isinstance(rec.get("run"), dict) else None
            out.append(got.flat() if isinstance(got, Record) else cut(rec))
    return out


_FIELD_TYPES = _field_types()
