"""Runs each RunSpec in its own fresh subprocess; the only place twinbench spawns processes.

A run that crashes, hangs past ``timeout``, is killed (out of memory) or yields a NaN loss becomes a
``failed`` record with the reason; the others go on. Every record is appended to ``results.jsonl`` the
moment its run ends, so an interrupted sweep keeps what it finished, and ``resume`` skips those runs.

This module schedules the runs and starts their processes; how a run is kept is elsewhere: its results
directory, lock and appended record in ``results_dir.py``, the load it started under in ``load_meter.py``
(both re-exported here, where callers have always found them).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import msgspec

from twinbench import compile_cache, host_malloc
from twinbench.load_meter import SAMPLE_S, LoadMeter, Reading, runnable_tasks
from twinbench.machine import LOAD_ENV
from twinbench.record import (
    Known,
    Record,
    as_record,
    condition_warnings,
    for_spec,
    read_records,
    skipped_note,
    with_fields,
)
from twinbench.results_dir import LOCK, RESULTS, check_out_dir, out_lock, save_record
from twinbench.spec import RunSpec, SpecError

__all__ = [  # the names callers import from here, wherever they are defined
    "LOAD", "LOCK", "RESULTS", "SAMPLE_S", "Interrupted", "LoadMeter", "ScriptRun", "check_out_dir", "child_env",
    "descendants", "interruptible", "out_lock", "run_devices_env", "run_many", "run_module", "run_one", "run_script",
    "runnable_tasks", "save_record", "with_conditions", "worker_command",
]

OOM_MARKERS = ("out of memory", "RESOURCE_EXHAUSTED", "MemoryError", "std::bad_alloc")


class Interrupted(Exception):
    """The user stopped the run (Ctrl-C / SIGTERM); finished records are on disk."""


def _reason_from_stderr(stderr: str, returncode: int) -> str:
    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    tail = "\n".join(lines[-30:])
    if any(m in tail for m in OOM_MARKERS):
        return "out of memory: " + next(ln for ln in reversed(lines) if any(m in ln for m in OOM_MARKERS))
    if returncode < 0:
        sig = signal.Signals(-returncode).name
        hint = " (killed: out of memory?)" if sig == "SIGKILL" else ""
        return f"worker died from {sig}{hint}"
    return lines[-1] if lines else f"worker exited with code {returncode}"


LOAD = LoadMeter()  # this process's meter: every run it starts is read and remembered by it


def child_env(reading: Reading, env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a worker: ours, ``env``, and the load per core it started under (measure/peak.py)."""
    from twinbench import lifeline

    out = {**os.environ, **(env or {}), **lifeline.child_env()}
    load, cpus = reading.load_avg_1m_external, reading.cpu_count
    if load is not None and cpus:
        out[LOAD_ENV] = f"{load / cpus:.3f}"
    return out


def with_conditions(record: Record, reading: Reading) -> Record:
    """The record with the load it started under (``reading``: load_meter's, its fields the record's) and the
    warnings about its conditions."""
    record = with_fields(record, asdict(reading))
    record.warnings = list(dict.fromkeys([*record.warnings, *condition_warnings(record)]))
    return record


def run_one(spec: RunSpec, timeout: float, env: dict[str, str] | None = None) -> Record:
    """Execute ``spec`` in a fresh ``python -m twinbench.worker`` process and return its record.

    The record carries the machine's load right before the worker started (``load_avg_1m``, ``cpu_count``)
    and a warning when it was above 0.5 per core.
    """
    reading = LOAD.reading()
    with LOAD.track():
        record = _run_one(spec, timeout, child_env(reading, {**run_devices_env(spec),
                                                             **host_malloc.worker_env(spec.host.host_malloc),
                                                             **(env or {})}))
    return with_conditions(record, reading)


def run_devices_env(spec: RunSpec) -> dict[str, str]:
    """The GPUs a run may see: the first of this host's that it uses (``CUDA_VISIBLE_DEVICES``), so a one-device
    run holds no context on the others and NVML's count of processes sharing its GPU is about its own."""
    from twinbench.measure.device import devices_env

    return devices_env(spec.launch.devices // max(spec.launch.num_processes, 1))


def _run_one(spec: RunSpec, timeout: float, env: dict[str, str]) -> Record:
    with tempfile.TemporaryDirectory(prefix="twinbench-run-") as tmp:
        spec_path, out_path = Path(tmp, "spec.json"), Path(tmp, "record.json")
        spec_path.write_text(json.dumps(spec.to_dict()))
        try:
            cmd = worker_command(spec, [str(spec_path), str(out_path)])
        except SpecError as e:
            return for_spec(spec, "failed", error=str(e))
        if not spec.host.cache_dir:  # its private compile cache inside this folder: removed with it, even when the
            env = {**env, "TMPDIR": tmp}  # worker is killed (Ctrl-C) before its own cleanup runs
        proc = _start(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            _, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill(proc)
            return for_spec(spec, "failed", error=f"timed out after {timeout:g} s (--timeout)",
                            **known_fields(out_path))
        except BaseException:  # Ctrl-C or SIGTERM: stop the child with us
            _kill(proc)
            raise
        if out_path.exists():
            record = as_record(json.loads(out_path.read_text()))
            if record.status == "failed" and any(m in stderr for m in OOM_MARKERS):
                record.error = f"out of memory: {record.error}"
            return record
        return for_spec(spec, "failed", error=_reason_from_stderr(stderr, proc.returncode),
                        **known_fields(out_path))


def known_fields(out_path: Path) -> dict[str, object]:
    """What a worker that timed out or died knew of itself (its device, platform, matmul precision, parameter
    count: ``worker.known_path``, a :class:`record.Known`) by flat name, so its failed record says what it was;
    {} when it knew nothing yet (or wrote what is not one)."""
    from twinbench.worker import known_path

    try:
        return msgspec.json.decode(known_path(out_path).read_bytes(), type=Known).fields()
    except (OSError, ValueError):  # msgspec's DecodeError is a ValueError
        return {}


def run_module(module: str, args: list[str], timeout: float) -> tuple[int, str]:
    """Run ``python -m MODULE ARGS`` in a fresh process (e.g. one framework of ``twinbench score``).

    Returns (exit code, one-line reason or ""). The child writes its results to files it is given in
    ``args``; a timeout kills its whole process group. The child's environment says the load per core it
    started under, as a worker's does.
    """
    cmd = [sys.executable, "-m", module, *args]
    with LOAD.track():
        proc = _start(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(LOAD.reading()))
        return _wait(proc, timeout)


def _wait(proc: subprocess.Popen, timeout: float) -> tuple[int, str]:
    try:
        _, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        return 124, f"timed out after {timeout:g} s (--timeout)"
    except BaseException:  # Ctrl-C or SIGTERM: stop the child with us
        _kill(proc)
        raise
    return proc.returncode, "" if proc.returncode == 0 else _reason_from_stderr(stderr, proc.returncode)


def worker_command(spec: RunSpec, args: list[str]) -> list[str]:
    """``python -m twinbench.worker ARGS``, or the same through torchrun (one worker per device) for the
    strategies registered with that launcher; every rank runs the same measurement code path."""
    from twinbench.strategies import registry

    if registry.get(spec.framework, spec.strategy.name).launcher == "torchrun":
        from twinbench.distributed.torchrun import launch_command

        return launch_command(spec, args)
    return [sys.executable, "-m", "twinbench.worker", *args]


def _start(cmd: list[str], **kwargs: Any) -> subprocess.Popen:
    """``Popen(cmd)`` in a session of its own, so that a Ctrl-C or SIGTERM never leaves the child running.

    The callers kill the child when an interrupt reaches their ``try`` around the wait; one that arrived while
    ``Popen`` itself ran (the child started, ``proc`` not yet assigned) would skip that ``try``. So, in the main
    thread, SIGINT and SIGTERM (those not ignored) are held while ``Popen`` runs; a held one kills the new
    child, then is delivered to the handler it was meant for.
    """
    watched = [s for s in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(s) not in (signal.SIG_IGN, None)]
    if threading.current_thread() is not threading.main_thread() or not watched:
        return subprocess.Popen(cmd, start_new_session=True, **kwargs)
    held: list[int] = []
    previous = {s: signal.signal(s, lambda signum, _frame: held.append(signum)) for s in watched}
    proc = None
    try:
        proc = subprocess.Popen(cmd, start_new_session=True, **kwargs)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if held:
            if proc is not None:
                _kill(proc)
            for signum in held:
                signal.raise_signal(signum)
    return proc


def _kill(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def run_many(
    specs: Iterable[RunSpec],
    out_dir: Path,
    timeout: float,
    on_start: Callable[[RunSpec], None] = lambda s: None,
    on_done: Callable[[RunSpec, Record], None] = lambda s, r: None,
    jobs: Any = None,
    retry_failed: bool = False,
    notes: list[str] | None = None,
) -> list[Record]:
    """Run every spec not already in ``out_dir/results.jsonl``; return all records for these specs.

    Each run is a fresh local subprocess, or with ``jobs`` (``launch.JobOptions`` of ``--launcher local|slurm``)
    a submitit job that runs it the same way (launch/jobs.py). A row that failed because the scheduler ended
    its job (killed, preempted, node failure: ``launcher_state``) is run again by ``--resume``; a run that
    failed by itself is not, unless ``retry_failed`` (``--retry-failed``). SIGTERM is turned into
    :class:`Interrupted` like Ctrl-C, so a killed compare stops cleanly (and cancels the jobs it submitted).
    A record that cannot be written is kept elsewhere and ``notes`` gets a line saying where.
    """
    check_out_dir(out_dir)
    path = out_dir / RESULTS
    specs = list(specs)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    records = []
    caches = None
    try:
        with out_lock(out_dir):
            problems: list[str] = []
            try:
                found, bad = read_records(path, problems) if path.is_file() else ([], 0)
            except OSError as e:  # over the reader's caps (size, lines that are not records): one line
                raise SpecError(f"--out {out_dir}: {e}") from None
            if bad:  # garbage, a torn last line: skipped (the next record starts on a line of its own)
                print(f"warning: {skipped_note(path, bad, problems)}", file=sys.stderr)
            done = {r.run.run_id: r for r in found if not r.launch.launcher_state
                    and not (retry_failed and r.status == "failed")}
            caches = compile_cache.CachePlan(specs)  # each run's compilation cache directory, cold or warm
            if jobs is not None and jobs.jobs:
                from twinbench.launch.jobs import submit_many

                return submit_many(specs, out_dir, timeout, jobs, done, on_start, on_done, caches.root,
                                   run_one, save=lambda p, r: save_record(p, r, notes))
            for spec in specs:
                rid = spec.run_id()
                if rid in done:
                    records.append(done[rid])
                    on_done(spec, done[rid])
                    continue
                on_start(spec)
                record = caches.run(spec, lambda s: run_one(s, timeout))
                save_record(path, record, notes)
                records.append(record)
                on_done(spec, record)
    except KeyboardInterrupt:
        raise Interrupted(str(path)) from None
    finally:
        if caches is not None:
            caches.close()
        signal.signal(signal.SIGTERM, previous)
    return records


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def interruptible(where: str) -> Iterator[None]:
    """Ctrl-C or SIGTERM anywhere inside (a run, a module run by :func:`run_module`, the reading between) as
    :class:`Interrupted`, as :func:`run_many` does: every command that runs things ends the same way (exit 130,
    one line), whichever of its own runs was stopped."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_interrupt) if main else None
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(where) from None
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)


@dataclass
class ScriptRun:
    """How a user script run by :func:`run_script` ended."""

    returncode: int | None  # None when it was stopped at the timeout
    output_tail: str  # the last lines of its stdout and stderr, interleaved
    timed_out: bool
    wall_s: float


def run_script(cmd: list[str], cwd: Path, timeout: float, env: dict[str, str] | None = None,
               grace_s: float = 10.0, tail_lines: int = 60) -> ScriptRun:
    """Run ``cmd`` (a user's script under a bootstrap, e.g. ``twinbench doctor``) in ``cwd``.

    Its output goes to a temporary file (never to ``cwd``) whose tail is returned. At ``timeout`` the
    process group gets SIGTERM (so the child can write what it has), then SIGKILL ``grace_s`` later.
    """
    start = time.perf_counter()
    before = descendants(os.getpid())
    with tempfile.TemporaryFile(prefix="twinbench-script-") as log, _subreaper(), _sigterm_raises():
        proc = _start(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                      env={**os.environ, **(env or {})})
        timed_out = False
        try:
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=grace_s)
                except subprocess.TimeoutExpired:
                    _kill(proc)
            except BaseException:  # Ctrl-C or SIGTERM: stop the child with us
                _kill(proc)
                raise
        finally:
            _kill_tree(proc, before)
        log.seek(0)
        lines = log.read().decode(errors="replace").splitlines()
    return ScriptRun(None if timed_out else proc.returncode, "\n".join(lines[-tail_lines:]), timed_out,
                     time.perf_counter() - start)


def descendants(pid: int) -> set[int]:
    """The pids of ``pid``'s descendants now (Linux ``/proc``; empty elsewhere)."""
    out, todo = set(), [pid]
    while todo:
        parent = todo.pop()
        try:
            tids = [t.name for t in Path(f"/proc/{parent}/task").iterdir()]
        except OSError:
            continue
        for tid in tids:
            with contextlib.suppress(OSError, ValueError):
                kids = {int(c) for c in Path(f"/proc/{parent}/task/{tid}/children").read_text().split()} - out
                out |= kids
                todo.extend(kids)
    return out


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """While the script runs, a SIGTERM to this process raises ``SystemExit(143)`` (in the main thread), so the
    script's process group is stopped with it, as on Ctrl-C; Python's default would end this process at once
    and leave the script running."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


_SUBREAPER = False


@contextlib.contextmanager
def _subreaper() -> Iterator[None]:
    """Make this process the subreaper of the script's tree while it runs (Linux ``PR_SET_CHILD_SUBREAPER``):
    a descendant whose parent ends (a daemon's double fork) is re-parented here, not to init, so it stays
    findable and is stopped with the rest."""
    global _SUBREAPER
    libc = None
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        _SUBREAPER = libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        _SUBREAPER = False
    try:
        yield
    finally:
        if _SUBREAPER and libc is not None:
            libc.prctl(36, 0, 0, 0, 0)
        _SUBREAPER = False


def _kill_tree(proc: subprocess.Popen, before: set[int]) -> None:
    """Stop everything the script started: its process group, then every descendant of ours that was not there
    before it started (forked children, and ``setsid`` daemons: re-parented to us, the subreaper); reap them."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    if proc.poll() is None:
        _kill(proc)
    targets = descendants(os.getpid()) - before
    for _ in range(3):  # a process may fork while we kill: look again
        for pid in targets:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        mine = descendants(os.getpid()) - before
        if not mine & targets and not mine - targets:
            break
        targets = mine
    for pid in targets:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and any(_reap(pid) for pid in targets):
        time.sleep(0.02)


def _reap(pid: int) -> bool:
    """Reap ``pid`` if it is our child and has ended; True while it is our child still running."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    return done == 0
