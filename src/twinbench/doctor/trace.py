"""``twinbench doctor --trace DIR``: a few steady steps of the user's script recorded with its framework's
profiler, ready for ``twinbench explain DIR``.

The child process (``bootstrap``) installs a :class:`StepProfiler` on the recorder: from the end of step
call ``TRACE_FROM - 1`` (compilation is over) to the end of ``TRACE_STEPS`` steps later, PyTorch's
``torch.profiler`` (a Chrome trace, a ``ProfilerStep#N`` from each step's end to the next) or
JAX's ``jax.profiler`` (an xplane under ``DIR/plugins/profile/``, a ``StepTraceAnnotation`` from each step's
end to the next, and, while it records, each step waited for at its end so that its kernels run inside its
annotation, as docs/explain.md's recipe does) runs. For JAX, ``XLA_FLAGS=--xla_dump_to=
DIR/hlo`` is set before the script starts (explain needs the compiled HLO to categorise XLA:CPU kernels), and
the step's compiled module is copied to ``DIR/step.hlo.txt``. ``DIR/trace.json`` says what was recorded.

A profiler slows the steps it records: the recorder leaves the iterations it weighed on out of the doctor's
step time (``Recorder.left_out``), and once the run's observations exist :func:`write_timing` adds the step
time with and without the profiler to ``DIR/trace.json``, for explain to show, with what else the doctor saw
that decides whether a trace can name a cause: the load other processes put on the machine while the steps
ran (``load``), and how the step ran (``step_kind``, ``eager_ops_per_step``: JAX primitives dispatched one by
one outside jit per step).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from twinbench import backends
from twinbench.doctor.observed import Note, TraceInfo
from twinbench.doctor.recorder import Recorder

if TYPE_CHECKING:  # read in twinbench's process only (this module also runs in the script's: no msgspec there)
    from twinbench.doctor.observations import CompileLog, Observations, TraceTimes
from twinbench.hlo_text import dumped_module

TRACE_FROM = 4  # the first step call recorded (0-based): the first ones compile
TRACE_STEPS = 5  # steps recorded
HLO_DIR = "hlo"
TRACE_FILE = ("framework", "steps", "files", "hlo")  # what DIR/trace.json holds of TraceInfo (the rest is this run's)


def trace_env(trace_dir: Path) -> dict[str, str]:
    """The child's environment for ``--trace``: where to record, and XLA's HLO dump there (a flag the user's
    XLA_FLAGS already sets wins)."""
    from twinbench.xla_flags import with_defaults

    hlo = trace_dir.resolve() / HLO_DIR
    flags = with_defaults(os.environ.get("XLA_FLAGS", ""), (f"--xla_dump_to={hlo}",))
    return {"TWINBENCH_DOCTOR_TRACE": str(trace_dir.resolve()), "XLA_FLAGS": flags}


def dump_dir() -> Path | None:
    """Where XLA dumps its HLO in this process (``--xla_dump_to`` in XLA_FLAGS), if it does."""
    m = re.search(r"--xla_dump_to=(\S+)", os.environ.get("XLA_FLAGS", ""))
    return Path(m.group(1)) if m else None


def write_timing(trace_dir: Path, obs: Observations) -> None:
    """Add the run's step time with and without the profiler to ``DIR/trace.json`` once its observations exist
    (``Recorder.trace_timing``): ``traced_step_ms`` (median, one traced step's start to the next) and
    ``traced_steps``; ``untraced_step_ms`` and ``untraced_steps`` (the doctor's steady step time with the
    traced iterations left out) only where enough steps ran outside the trace. ``twinbench explain`` reads
    them (:mod:`twinbench.explain.doctor_timing`). A failure is noted in the observations, never raised."""
    from twinbench.doctor.observations import TraceTimes, TraceTiming, typed

    obs = typed(obs)  # (JSON as read, a test's, is read as declared)
    t, path = obs.trace_timing or TraceTiming(), trace_dir / "trace.json"
    if not path.is_file():
        return
    traced = t.traced_step_ms if t.traced_step_ms is not None and t.traced_step_ms > 0 else None
    untraced = t.untraced_step_ms if t.untraced_step_ms is not None and t.untraced_step_ms > 0 else None
    spread = t.untraced_spread if untraced is not None and t.untraced_spread is not None and \
        t.untraced_spread >= 0 else None
    cond = conditions(obs)
    times = TraceTimes(traced_step_ms=round(traced, 3) if traced else None, traced_steps=t.traced_steps if traced
                       else None, untraced_step_ms=round(untraced, 3) if untraced else None,
                       untraced_steps=t.untraced_steps if untraced else None, untraced_spread=spread,
                       load=cond.load, step_kind=cond.step_kind, eager_ops_per_step=cond.eager_ops_per_step,
                       compiles=cond.compiles)
    try:
        path.write_text(times.merged(path.read_text()))
    except (OSError, ValueError) as e:
        if obs.info.trace is not None:
            obs.info.trace.timing_error = f"{path}: {type(e).__name__}: {e}"[:300]


def conditions(obs: Observations) -> TraceTimes:
    """What the doctor saw of the run that decides whether its trace may name a cause (see the module):
    ``load`` (the cores other processes kept busy over the steady steps, the machine's cores, and ``busy``
    when that is the share the doctor warns at), ``step_kind``, ``eager_ops_per_step`` and the compile log."""
    from twinbench.doctor.findings.base import _per_step
    from twinbench.doctor.findings.machine import BUSY_WARN_SHARE
    from twinbench.doctor.observations import Load, TraceTimes, typed

    obs = typed(obs)
    m, load = obs.machine, None
    if m is not None and m.cores > 0 and m.others_cores is not None:
        load = Load(others_cores=round(float(m.others_cores), 3), cores=m.cores,
                    busy=bool(m.others_cores >= BUSY_WARN_SHARE * m.cores))
    eager = _per_step(obs, "eager_ops")
    return TraceTimes(load=load, step_kind=obs.step_kind, eager_ops_per_step=None if eager is None else round(eager, 1),
                      compiles=compile_log(obs))


def compile_log(obs: Observations) -> CompileLog | None:
    """What compiled after step 1, for explain's compilation row (:mod:`twinbench.explain.compilation`): the
    steps, the backend compiles and their seconds, the script's retraces (JAX's cache misses, Dynamo's
    recompiles) by cause with up to 3 of the shape changes ``jax_explain_cache_misses`` printed, and the
    finding that says the fix. None when nothing compiled after step 1."""
    from twinbench.doctor.findings.recompiles import _is_user_recompile, recompile_cause
    from twinbench.doctor.observations import CompileLog, typed

    obs = typed(obs)
    t0 = obs.steady_from_t

    def steady(kind: str) -> list[Note]:  # the notes after step 1 (as the findings read them)
        return [] if t0 is None else [n for n in obs.noted(kind) if n.t >= t0]

    compiles = steady("compile")
    misses = [n.message for n in steady("cache_miss") if not n.nested and _is_user_recompile(n.message)]
    torch_recompiles = obs.noted("recompile")
    if not compiles and not misses and not torch_recompiles:
        return None
    causes: dict[str, int] = {}
    for m in misses:
        causes[recompile_cause(m)] = causes.get(recompile_cause(m), 0) + 1
    shapes = [ln.strip().lstrip("* ")[:200] for m in misses for ln in m.splitlines() if " now " in ln
              and " and before " in ln][:3]
    finding = "jax-recompile" if misses else "torch-recompile" if torch_recompiles else ""
    return CompileLog(steps=obs.steps, compiles=len(compiles), compile_s=round(sum(n.s for n in compiles), 3),
                      retraces=len(misses) or len(torch_recompiles), causes=causes, shapes=shapes, finding=finding)


def explain_command(trace_dir: Path, info: TraceInfo) -> str:
    """The ``twinbench explain`` command for a trace the doctor recorded (explain reads the folder's
    ``step.hlo.txt`` itself: ``--hlo`` only where the step's module was not found in the dump)."""
    hlo = f" --hlo {info.hlo}" if info.hlo and not (trace_dir / "step.hlo.txt").is_file() else ""
    return f"twinbench explain {trace_dir}{hlo}"


class StepProfiler:
    """Starts the framework's profiler at a steady step's end and stops it ``TRACE_STEPS`` steps later."""

    def __init__(self, rec: Recorder, trace_dir: str) -> None:
        self.rec, self.dir = rec, Path(trace_dir)
        self.framework: str | None = None
        self.started: Any = None  # the backend's profiler, from start_trace
        self.recorded: list[int] = []
        self.t0 = 0.0
        self.annotation: Any = None  # JAX: the open StepTraceAnnotation

    def install(self) -> None:
        self.rec.on_step_done.append(self.on_step_done)
        self.rec.finalizers.append(self.stop)

    def on_step_done(self, index: int) -> None:
        if self.framework is None and index == TRACE_FROM - 1:
            self.start()
        elif self.framework is not None and self.t0:
            self.recorded.append(index)
            if len(self.recorded) >= TRACE_STEPS:
                self.stop()
            else:
                self._next_annotation(index)

    def _next_annotation(self, index: int | None) -> None:
        """End the open step annotation and open the next one (``index`` None: none): the backend's mark of a
        step (PyTorch: a ``ProfilerStep#N`` record_function; JAX: a ``StepTraceAnnotation``, after waiting for
        the steps dispatched so far)."""
        self.rec.internal += 1
        try:
            backend = backends.get(str(self.framework))
            backend.wait_dispatched()
            if self.annotation is not None:
                self.annotation.__exit__(None, None, None)
                self.annotation = None
            if index is None:
                return
            self.annotation = backend.step_annotation(index)
            self.annotation.__enter__()
        finally:
            self.rec.internal -= 1

    def start(self) -> None:
        self.rec.internal += 1
        try:
            kind = self.rec.kinds.get(self.rec.step_key() or "", "")
            self.framework = "torch" if kind.startswith("torch") else "jax"
            self.started = backends.get(self.framework).start_trace(self.dir)
            self.t0 = time.perf_counter()
            self.rec.traced = (TRACE_FROM - 1, None)  # the step time leaves these iterations out (Recorder.left_out)
            self._next_annotation(TRACE_FROM - 1)
        except Exception as e:  # the findings go on without the trace; the error is reported
            self.rec.info.trace_error = f"start: {type(e).__name__}: {e}"[:300]
            self.t0, self.rec.traced = 0.0, None
        finally:
            self.rec.internal -= 1

    def stop(self) -> None:
        """Stop recording (at the last step, or at the script's end if it ran fewer steps) and write it."""
        if not self.t0:
            return
        self.t0, recorded = 0.0, list(self.recorded)
        key = self.rec.step_key()
        self.rec.traced = (TRACE_FROM - 1, self.rec.call_index(key) if key else None)
        self.rec.internal += 1
        try:
            if not recorded:  # the script ended at the step the profiler started on: no step to explain
                self._discard()
                return
            self.dir.mkdir(parents=True, exist_ok=True)
            backend = backends.get(str(self.framework))
            self._next_annotation(None)  # the steps dispatched so far run inside the trace
            files = backend.stop_trace(self.started, self.dir)
            hlo = dump_dir() if backend.READS_XLA_FLAGS else None  # --xla_dump_to: the compiled step's HLO
            if hlo:
                self._copy_step_hlo()
            info = TraceInfo(framework=str(self.framework), steps=recorded, files=files, hlo=str(hlo) if hlo else None)
            (self.dir / "trace.json").write_text(json.dumps({k: getattr(info, k) for k in TRACE_FILE}, indent=1))
            info.dir = str(self.dir)
            self.rec.info.trace = info
        except Exception as e:
            self.rec.info.trace_error = f"stop: {type(e).__name__}: {e}"[:300]
        finally:
            self.rec.internal -= 1

    def _discard(self) -> None:
        """Stop the profiler and keep nothing of it: the folder holds no trace (``--trace`` took it empty or new,
        so the profile under it is this run's), and the report says why."""
        self._next_annotation(None)
        with tempfile.TemporaryDirectory() as scratch:  # what the profiler writes as it stops goes nowhere
            backends.get(str(self.framework)).stop_trace(self.started, Path(scratch))
        shutil.rmtree(self.dir / "plugins", ignore_errors=True)  # a JAX profile is written where it started

    def _copy_step_hlo(self) -> None:
        """The step's compiled module from the HLO dump, as ``step.hlo.txt`` beside the trace (the last compile
        of the module named after the step's function, else the largest one: ``hlo_text.dumped_module``)."""
        where = dump_dir()
        name = (self.rec.step_key() or "").rsplit(":", 1)[-1].split(".")[-1]
        best = dumped_module(where, f"jit_{name}") if where else None
        if best is not None:
            shutil.copyfile(best, self.dir / "step.hlo.txt")
