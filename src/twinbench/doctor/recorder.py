"""The doctor's event store: step calls, counters and notes, filled by the framework instruments.

Instruments (``instruments_jax``, ``instruments_torch``) only record; ``observations()`` turns what was
recorded into a plain, JSON-serialisable dict that ``findings.diagnose`` reads. The same dict travels from
the bootstrap (in the user's script process) to the ``twinbench doctor`` command, and is built in-process
by ``twinbench.watch()``.

Steps. Every call of a *step candidate* (a jitted function, an eager Optax update, ``Optimizer.step``) is
recorded with a snapshot of all counters taken when it starts. Which candidate is the step is decided at
the end (the most-called one; PyTorch's ``Optimizer.step`` wins when present), and per-step rates come from
counter differences between consecutive step starts, skipping the first step (it carries compilation): ``summary``
turns the calls into the observations.

Where each step's time goes. Each step call also records when its results were ready on the device: at once
for a synchronous step (PyTorch on the CPU; on CUDA after ``torch.cuda.synchronize()``), and for a JAX
jitted step when ``block_until_ready`` on one of its outputs returns in the doctor's watcher thread (so the
loop keeps its asynchronous dispatch). Each steady iteration (one step start to the next) then splits into
the step (call to results ready), the DataLoader's ``next``, known host work (eager ops, compilation), and
the time the device waited for the host between steps (``split`` in the observations).
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from twinbench.doctor.observed import Info, Note, ScriptError
from twinbench.doctor.summary import ASYNC_KINDS, MIN_STEADY_STEPS, observations
from twinbench.measure import page_faults
from twinbench.measure.interference import runqueue_wait_s

MARK_KEY = "mark:twinbench.doctor.step()"  # the user marked the step explicitly
OPTIMIZER_RATIO = 8  # an optimizer stepped more rarely than this against the most stepped one marks no iteration
ACTIVE: list[Recorder] = []  # the recorder of the running session (for twinbench.doctor.step())
LOAD_EVERY_S = 0.5  # the machine's load is sampled at a step start at most this often
MAX_NOTES = 2000  # text notes kept per kind (cache-miss explanations, host-read sites, ...)
OWN_SHARE = 0.1  # an iteration whose doctor's own work stretched the loop's part of it by this share is left out
SNAPSHOT_EVERY_S = 1.0  # the observations so far are written at a step's end this often, and at the 2**k-th step
# (a script killed at --timeout after ignoring SIGTERM keeps what was seen until then)



@dataclass(slots=True)
class InputBlock:
    """The input check after one step call (``instruments_jax.input_check``): the step called back to back on the
    batch already built; that call's iteration is left out of the loop's."""
    index: int  # the step call it followed
    replay_ms: list[float] = field(default_factory=list)  # each call, to its results ready
    replay_cpu_ms: list[float] = field(default_factory=list)  # the process's CPU time in each


@dataclass(slots=True)
class Cut:
    """One steady iteration cut into parts that add up to it (:meth:`Recorder._cut`), in seconds."""
    it: float  # the whole iteration, one step call to the next
    step: float  # the call to its results ready (torch: forward, backward and update)
    own: float  # the call's own Python after its results were ready (asynchronous)
    host: float  # known host work: eager ops, compilation, host reads
    runq: float  # the loop's thread waiting for a CPU that others held
    data: float  # the DataLoader's wait
    data_raw: float  # ... whatever part it overlapped
    input_own: float  # the input's wait less the loop thread's wait for a CPU
    idle: float  # the rest: the device idle while the loop's own Python ran
    to_forward: float  # PyTorch: an optimizer step's end to the next forward, less host reads
    between: float  # asynchronous: the loop's code between the call's return and the next call
    between_cpu: float  # ... its CPU time


class StopScript(BaseException):
    """Raised inside the user's script to end it cleanly (``--steps N`` reached, or ``--timeout``).

    A ``BaseException`` so that a script's ``except Exception`` does not swallow it.
    """


class Recorder:
    """Counters, step-candidate calls and notes, shared by every instrument of one watched run."""

    def __init__(self, max_steps: int | None = None) -> None:
        self.t_start = time.perf_counter()
        self.max_steps = max_steps
        self.counters: Counter[str] = Counter()  # host_reads, eager_ops, h2d_guard, ...
        self.seconds: Counter[str] = Counter()  # data_wait_s, eager_s, compile_s, ...
        self.calls: dict[str, list[tuple[float, dict[str, float]]]] = defaultdict(list)
        self.ready: dict[str, dict[int, float]] = defaultdict(dict)  # candidate -> call index -> results ready
        self.returned: dict[str, dict[int, float]] = defaultdict(dict)  # ... -> the call returned to the user
        self.returned_runq: dict[str, dict[int, float | None]] = defaultdict(dict)  # runqueue_wait_s() then
        self.returned_cpu: dict[str, dict[int, float]] = defaultdict(dict)  # ... the loop thread's CPU time then
        self.in_call = False  # the loop's thread is inside a step candidate's call (the sampler's test)
        self.loop_thread: int | None = None  # the thread that calls the step (the loop's)
        self.sampler: Any = None  # samples.LoopSampler: where in the user's code the loop runs between calls
        # the input check (instruments_jax.input_check): per step call that ran one, the step called back to back
        # on the batch already built; those iterations are left out
        self.input_blocks: list[InputBlock] = []
        self.check_input = False  # twinbench doctor: time the step on a pre-built batch between the loop's steps
        # the doctor's own work in the loop's thread (the observations' snapshot, the input check's block): step
        # key -> the step's call index whose iteration held it -> its seconds (:meth:`own_work`)
        self.own_s: dict[str, dict[int, float]] = defaultdict(dict)
        self.kinds: dict[str, str] = {}  # candidate key -> "jit" | "pmap" | "optax" | "torch-optimizer"; "-lib"
        # appended for a library's own jitted helpers (a step only when nothing else is called)
        self.notes: dict[str, list[Note]] = defaultdict(list)
        self.info = Info()  # static facts: frameworks, devices, donation, ...
        self.frameworks: set[str] = set()
        self.lock = threading.Lock()
        self.internal = 0  # > 0 while the doctor itself runs framework code (not the user's)
        self.torch_optimizers = 0  # torch.optim optimizers the script made (their step is the training step)
        self.stopped_early = False
        self.timed_out = False
        self.error: ScriptError | None = None
        self.finalizers: list[Callable[[], None]] = []  # instruments add static facts at the end
        # (t, all cores' busy s, own CPU s, cores, this process's page faults and CPU time: measure/page_faults)
        self.load: list[tuple[float, float, float, int, Any]] = []
        # the host-read check: per step call, whether the loop's reads of that step's outputs waited for them
        # ("waited") or were answered one step late by the doctor ("deferred"); see instruments_jax.host_reads
        self.read_mode: dict[int, str] = {}
        self.check_reads = False  # twinbench doctor: check the cost of reads of the step's outputs (host_reads)
        # the thread check (thread_check.py): its plan and samples' home, and per step call in its blocks, "as-written"
        # or "fixed" (torch's threads set to the free cores); the fixed ones are left out like deferred reads
        self.thread_check: Any = None  # observed.ThreadCheck
        self.thread_mode: dict[int, str] = {}
        self.drain: Callable[[], None] | None = None  # waits for every step dispatched (JAX: live arrays)
        self.drained_at: float | None = None  # when they were all done, at --steps N
        # --trace: the step calls at whose end the profiler started and stopped (None: not stopped yet)
        self.traced: tuple[int, int | None] | None = None
        self.on_step_done: list[Callable[[int], None]] = []  # called with the step call's index (a profiler)
        self.snapshot: Callable[[], None] | None = None  # writes the observations so far (the bootstrap's)
        self.snapshot_every_s = SNAPSHOT_EVERY_S
        self._last_snapshot = self.t_start
        self._sample_load(self.t_start)

    def finish(self) -> None:
        """Run every instrument's finalizer once (they may call framework code: marked internal)."""
        if self.sampler is not None:
            self.sampler.stop()
        finalizers, self.finalizers = self.finalizers, []
        for fn in finalizers:
            try:
                fn()
            except Exception as e:  # a failing finalizer loses one fact, never the report
                self.info.finalize_errors.append(f"{type(e).__name__}: {e}"[:200])

    # -- recording -------------------------------------------------------------------------------------
    def count(self, kind: str, n: float = 1) -> None:
        self.counters[kind] += n

    def add_seconds(self, kind: str, s: float) -> None:
        self.seconds[kind] += s

    def note(self, kind: str, **payload: Any) -> None:
        """Keep a note of ``kind`` (observations.NOTES) with ``payload``'s fields of :class:`Note`."""
        notes = self.notes[kind]
        if len(notes) < MAX_NOTES:
            notes.append(Note(**payload, t=time.perf_counter() - self.t_start, step=self.steps_so_far()))

    def step_call(self, key: str, kind: str, t: float | None = None) -> None:
        """A step candidate starts (at ``t`` when the user's call began earlier, in a wrapper around it)."""
        snap = {**self.counters, **{f"{k}:s": v for k, v in self.seconds.items()}}
        snap["loop_cpu_s:s"] = time.thread_time()  # the loop's thread's CPU time (host work between calls)
        snap["proc_cpu_s:s"] = time.process_time()  # the process's (the input check's A/B on a CPU backend)
        self.in_call, self.loop_thread = True, threading.get_ident()
        if self.sampler is None and self.check_input and kind in ASYNC_KINDS and len(self.calls.get(key, ())) == 1:
            # the 2nd call of an asynchronous step: steady steps begin; where the loop's thread runs between calls
            from twinbench.doctor.samples import LoopSampler

            self.sampler = LoopSampler(self, key)
        runq = runqueue_wait_s()  # the loop's thread's wait for a CPU so far (None where the kernel does not say)
        if runq is not None:
            snap["runq_s:s"] = runq
        self.kinds[key] = kind
        now = time.perf_counter() if t is None else t
        self.calls[key].append((now, snap))
        if now - (self.load[-1][0] if self.load else -1.0) >= LOAD_EVERY_S:
            self._sample_load(now)

    def _sample_load(self, now: float) -> None:
        """The busy time of every core and this process's CPU time (other processes' load is the difference)."""
        from twinbench.measure.interference import core_busy_s, tree_cpu_s

        busy = core_busy_s()
        if busy is not None:
            self.load.append((now, sum(busy.values()), tree_cpu_s(os.getpid()), len(busy), page_faults.usage()))

    def machine_load(self, t0: float | None, t1: float | None) -> dict[str, float] | None:
        """Cores that other processes kept busy between the samples nearest ``t0``..``t1`` (the steady steps;
        the whole run where they span too little time), and the cores of the machine: observations.Machine's
        figures (a Struct the doctor reads; this process has only the standard library)."""
        self._sample_load(time.perf_counter())
        if len(self.load) < 2:
            return None
        inside = [x for x in self.load if t0 is not None and t1 is not None and t0 <= x[0] <= t1 + LOAD_EVERY_S]
        a, b = (inside[0], inside[-1]) if len(inside) >= 2 and inside[-1][0] - inside[0][0] >= 1.0 else \
            (self.load[0], self.load[-1])
        wall = b[0] - a[0]
        if wall <= 0:
            return None
        own = (b[2] - a[2]) / wall
        out = {"others_cores": round(max((b[1] - a[1]) / wall - own, 0.0), 3), "own_cores": round(own, 3),
               "cores": b[3], "window_s": round(wall, 2)}
        if a[4] is not None and b[4] is not None:  # the script's page faults a second, the kernel's share of its CPU
            faults = page_faults.per_step(a[4], b[4], 1)
            out |= {"page_faults_per_s": round((faults.page_faults_per_step or 0.0) / wall, 1),
                    "kernel_cpu_share": faults.kernel_cpu_share}
        return out

    def call_index(self, key: str) -> int:
        """The index of the candidate's call that started last (for :meth:`step_ready`)."""
        return len(self.calls[key]) - 1

    def step_ready(self, key: str, index: int, t: float | None = None) -> None:
        """The results of call ``index`` of candidate ``key`` were ready on the device at ``t`` (now)."""
        t = time.perf_counter() if t is None else t
        seen = self.ready[key].get(index)
        self.ready[key][index] = t if seen is None else min(seen, t)  # whoever saw it first: reader or watcher

    def step_returned(self, key: str, index: int, t: float | None = None) -> None:
        """Call ``index`` of candidate ``key`` returned to the user's code at ``t`` (now); a wrapper around the
        call (``nnx.jit``'s graph merge) returns later and says so last."""
        self.returned[key][index] = time.perf_counter() if t is None else t
        self.returned_runq[key][index] = runqueue_wait_s()  # the loop's thread: its wait for a CPU so far
        self.returned_cpu[key][index] = time.thread_time()
        self.in_call = False

    def in_flight(self) -> tuple[str, int] | None:
        """The step call whose results are not ready yet (the device is busy with it), if any."""
        key = self.step_key()
        if key is None or not self.calls.get(key):
            return None
        index = len(self.calls[key]) - 1
        return None if index in self.ready.get(key, {}) else (key, index)

    def step_done(self, key: str, synced: bool = False) -> None:
        """A step candidate returned (``synced``: its results are ready, the step is synchronous): end the
        script if it was the ``max_steps``-th step."""
        if synced:
            self.step_ready(key, self.call_index(key))
        n = len(self.calls[key])
        if self.snapshot is not None and (time.perf_counter() - self._last_snapshot >= self.snapshot_every_s
                                          or (n & (n - 1) == 0 and self.step_key() == key)):  # also at 2**k steps
            t_snap = time.perf_counter()
            try:
                self.snapshot()
            except Exception as e:  # a snapshot is insurance: never the script's failure
                self.info.snapshot_error = f"{type(e).__name__}: {e}"[:200]
            self._last_snapshot = time.perf_counter()  # its own cost is not counted against the interval
            self.own_work(self._last_snapshot - t_snap)
        if self.on_step_done and self.step_key() == key:
            for fn in self.on_step_done:
                fn(len(self.calls[key]) - 1)
        self.step_returned(key, n - 1)  # after the doctor's own work above: the call's, not the loop's
        if self.max_steps and self.step_key() == key and len(self.calls[key]) >= self.max_steps:
            self.stopped_early = True
            if self.drain is not None and self.kinds.get(key) in ASYNC_KINDS:  # the steps dispatched so far done
                self.internal += 1
                try:
                    self.drain()
                    self.drained_at = time.perf_counter()
                except Exception as e:
                    self.info.drain_error = f"{type(e).__name__}: {e}"[:200]
                finally:
                    self.internal -= 1
            raise StopScript(f"--steps {self.max_steps} reached")

    def steps_so_far(self) -> int:
        key = self.step_key()
        return len(self.calls[key]) if key else 0

    def step_key(self, final: bool = False) -> str | None:
        """The step: torch's Optimizer.step if used (of the optimizer stepping least often, where several
        do), else the most-called jitted function or Optax update.

        While the run goes on (``final`` False), a ``loss.backward()`` is not the step once a torch optimizer
        exists: with gradient accumulation it is one of the step's micro-steps, and ``--steps``, the trace
        and the snapshots wait for the optimizer's step. At the end a script whose optimizer never stepped
        has ``loss.backward()`` as its step."""
        if MARK_KEY in self.calls:  # most specific signal first
            return MARK_KEY
        stepped = [k for k in self.calls if self.kinds.get(k) == "torch-optimizer"]  # one key an optimizer
        if stepped:  # several optimizers (a GAN's two, a critic stepped 5 times a generator's step): the one
            # stepping least often marks an iteration; within one call of it, the first to step (first seen).
            # One stepped far more rarely than the others (an auxiliary head's, now and then) marks none
            most = max(len(self.calls[k]) for k in stepped)
            regular = [k for k in stepped if most <= OPTIMIZER_RATIO * (len(self.calls[k]) + 1)]
            fewest = min(len(self.calls[k]) for k in regular)
            return next(k for k in regular if len(self.calls[k]) <= fewest + 1)
        compiled = [k for k in self.calls if self.kinds.get(k) == "torch-compiled"]
        if compiled:  # a torch.compile'd function: the whole step where no optimizer step is seen outside it
            return max(compiled, key=lambda k: len(self.calls[k]))
        if "torch:loss.backward" in self.calls:
            return None if self.torch_optimizers and not final else "torch:loss.backward"
        if not self.calls:
            return None
        kinds = self.kinds
        # jax.grad/value_and_grad calls outside jit mark the step only where no user jit does
        user_jit = any(kinds.get(k) in ("jit", "pmap") for k in self.calls)
        keys = [k for k in self.calls if not (user_jit and kinds.get(k) == "grad")]
        return max(keys, key=lambda k: (not kinds.get(k, "").endswith("-lib"), len(self.calls[k]),
                                        kinds.get(k) == "jit", kinds.get(k) == "grad"))

    def skipped(self, i: int) -> bool:
        """Iteration ``i`` (step call i to i+1) ran under the host-read check's deferred reads or the thread
        check's fixed count, or right after them (the queue drains, the pool is resized), or whose step call the
        input check followed with its own calls of the step: not the script as written, so left out of its step
        time and rates."""
        return (self.read_mode.get(i) == "deferred" or self.read_mode.get(i - 1) == "deferred"
                or self.thread_mode.get(i) == "fixed" or self.thread_mode.get(i - 1) == "fixed"
                or i in self.replayed())

    def own_work(self, s: float) -> None:
        """The doctor spent ``s`` seconds of its own in the loop's thread, in the step's iteration in progress
        (from its latest call to the next): not the loop's time (:meth:`left_out`, ``end_to_end_ms``)."""
        key = self.step_key()
        if key is not None and self.calls.get(key):
            own = self.own_s[key]
            i = len(self.calls[key]) - 1
            own[i] = own.get(i, 0.0) + s

    def own_iterations(self, key: str) -> set[int]:
        """The step's iterations that held the doctor's own work (:meth:`own_work`)."""
        return set(self.own_s.get(key, {}))

    def replayed(self) -> set[int]:
        """The step calls after which the input check called the step itself (their iterations hold its calls)."""
        return {b.index for b in self.input_blocks}

    def traced_iterations(self, key: str) -> tuple[set[int], list[int]]:
        """(the steady iterations the profiler weighed on, those wholly under it) for ``--trace``: from the one it
        started in (after a step call's end) to the one after the one it stopped in (the export, the first step
        after the profiler's waits), less the host-read check's; wholly under it: one step start to the next
        inside the profiler's span. Both empty without a trace."""
        if self.traced is None:
            return set(), []
        n = len(self.calls.get(key, []))
        first, last = self.traced[0], n - 1 if self.traced[1] is None else self.traced[1]
        weighed = {i for i in range(max(first, 1), min(last + 1, n - 2) + 1) if not self.skipped(i)}
        return weighed, [i for i in range(first + 1, min(last, n - 1)) if i >= 1 and not self.skipped(i)]

    def left_out(self, key: str) -> set[int]:
        """The iterations left out of the step time, the split and the rates: the host-read check's
        (:meth:`skipped`), and the profiler's (:meth:`traced_iterations`) when at least ``MIN_STEADY_STEPS``
        steady iterations remain without them (otherwise they stay in: ``trace_timing`` says so); and so the
        iterations that held the doctor's own work (:meth:`own_work`: a snapshot of the observations so far)
        where it stretched the loop's part of the iteration by ``OWN_SHARE`` or more (a slow step's iteration keeps
        a snapshot's few milliseconds), under the same condition."""
        calls = self.calls.get(key, [])
        n = len(calls)
        out = {i for i in range(1, n - 1) if self.skipped(i)}
        own = {i for i, s in self.own_s.get(key, {}).items()
               if 1 <= i < n - 1 and s >= OWN_SHARE * (calls[i + 1][0] - calls[i][0] - s)}
        if own and n - 2 - len(out | own) >= MIN_STEADY_STEPS:
            out |= own
        weighed = self.traced_iterations(key)[0]
        if weighed and n - 2 - len(out | weighed) >= MIN_STEADY_STEPS:
            out |= weighed
        return out

    def split(self, key: str, left_out: set[int] | None = None) -> dict[str, Any] | None:  # observations.Split
        # (as JSON: its "async" is a Python keyword, which a Struct renames and a dataclass cannot)
        """Time per steady iteration (one step start to the next), split by where it went, so that the parts add
        up to the iteration: the step up to its results being ready, the call's tail after that (asynchronous),
        the DataLoader's ``next``, known host work (eager ops, compilation, host reads), the loop's thread
        descheduled, and the rest (the device idle while the loop's own Python ran). Each iteration is cut into
        these parts, and each part is the mean over the central iterations (those between the 10th and 90th
        percentile of the iteration time: an evaluation or a checkpoint every N steps does not move it), so the
        parts sum to ``iter_ms``. Beside them, overlapping the step: ``between_ms`` (the call's return to the next
        call: the loop's code), ``between_cpu_ms`` (the loop thread's CPU time in it) and ``between_sites`` (where
        in the user's code it ran, sampled). None when no steady step's ready time is known.

        A PyTorch step (the optimizer's, or ``loss.backward()``) is the forward, backward and update: all of the
        iteration but the time from the step's end to the next forward pass (the next batch, zero_grad, logging)
        and the DataLoader's wait. ``left_out``: the iterations :meth:`left_out` leaves out (computed when not
        given)."""
        calls, ready = self.calls.get(key, []), dict(self.ready.get(key, {}))
        returned, returned_cpu = self.returned.get(key, {}), self.returned_cpu.get(key, {})
        kind = self.kinds.get(key)
        asynchronous, torch_step = kind in ASYNC_KINDS, kind in ("torch-optimizer", "torch-backward")
        left_out = self.left_out(key) if left_out is None else left_out
        rows, kept = [], []
        for i in range(1, len(calls) - 1):
            (t0, s0), (t1, s1) = calls[i], calls[i + 1]
            if i not in ready or i in left_out:
                continue
            rows.append(self._cut(t1 - t0, t0, s0, s1, ready[i], returned.get(i), returned_cpu.get(i),
                                  self.returned_runq.get(key, {}).get(i), asynchronous, torch_step))
            kept.append(i)
        if not rows:
            return None
        its = sorted(r.it for r in rows)
        lo, hi = its[len(its) // 10], its[-1 - len(its) // 10]
        band = [r for r in rows if lo <= r.it <= hi] or rows

        def mean(k: str) -> float:
            return 1e3 * statistics.fmean(getattr(r, k) for r in band)

        out = {"iterations": len(rows), "iterations_split": len(band), "iter_ms": mean("it"),
               "step_ms": mean("step"), "data_ms": mean("data"), "host_ms": mean("host"),
               "call_tail_ms": mean("own"),  # asynchronous: the step call's return after its results were ready
               "descheduled_ms": mean("runq"),  # ... then the loop's thread waiting for a CPU others held
               "idle_ms": mean("idle"),  # the rest: the device idle while the loop's own Python ran
               "idle_mean_ms": 1e3 * statistics.fmean(r.idle for r in rows),  # over every iteration
               "to_forward_ms": mean("to_forward"),  # PyTorch: an optimizer step's end to the next forward
               "between_ms": mean("between"), "between_cpu_ms": mean("between_cpu"),
               # the medians over every split iteration, as input-bound's estimate without the input check reads
               # them (an iteration that waited once for a slow batch does not move it)
               "medians": {k: 1e3 * statistics.median(getattr(r, k) for r in rows)
                           for k in ("it", "step", "data_raw", "host", "idle", "to_forward", "input_own")},
               "async": asynchronous}
        if self.sampler is not None:
            out["between_sites"] = self.sampler.sites(set(kept))  # CPU ms per iteration at each site
            out["between_sampled_ms"] = self.sampler.sampled_ms(set(kept))  # ... and at all sites together
            out["between_jax_share"] = self.sampler.jax_share()
        return out

    def _cut(self, it: float, t0: float, s0: dict[str, float], s1: dict[str, float], ready: float,
             returned: float | None, returned_cpu: float | None, runq0: float | None, asynchronous: bool,
             torch_step: bool) -> Cut:
        """One iteration (``it`` s from the step call at ``t0``) cut into parts that add up to it."""
        def diff(k: str) -> float:
            return s1.get(k, 0.0) - s0.get(k, 0.0)

        # known host work: eager ops, compilation, and the host's part of device-value reads (a line's burst of
        # reads less its wait for a busy device): jax-host-sync's cost, not input
        reads = max(diff("jax_host_read_span_s:s") - diff("jax_host_read_blocked_s:s"), 0.0)
        host = diff("eager_s:s") + diff("compile_s:s") + reads
        data = min(diff("data_wait_s:s"), it)
        step = min(max(ready - t0, 0.0), it)  # a late ready time makes idle smaller, never larger
        # the step call's own Python after its results were ready (dispatch, nnx.jit's graph merge): the device
        # waits for it, but it is the step's overhead, not the loop's work between steps
        own = min(max((returned or ready) - ready, 0.0), it - step) if asynchronous else 0.0
        # between the call's return and the next call, the time the loop's thread waited for a CPU that other
        # processes held: the machine's contention (cpu-oversubscribed), not the loop's input
        r1 = s1.get("runq_s:s")
        runq = max(r1 - runq0, 0.0) if asynchronous and runq0 is not None and r1 is not None else 0.0
        if torch_step:  # forward and backward belong to the step, wherever the step's signal sits in them
            step = min(max(it - max(diff("to_forward_s:s"), data) - host, 0.0), it)
        # PyTorch: from the optimizer step's end to the next forward, less the host reads made there
        to_forward = max(diff("to_forward_s:s") - diff("torch_host_read_s:s"), 0.0)
        rest = it - step - own  # the parts below share what the step and its tail leave, in this order
        host = min(host, rest)
        runq = min(runq, rest - host)
        data = 0.0 if asynchronous else min(data, rest - host)  # asynchronous: the DataLoader's next is idle
        # asynchronous: the loop's code between the call's return and the next call (a synchronous step's calls
        # hold its forward and backward between them: not the loop's own work)
        between = max(t0 + it - returned, 0.0) if returned is not None and asynchronous else 0.0
        between_cpu = (max(s1.get("loop_cpu_s:s", 0.0) - returned_cpu, 0.0)
                       if returned_cpu is not None and "loop_cpu_s:s" in s1 and asynchronous else 0.0)
        # asynchronous: the DataLoader's next runs while the device works or idles (inside idle, not a part)
        return Cut(it=it, step=step, own=own, host=host, runq=runq,
                   data=diff("data_wait_s:s") if asynchronous else data, data_raw=diff("data_wait_s:s"),
                   # PyTorch: the wait for input less the time the loop's thread waited for a CPU that other
                   # processes held (the DataLoader's next; with an optimizer, its step's end to the next forward,
                   # less host reads)
                   input_own=max(diff("data_wait_s:s") - diff("data_wait_runq_s:s"),
                                 diff("to_forward_s:s") - diff("to_forward_runq_s:s") - diff("torch_host_read_s:s")
                                 if self.kinds.get(self.step_key(final=True) or "") == "torch-optimizer" else 0.0),
                   idle=max(rest - host - runq - data, 0.0), to_forward=to_forward, between=between,
                   between_cpu=min(between_cpu, between))

    # -- summarising -----------------------------------------------------------------------------------
    def observations(self) -> dict[str, Any]:  # observations.Observations, as JSON (summary.observations)
        """Everything ``findings.diagnose`` needs, as JSON-serialisable data (``doctor.summary``)."""
        return observations(self)
