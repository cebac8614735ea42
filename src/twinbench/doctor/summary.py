"""The observations: what a :class:`Recorder` recorded, summarised as the plain, JSON-serialisable dict that
``findings.diagnose`` reads (``Recorder.observations()``): the steady iterations and the step time, the split, the
host-read check's and the input check's A/Bs, ``--trace``'s timing.

Per-step rates come from counter differences between consecutive step starts, skipping the first step (it carries
compilation), and over the iterations that :meth:`Recorder.left_out` keeps (the doctor's own checks and the
profiler left out).
"""

from __future__ import annotations

import platform
import statistics
import sys
import time
from typing import Any

from twinbench.doctor import thread_check
from twinbench.doctor.observed import InputCheck, InputClock, ReadCheck, TraceTiming

#: per-step figures need at least this many steady steps (the findings read it from here: the script's process,
#: which builds the observations, imports no finding and nothing outside the standard library)
MIN_STEADY_STEPS = 2

SIGNALS = {  # step candidate kind -> how the step was found (the report names it)
    "marked": "twinbench.doctor.step()", "torch-optimizer": "torch Optimizer.step",
    "torch-backward": "loss.backward()", "jit": "a jitted function", "pmap": "a pmapped function",
    "grad": "a jax.grad/value_and_grad call outside jit", "optax": "an Optax update outside jit",
    "jit-lib": "a library's jitted function", "pmap-lib": "a library's pmapped function",
    "torch-compiled": "a torch.compile'd function",
}
#: step candidate kind -> the framework whose work it is (a framework with no candidate called and no eager op run
#: is one the script only imports: its threads are not the script's)
KIND_FRAMEWORK = {"torch-optimizer": "torch", "torch-backward": "torch", "torch-compiled": "torch", "jit": "jax",
                  "pmap": "jax", "grad": "jax", "optax": "jax", "jit-lib": "jax", "pmap-lib": "jax"}
ASYNC_KINDS = ("jit", "pmap", "jit-lib", "pmap-lib")  # steps whose call returns before the device is done
#: a doctor.recorder.Recorder (not imported: the recorder imports this module)
Recorder = Any


def completion_rates(ready: dict[int, float], steady: list[int]) -> list[float]:
    """Seconds per step between steps' results being ready, over spans of ``w`` consecutive steady steps (``w``
    up to 8, a quarter of them, at most the median run of consecutive steady steps): the watcher thread notes a ready time late when it gets the GIL or a core late,
    and then notes the steps done meanwhile at once; a span averages that lag out, and the median over the
    spans leaves out a slow step (an evaluation every N steps)."""
    inside = set(steady)
    known = [i for i in steady if i in ready and i + 1 in ready]
    runs: list[int] = []  # runs of consecutive steady iterations (the host-read check's blocks cut them)
    for i in steady:
        if i - 1 in inside and runs:
            runs[-1] += 1
        else:
            runs.append(1)
    w = max(1, min(8, len(known) // 4, int(statistics.median(runs)) if runs else 1))
    return [(ready[i + w] - ready[i]) / w for i in steady if i in ready and i + w in ready
            and all(j in inside for j in range(i, i + w))]


def trace_timing(rec: Recorder, key: str, step_ms: float | None, steady: list[int],
                 included: bool) -> TraceTiming | None:
    """``--trace``: the traced iterations' median wall time (one step start to the next, under the profiler)
    and the step time without them (``untraced_step_ms``: None when too few steps ran outside the trace to
    leave them out of ``step_ms``, which then ``included`` them)."""
    if rec.traced is None:
        return None
    whole = rec.traced_iterations(key)[1]
    calls = rec.calls.get(key, [])
    # how much the untraced steps move, robustly (a recompiling step is no noise): 1.4826 MAD over the median
    gaps = [calls[i + 1][0] - calls[i][0] for i in steady if i + 1 < len(calls) and i not in whole]
    mid = statistics.median(gaps) if len(gaps) >= 3 else 0.0
    spread = 1.4826 * statistics.median(abs(g - mid) for g in gaps) / mid if mid > 0 else None
    return TraceTiming(traced_step_ms=1e3 * statistics.median(calls[i + 1][0] - calls[i][0] for i in whole)
                       if whole else None, traced_steps=len(whole),
                       untraced_step_ms=None if included else step_ms, untraced_steps=0 if included else len(steady),
                       untraced_spread=None if included or spread is None else round(spread, 4),
                       step_time_includes_trace=included)


def read_check(rec: Recorder, key: str, traced: set[int]) -> ReadCheck | None:
    """The host-read check's A/B: the median iteration (one step start to the next) while the loop's reads
    of the step's outputs waited for them, against the same loop with those reads answered one step late
    (the device never waits for them), over alternating blocks of steps in this run; the first iteration
    of each block (the queue filling or draining) left out, and so are the profiler's when the step time
    leaves them out (``traced``). None when the check did not run."""
    calls, modes = rec.calls.get(key, []), dict(rec.read_mode)
    if "deferred" not in modes.values():
        return None
    traced = traced | rec.replayed() | rec.own_iterations(key)  # the doctor's own iterations are neither kind
    def iterations(mode: str) -> tuple[int, float | None, float | None]:
        """(how many, their median ms, their interquartile range ms) of the iterations read ``mode``."""
        iv = [calls[i + 1][0] - calls[i][0] for i in range(2, len(calls) - 1)
              if modes.get(i) == mode and modes.get(i - 1) == mode and i not in traced]
        q = statistics.quantiles(iv, n=4) if len(iv) >= 2 else None
        return len(iv), 1e3 * statistics.median(iv) if iv else None, 1e3 * (q[2] - q[0]) if q else None

    (wn, wms, wiqr), (dn, dms, diqr) = iterations("waited"), iterations("deferred")
    return ReadCheck(waited_n=wn, waited_ms=wms, waited_iqr_ms=wiqr, deferred_n=dn, deferred_ms=dms,
                     deferred_iqr_ms=diqr)


def input_ab(rec: Recorder, key: str, left_out: set[int]) -> InputCheck | None:
    """The input check's A/B (``instruments_jax.input_check``): the step called on a batch already built, call
    by call, against the loop's own steady iterations as written, less the host work the doctor names
    elsewhere (eager ops, compilation, host reads, nnx.jit's graph traversal), in wall time and in the
    process's CPU time (on a CPU backend the host's work and the step share the cores: what the loop's own
    work costs is its CPU time, which a busy machine does not stretch as it stretches the wall time). Both
    kinds are spread over the same span of the run (blocks every few steps), so a load that comes and goes
    weighs on both alike; their medians and a one-sided Mann-Whitney test (the loop slower: findings/input.py, on
    the samples given here) say whether the difference is more than the noise. None when no block ran."""
    if not rec.input_blocks:
        return None
    calls = rec.calls.get(key, [])
    loop: dict[str, list[float]] = {"wall": [], "wall_less": [], "cpu": [], "cpu_less": []}
    for i in range(1, len(calls) - 1):
        if i in left_out:
            continue
        (t0, s0), (t1, s1) = calls[i], calls[i + 1]

        def diff(k: str, s0: dict[str, float] = s0, s1: dict[str, float] = s1) -> float:
            return s1.get(k, 0.0) - s0.get(k, 0.0)

        reads = max(diff("jax_host_read_span_s:s") - diff("jax_host_read_blocked_s:s"), 0.0)
        known = diff("compile_s:s") + reads
        cpu = diff("proc_cpu_s:s")
        for k, v in (("wall", t1 - t0 - known - diff("eager_s:s") - diff("nnx_graph_s:s")),
                     ("cpu", cpu - known - diff("eager_cpu_s:s") - diff("nnx_graph_cpu_s:s"))):
            loop[f"{k}_less"].append(1e3 * max(v, 0.0))
        for k, v in (("wall", t1 - t0), ("cpu", cpu)):
            loop[k].append(1e3 * max(v, 0.0))
    replays = {"wall": [t for b in rec.input_blocks for t in b.replay_ms],
               "cpu": [t for b in rec.input_blocks for t in b.replay_cpu_ms]}
    blocks = {"wall": [b.replay_ms for b in rec.input_blocks], "cpu": [b.replay_cpu_ms for b in rec.input_blocks]}
    out = InputCheck(blocks=len(rec.input_blocks), replays=len(replays["wall"]), iterations=len(loop["wall"]))
    if len(loop["wall"]) < 3 or len(replays["wall"]) < 3:
        return out

    def clock(name: str) -> InputClock | None:
        if len(replays[name]) < 3:
            return None
        whole, less, pre = (statistics.median(x) for x in (loop[name], loop[f"{name}_less"], replays[name]))
        # the samples themselves: the one-sided Mann-Whitney test on them is made where the findings are
        # (findings/input.py), so the script's process never imports SciPy
        return InputClock(loop_ms=whole, loop_less_known_ms=less, prebuilt_ms=pre,
                          gain=(less - pre) / whole if whole else 0.0,
                          loop_less_known_samples_ms=[round(x, 4) for x in loop[f"{name}_less"]],
                          prebuilt_samples_ms=[round(x, 4) for x in replays[name]],
                          block_ms=[round(statistics.median(b), 3) for b in blocks[name]])

    out.wall, out.cpu = clock("wall"), clock("cpu")
    return out


def observations(rec: Recorder) -> dict[str, Any]:
    """Everything ``findings.diagnose`` needs: :class:`twinbench.doctor.observations.Observations` as the JSON
    this process writes (its parts the dataclasses of :mod:`twinbench.doctor.observed`; a Struct is read in the
    doctor's process, and this one has only the standard library)."""
    wall = time.perf_counter() - rec.t_start
    key = rec.step_key(final=True)
    calls = rec.calls.get(key, []) if key else []
    starts = [t for t, _ in calls]
    asynchronous = bool(key) and rec.kinds.get(key or "") in ASYNC_KINDS
    ready = dict(rec.ready.get(key, {})) if key else {}
    # Steady state: the iterations between consecutive step starts, from the 2nd step on, less those the
    # host-read check changed, those that held the input check's calls, and those the profiler weighed on or the
    # doctor's own work ran in (the last two when enough remain without them).
    left_out = rec.left_out(key) if key else set()
    steady = [i for i in range(1, len(calls) - 1) if i not in left_out]
    weighed = rec.traced_iterations(key)[0] if key else set()
    own = rec.own_s.get(key or "", {})

    def own_after(k: int) -> float:
        """The doctor's own seconds in the loop's thread from the step's call ``k`` on."""
        return sum(s for i, s in own.items() if i >= k)

    trace_in = not weighed <= left_out  # too few steps outside the trace to leave it out
    traced_out = set() if trace_in else weighed  # the profiler's iterations the step time leaves out
    # The one step definition every percentage uses: the steady iterations (one step start to the next)
    # that compiled nothing, when they are at least half of them (a one-off compile in step 2 would weigh
    # on every mean); per-step rates are means over the same iterations, so no share passes 100%.
    quiet = [i for i in steady if calls[i + 1][1].get("compile_s:s", 0.0) == calls[i][1].get("compile_s:s", 0.0)]
    used = quiet if len(quiet) >= max(len(steady) / 2, 1) else steady
    # the median step too: of two steady steps, one recompiling for 6 s, the median is their mean (3.2 s a step
    # where the loop steps in 7 ms); the compiles are counted apart (compile_s, the recompile finding)
    intervals = [calls[i + 1][0] - calls[i][0] for i in used]
    # An asynchronous loop's rate is the rate at which its steps complete (the watcher's block_until_ready
    # on each step's output), not the rate at which it dispatched them: a loop with no read of the device
    # queues its steps far ahead of the device.
    completed = completion_rates(ready, used)
    by_completion = asynchronous and len(completed) >= min(2, len(used))  # one rate where one step was quiet
    totals: dict[str, float] = {}
    for i in used:
        a, b = calls[i][1], calls[i + 1][1]
        for k in set(a) | set(b):
            totals[k] = totals.get(k, 0) + (b.get(k, 0) - a.get(k, 0))  # counts stay exact integers
    per_step = {k: v / len(used) for k, v in totals.items()}
    iter_ms = 1e3 * statistics.fmean(calls[i + 1][0] - calls[i][0] for i in used) if used else None
    done = [ready[i + 1] - ready[i] for i in used if i in ready and i + 1 in ready]
    if by_completion and done and iter_ms is not None:  # the slower of dispatch and completion
        iter_ms = max(iter_ms, 1e3 * statistics.fmean(done))
    step_ms = 1e3 * statistics.median(intervals) if intervals else None
    timing = "start" if not asynchronous else "completion" if by_completion else "dispatch"
    if by_completion and step_ms is not None:  # the slower of dispatching and completing sets the pace
        step_ms = max(step_ms, 1e3 * statistics.median(completed))
    elif asynchronous and step_ms is not None and rec.drained_at is not None and len(calls) > 2:
        # no step's results could be waited on (all of them donated to the next step at once): from the 2nd
        # step's call to all of them done at --steps N, per step (after a trace, from the first call after
        # the profiler stopped, every step waited for then, when enough steps follow it)
        k, stop = 1, rec.traced[1] if rec.traced else None
        if weighed and not trace_in and stop is not None and len(calls) - stop - 1 >= MIN_STEADY_STEPS:
            k = stop + 1
        trace_in = trace_in or (bool(weighed) and k == 1)
        step_ms = max(step_ms, 1e3 * (rec.drained_at - calls[k][0] - own_after(k)) / (len(calls) - k))
        timing = "end-to-end"
        if iter_ms is not None:
            iter_ms = max(iter_ms, step_ms)
    ran = {KIND_FRAMEWORK[k] for c, k in rec.kinds.items() if k in KIND_FRAMEWORK and rec.calls.get(c)}
    if rec.counters["eager_ops"]:
        ran.add("jax")
    return {
        "frameworks": sorted(rec.frameworks),
        "frameworks_used": sorted(ran),  # those whose work the script ran (not only imported)
        "python": {"executable": sys.executable, "version": platform.python_version()},
        "wall_s": wall,
        "steps": len(starts),
        "step_fn": key.split(":", 1)[1] if key else None,
        "step_kind": rec.kinds.get(key) if key else None,
        "step_signal": SIGNALS.get(rec.kinds.get(key, ""), rec.kinds.get(key)) if key else None,
        "split": rec.split(key, left_out) if key else None,
        "steady_steps": len(steady),
        "steady_s": (starts[-1] - starts[1]) if len(starts) > 2 else 0.0,
        "iter_ms": iter_ms,
        "iterations_used": len(used),
        "step_ms": step_ms,
        # how step_ms was timed: "completion" (an asynchronous step: the interval between its results
        # being ready), "end-to-end" (asynchronous, no result could be waited on: --steps N's drain),
        # "dispatch" (neither: the rate the loop dispatched) or "start" (a synchronous step's calls)
        "step_timing": timing,
        "dispatch_ms": 1e3 * statistics.median(intervals) if intervals else None,
        # at --steps N of an asynchronous step: from the 2nd step's call to every step done, per step (a mean
        # over the whole run, slow steps included; the cross-check of step_ms)
        # less the doctor's own work in the loop's thread meanwhile (the input check's blocks, the snapshots)
        "end_to_end_ms": (1e3 * (rec.drained_at - calls[1][0] - own_after(1)) / (len(calls) - 1)
                          if rec.drained_at is not None and len(calls) > 2 else None),
        # the doctor's own work in the loop's thread (Recorder.own_work): its seconds from the 2nd step call on, and
        # the steady iterations that held it which the step time leaves out
        "own_work": {"s": own_after(1), "left_out": len(rec.own_iterations(key or "") & left_out)},
        "read_check": read_check(rec, key, traced_out) if key else None,
        "input_check": input_ab(rec, key, left_out) if key else None,
        "thread_check": thread_check.summary(rec, key, traced_out) if key else None,
        "trace_timing": trace_timing(rec, key, step_ms, steady, trace_in) if key else None,
        "first_step_ms": (starts[1] - starts[0]) * 1e3 if len(starts) > 1 else None,
        "per_step": per_step,
        "counters": dict(rec.counters),
        "seconds": dict(rec.seconds),
        "candidates": {k.split(":", 1)[1]: len(v) for k, v in rec.calls.items()},
        "notes": {k: v for k, v in rec.notes.items()},
        "info": rec.info,
        "compile_s": float(rec.seconds["compile_s"]),
        "stopped_early": rec.stopped_early,
        "timed_out": rec.timed_out,
        "error": rec.error,
        "steady_from_t": (starts[1] - rec.t_start) if len(starts) > 1 else None,
        "machine": rec.machine_load(starts[1] if len(starts) > 2 else None, starts[-1] if starts else None),
    }
