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
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from twinbench import folder_io
from twinbench.config import SpecError
from twinbench.folder_io import MAX_NAME, LinkRefused, cut, lines, open_append, write_all
from twinbench.machine import HIGH_LOAD, MAX_SPREAD
from twinbench.measure.device import host_cpu
from twinbench.measure.interference import busy_warning
from twinbench.models.family import n_params_of
from twinbench.spec import RunSpec

#: The version of the record's fields (``schema_version``): raised when a field changes its meaning or type, so a
#: reader can tell which fields a record may carry; docs/record.schema.json is the schema of this version.
SCHEMA_VERSION = 1
#: Record warnings about the conditions of a measurement start with one of these (the others are sharding's).
CONDITION_WARNINGS = ("machine busy:", "matmul peak:", "device shared:")


def _cores() -> int:
    """The threads a run of ``threads=0`` gets (all cores of this process's affinity), for records made
    before or without the worker (failed, skipped, timed out) to say what the run was given."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


@dataclass
class Record:
    # what was run
    framework: str
    strategy: str
    preset: str
    n_params: int | None
    batch: int
    seq: int
    layers: int
    d_model: int
    precision: str
    device: str | None
    device_count: int
    status: str  # "ok" | "failed"
    error: str | None = None
    # measured
    compile_s: float | None = None
    first_step_s: float | None = None
    step_ms: float | None = None
    step_ms_p10: float | None = None
    step_ms_p90: float | None = None
    tokens_per_s: float | None = None
    flops_per_token: int | None = None
    achieved_tflops: float | None = None
    peak_tflops: float | None = None
    mfu: float | None = None
    peak_mem_bytes: int | None = None
    compiles_during_steps: int | None = None
    loss_first: float | None = None
    loss_last: float | None = None
    versions: dict[str, str] = field(default_factory=dict)
    # conditions and extras
    run_id: str = ""
    heads: int = 0
    vocab: int = 0
    context: int = 0
    steps: int = 0
    warmup: int = 0
    threads: int = 0
    compile_cache: str = "cold"
    platform: str | None = None
    matmul_precision: str | None = None
    attention_kernel: str | None = None  # the twins' attention: torch SDPA's kernel, JAX's implementation
    devices_visible: int | None = None  # devices the process saw (device_count: the devices the run used)
    peak_tflops_datasheet: float | None = None
    mfu_datasheet: float | None = None
    peak_mem_source: str | None = None
    compiles_total: int | None = None
    wall_s: float | None = None
    step_ms_mean: float | None = None  # mean steady-state step (the median is step_ms)
    step_ms_async: float | None = None  # per step, the steady steps again unsynchronised (sync at the ends only)
    step_times_ms: list[float] = field(default_factory=list)  # every steady-state step, in order (scan-steps: /K)
    repeat: int = 0  # compare --repeats N: which repeat of its configuration this run is (0-based)
    config_id: str = ""  # the run_id of its configuration, shared by its repeats
    losses: list[float] = field(default_factory=list)
    # compilation cache evidence (compile_cache says cold/warm): programs loaded from the persistent cache
    # (JAX) or FX-graph/AOTAutograd cache hits (torch)
    compile_cache_hits: int | None = None
    steps_per_call: int = 1  # scan-steps: K steps per call; step times are call time / K
    spec: dict[str, Any] = field(default_factory=dict)
    # profiler trace of a few steps run after the measured ones (--trace DIR); None when not traced
    trace_path: str | None = None
    trace_error: str | None = None
    # --explain: phases by timing (after the measured steps) and the JAX step's HLO text (twinbench/explain)
    explain_timing: dict[str, float] = field(default_factory=dict)
    explain_hlo_path: str | None = None
    explain_error: str | None = None
    weights_path: str | None = None  # the trained canonical weights, with --save-weights (twinbench export --from)
    # many devices: params + optimizer state one device holds, where each array lives, what looks wrong
    state_bytes_per_device: int | None = None
    sharding: dict[str, Any] = field(default_factory=dict)  # distributed/sharding_report.py: build()
    warnings: list[str] = field(default_factory=list)
    # variable-length text and the input pipeline (task "classify"; input fields for every task)
    task: str = "lm"
    pad_pct: float | None = None  # share of processed tokens that are padding, whole run
    real_tokens_per_s: float | None = None  # steady state, counting only real (non-pad) tokens
    distinct_lengths: int | None = None  # distinct padded batch lengths the run fed the model
    compiles_in_loop: int | None = None  # programs compiled during the training steps, the first included
    input_wait_ms: float | None = None  # median time a steady step waited for its batch
    input_stall_pct: float | None = None  # steady-state waiting share of step time
    accuracy_first: float | None = None  # held-out accuracy before training (classify)
    accuracy_last: float | None = None  # held-out accuracy after the run (classify)
    # the conditions of the measurement: the machine's load when the run started (read by the runner right
    # before it started the worker) and how trustworthy the matmul peak behind the MFU is (measure/peak.py)
    xla_flags: str | None = None  # JAX runs: the XLA_FLAGS the run used (xla_flags.py adds the tuned CPU flags)
    load_avg_1m: float | None = None  # os.getloadavg()[0]
    cpu_count: int | None = None  # cores available to the run (the runner's CPU affinity)
    load_avg_1m_external: float | None = None  # load_avg_1m less what twinbench's own ended runs still add
    # measured during the timed steps (measure/interference.py): cores other processes kept busy, every core's
    # busy share, the window's length; the "machine busy" warning comes from these when present
    interference_cores: float | None = None
    cpu_busy_per_core: dict[str, float] = field(default_factory=dict)
    interference_window_s: float | None = None
    # the run's own process over its steady steps (measure/page_faults.py): page faults a step, and the kernel's
    # share of its CPU time; the host allocator setting it ran under (the GLIBC_TUNABLES it had, host_malloc.py)
    page_faults_per_step: float | None = None
    kernel_cpu_share: float | None = None
    glibc_tunables: str | None = None
    peak_measured_at: str | None = None  # ISO time (UTC) the peak was measured
    peak_spread: float | None = None  # max/min - 1 over the peak's timed repeats
    peak_load_per_core: float | None = None  # load per core while the peak was measured
    peak_device_shared: int | None = None  # other processes on the GPU while the peak was measured (NVML)
    device_shared: int | None = None  # other processes on the run's GPU(s) around its timed steps (NVML)
    # bring your own model (--model, twinbench/byo): how FLOPs were counted, the port's parity check
    # (--jax-model), the doctor's findings over a few extra steps of a JAX run
    # where it ran when submitted as a job (--launcher local|slurm, launch/): the launcher, the job's id and
    # nodes, and for a job the scheduler ended (killed, preempted, node failure...) its state
    launcher: str | None = None
    job_id: str | None = None
    job_nodes: list[str] = field(default_factory=list)
    launcher_state: str | None = None
    flops_convention: str | None = None
    parity: dict[str, Any] = field(default_factory=dict)
    doctor: dict[str, Any] = field(default_factory=dict)
    # where the peak memory went (measure/memory.py: parts, unaccounted, the preflight's estimate) and the
    # twins' attention formulation (models/options.py ATTENTION_IMPLS)
    memory_breakdown: dict[str, Any] = field(default_factory=dict)
    attention_impl: str = "default"
    # the machine: the host's CPU model and instruction set (the same comparison differs by machine; on a GPU
    # the host still feeds the device), measure/device.py host_cpu()
    host_cpu: str | None = None
    # the version of this field list (records written before it was added have none: version 0)
    schema_version: int = SCHEMA_VERSION

    @classmethod
    def for_spec(cls, spec: RunSpec, status: str, **measured: Any) -> Record:
        """A record carrying the spec's identifying fields; ``measured`` fills the rest."""
        m, t = spec.model, spec.train
        base = dict(framework=spec.framework, strategy=spec.strategy.name, preset=spec.preset,
                    n_params=n_params_of(spec.model),  # known from the shape, also of a run that never started
                    batch=t.batch, seq=t.seq, layers=m.layers, d_model=m.d_model, precision=t.precision,
                    device=None, device_count=spec.launch.devices, status=status, run_id=spec.run_id(),
                    heads=m.heads, vocab=m.vocab, context=m.context, steps=t.steps, warmup=t.warmup,
                    threads=spec.host.threads or _cores(), compile_cache=spec.host.compile_cache, spec=spec.to_dict(),
                    task=spec.train.task, repeat=spec.repeat, config_id=spec.config_id(),
                    attention_impl=spec.strategy.attention_impl, host_cpu=host_cpu())
        return cls(**(base | measured))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Record:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


def condition_warnings(r: dict[str, Any]) -> list[str]:
    """Warnings about the conditions of a run: a busy machine, a matmul peak that is not to be trusted.

    Busy: from the CPU time other processes used during the timed steps (``interference_cores``,
    measure/interference.py) when the record has it; otherwise (records of an older twinbench) from the load:

    The load counted is ``load_avg_1m_external`` when known (the 1-minute load average less what
    twinbench's own ended runs still contribute to it), else ``load_avg_1m``; per core of ``cpu_count``.
    """
    out = []
    load = r.get("load_avg_1m_external")
    load = r.get("load_avg_1m") if load is None else load
    cpus = r.get("cpu_count")
    measured = busy_warning(r)
    if measured:
        out.append(measured)
    elif r.get("interference_cores") is not None:
        pass  # measured during the steps and quiet: the load average at the start is only secondary
    elif load is not None and cpus and load / cpus > HIGH_LOAD:
        out.append(f"machine busy: load average {load:.2f} on {cpus} core(s) ({load / cpus:.2f} per core, above "
                   f"{HIGH_LOAD}) when the run started; its timings are not reliable")
    spread = r.get("peak_spread")
    if spread is not None and spread > MAX_SPREAD:
        out.append(f"matmul peak: its repeats disagree by {spread:.0%} (above {MAX_SPREAD:.0%}), so the MFU is "
                   "uncertain; `twinbench peak --remeasure` on an idle machine")
    peak_load = r.get("peak_load_per_core")
    if peak_load is not None and peak_load > HIGH_LOAD:
        out.append(f"matmul peak: measured on a busy machine ({peak_load:.2f} load per core), so the MFU is "
                   "overstated; `twinbench peak --remeasure` on an idle machine")
    if r.get("peak_device_shared"):
        out.append(f"matmul peak: measured while {r['peak_device_shared']} other process(es) used the GPU, so the "
                   "MFU is overstated; `twinbench peak --remeasure` on an idle GPU")
    if r.get("device_shared"):
        out.append(f"device shared: {r['device_shared']} other process(es) held a context on this run's GPU(s) "
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

    return Path(os.environ.get("TWINBENCH_UNSAVED_DIR") or Path(tempfile.gettempdir()) / "twinbench-unsaved")


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
    except OSError:  # opened write-only
        with open(fd, "rb", closefd=False) as f:
            f.seek(size - 1)
            return b"" if f.read(1) == b"\n" else b"\n"


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


def _field_types() -> dict[str, tuple[str, bool]]:
    """Each Record field: its kind (str, num, list, dict) and whether None is allowed."""
    out = {}
    for f in fields(Record):
        t = str(f.type)
        kind = ("list" if t.startswith("list") else "dict" if t.startswith("dict")
                else "num" if t.split(" |")[0] in ("int", "float") else "str" if t.split(" |")[0] == "str" else "")
        if kind:
            out[f.name] = (kind, "None" in t)
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


def _scrub(v: Any) -> Any:
    """Nested values with every NaN, infinite or :data:`HUGE` number read as None (explain_timing, breakdowns),
    every string cut to folder_io's cap."""
    if isinstance(v, dict):
        return {cut(k, MAX_NAME) if isinstance(k, str) else k: _scrub(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_scrub(x) for x in v]
    if isinstance(v, str):
        return cut(v)
    return None if _number(v) and not _finite(v) else v


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
    for name, (kind, nullable) in _FIELD_TYPES.items():
        if name not in rec:
            continue
        v = rec[name]
        if v is None:
            if not nullable and name in REQUIRED:
                return f"{name} is null"
            continue
        ok = {"str": isinstance(v, str), "num": _number(v), "list": isinstance(v, list),
              "dict": isinstance(v, dict)}[kind]
        if not ok:
            return f"{name} is a {type(v).__name__}"
        if kind == "num" and not (_finite(v) and (name not in TIMES or abs(v) <= HUGE_TIME)):
            if name in TIMES:
                return f"{name} is {str(v)[:20]}" + ("..." if len(str(v)) > 20 else "") + " (not a time)"
            rec[name] = None
        elif name in TIMES and kind == "num" and v <= 0 and name != "compile_s":
            return f"{name} is {v:g} (not a positive time)"
        elif kind in ("dict", "list") and name not in ("losses", "step_times_ms"):
            rec[name] = _scrub(v)
        elif kind == "str":
            rec[name] = cut(v)  # cut to folder_io's cap, no control characters (nothing a terminal obeys)
    times = rec.get("step_times_ms") or []
    if any(not _number(t) or not _finite(t) or t <= 0 or t > HUGE_TIME for t in times):
        return "step_times_ms holds a value that is not a positive finite number"
    if any(not _number(x) for x in rec.get("losses") or []):
        return "losses holds a value that is not a number"
    if rec.get("compile_s") is not None and rec["compile_s"] < 0:
        return f"compile_s is {rec['compile_s']:g} (negative)"
    return None


def read_records(path: Path, problems: list[str] | None = None,
                 line_numbers: list[int] | None = None) -> tuple[list[dict[str, Any]], int]:
    """The twinbench records of a results file, and how many of its non-blank lines were not one (malformed
    JSON, a torn last line, a line over folder_io's cap, JSON that is not an object with the fields every record
    has, a field of the wrong type, a timing that is NaN or not positive): the one reader of results files every
    command uses, bounded by folder_io (a file over its cap is an OSError from its size alone).

    ``problems`` (when given) receives one short reason per skipped line (``line 3: not JSON``);
    ``line_numbers`` (when given) the 1-based line of each record returned, in order.
    """
    records, bad = [], 0
    for n, raw in lines(path):
        if raw is not None and not raw.strip():
            continue
        if raw is None:
            why = f"a line of over {folder_io.MAX_LINE / 2**20:g} MB (no record is that long)"
        else:
            try:
                rec = json.loads(raw.decode(errors="replace"))
                why = check_record(rec)
            except (ValueError, RecursionError):
                why = "not JSON (a torn or garbled line)"
        if why is None:
            records.append(rec)
            if line_numbers is not None:
                line_numbers.append(n)
            continue
        bad += 1
        if problems is not None:
            problems.append(f"line {n}: {why}")
    return records, bad


def latest_per_run(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per run id, the last one written (a run retried with ``--retry-failed`` replaces its failed
    row; records without a run id are all kept), in the order the runs were first written."""
    first: dict[Any, int] = {}
    out: list[dict[str, Any]] = []
    for r in records:
        rid = r.get("run_id")
        if rid and rid in first:
            out[first[rid]] = r
            continue
        if rid:
            first[rid] = len(out)
        out.append(r)
    return out


def duplicates(records: list[dict[str, Any]]) -> dict[str, int]:
    """Run ids that appear more than once, with how many times (the same configuration measured twice)."""
    counts: dict[str, int] = {}
    for r in records:
        if r.get("run_id"):
            counts[r["run_id"]] = counts.get(r["run_id"], 0) + 1
    return {k: n for k, n in counts.items() if n > 1}


def skipped_note(path: Path, bad: int, problems: list[str]) -> str:
    """One line saying how many lines of ``path`` were skipped, and why the first one was."""
    first = f" (first: {problems[0]})" if problems else ""
    return f"skipped {bad} line(s) of {path} that are not twinbench records{first}"


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every complete record of a results file (bounded as :func:`read_records` is); a torn last line (killed
    mid-write) is skipped."""
    out = []
    if not Path(path).is_file():
        return out
    for _, raw in lines(path):
        try:
            rec = json.loads(raw.decode(errors="replace")) if raw else None
        except (ValueError, RecursionError):
            continue
        if isinstance(rec, dict):
            out.append(cut(rec))
    return out


_FIELD_TYPES = _field_types()
