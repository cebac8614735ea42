"""The thread check: ``cpu-oversubscribed``'s A/B, run in the script's process (standard library and torch only).

Where the script's torch intra-op threads exceed the cores free (others' load measured from the run's start, the
finding's own count: :func:`free_cores`), the check runs blocks of the script's own steady steps with
``torch.set_num_threads(fixed)`` (the count the finding's fix prints) and restores the script's count after them:
as written, fixed, fixed, as written (a drift over the run weighs on both kinds alike). Each block's first
iteration (the pool resized) is left out of the A/B's samples; the fixed blocks' iterations, and the one after
them, are left out of the doctor's steady-state figures (``Recorder.skipped``), as the host-read check's are.
Only in a run of the doctor's own (``Recorder.check_reads``: the bootstrap's), never in ``twinbench.watch()``.

The samples go to the doctor's process (``observations.thread_check``), where the finding tests them (a one-sided
Mann-Whitney, ``findings/machine.py``) and explain's answer sizes the finding by their gain.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

from twinbench.doctor.observed import ThreadCheck

CHECK = "thread-check"  # its key in Info.skipped (why it did not run)
FROM = 4  # the first step call a block may start at (the first steady steps warm caches and the allocator)
BLOCK = 4  # step calls a block where the run's length is not known (--steps)
MIN_BLOCK = 3  # ... at least: two iterations a block kept, four of each kind
ORDER = ("as-written", "fixed", "fixed", "as-written")
#: Recorder (not imported: the recorder imports summary, which imports this module)
Recorder = Any


def free_cores(cores: float, others: float) -> int:
    """The cores other processes leave free (at least one): the count the finding's fix prints."""
    return max(int(cores - others + 0.5), 1)


class ThreadSwitch:
    """Switches torch's intra-op threads at the step's calls (``at_call``, from the step's start: the iteration
    from one call to the next runs wholly at the count set there)."""

    def __init__(self, rec: Recorder, torch: Any) -> None:
        self.rec, self.torch = rec, torch
        self.state = "waiting"  # -> "running" -> "done"
        rec.finalizers.insert(0, self.restore)  # before the instruments read the script's thread count

    def restore(self) -> None:
        """The script's own count back, where the run ended inside a fixed block."""
        check = self.rec.thread_check
        if check is not None and self.torch.get_num_threads() != check.threads:
            self.torch.set_num_threads(check.threads)

    def at_call(self, key: str) -> None:
        rec = self.rec
        if self.state == "done" or not rec.check_reads or rec.step_key() != key:
            return
        i = rec.call_index(key)
        if self.state == "waiting":
            traced = rec.traced  # --trace: the blocks come after the profiler's steps, which stay as written
            if i < FROM or (traced is not None and (traced[1] is None or i < traced[1] + 2)):
                return
            t0 = time.perf_counter()
            self._plan(i)
            rec.own_work(time.perf_counter() - t0)
            if self.state != "running":
                return
        check = rec.thread_check
        block = (i - check.start) // check.block
        mode = ORDER[block] if block < len(ORDER) else None
        want = check.fixed if mode == "fixed" else check.threads
        if self.torch.get_num_threads() != want:
            self.torch.set_num_threads(want)
        if mode is None:
            self.state = "done"
        else:
            rec.thread_mode[i] = mode

    def _plan(self, i: int) -> None:
        """Whether the check runs, and its blocks, from step call ``i``; why not in ``Info.skipped``."""
        rec, self.state = self.rec, "done"
        threads = self.torch.get_num_threads()
        dynamo = sys.modules.get("torch._dynamo.utils")  # imported by torch.compile's first compile
        if dynamo is not None and dynamo.counters["stats"]["unique_graphs"]:
            rec.info.skipped[CHECK] = ("the script runs torch.compile'd code: Inductor's CPU kernels keep the "
                                       "thread count they were compiled at, so a switch mid-run is not the fix")
            return
        load = rec.machine_load(None, None)  # others' load from the run's start to now
        if not load:
            rec.info.skipped[CHECK] = "the machine's load could not be read"
            return
        cores, others = int(load["cores"]), float(load["others_cores"])
        fixed = free_cores(cores, others)
        if threads <= fixed:
            rec.info.skipped[CHECK] = (f"not needed: torch's {threads} thread(s) fit the {fixed} free core(s) when "
                                       f"it would have begun (step {i})")
            return
        block = BLOCK if not rec.max_steps else min(BLOCK, (rec.max_steps - 1 - i) // len(ORDER))
        if block < MIN_BLOCK:
            rec.info.skipped[CHECK] = (f"too few steady steps: the run stops at step {rec.max_steps} and the "
                                       f"A/B needs {len(ORDER) * MIN_BLOCK} from step {i + 1} (--steps "
                                       f"{i + 1 + len(ORDER) * MIN_BLOCK} or more)")
            return
        rec.thread_check = ThreadCheck(threads=threads, fixed=fixed, cores=cores, others_cores=round(others, 3),
                                       start=i, block=block)
        self.state = "running"


def summary(rec: Recorder, key: str, traced: set[int]) -> ThreadCheck | None:
    """The check's samples: each block's iterations (one step start to the next) but its first, less the
    profiler's (``traced``), the input check's and those that held the doctor's own work. None when it did not
    run; with fewer than four blocks done (the run ended), the figures of those that did, and
    ``Info.skipped`` says so."""
    check = rec.thread_check
    if check is None:
        return None
    calls, modes = rec.calls.get(key, []), rec.thread_mode
    away = traced | rec.replayed() | rec.own_iterations(key)
    kept: dict[int, list[float]] = {}
    for i in range(check.start, len(calls) - 1):
        block = (i - check.start) // check.block
        if block >= len(ORDER) or i not in modes:
            break
        if (i - check.start) % check.block and i not in away:  # a block's first iteration: the pool resized
            kept.setdefault(block, []).append(1e3 * (calls[i + 1][0] - calls[i][0]))
    ran = max(0, min((len(calls) - 1 - check.start) // check.block, len(ORDER)))
    rec.info.skipped.pop(CHECK, None)  # a snapshot's, taken while the blocks ran
    if ran < len(ORDER):
        rec.info.skipped[CHECK] = (f"too few steady steps: the run ended after {ran} of its {len(ORDER)} blocks "
                                   f"of {check.block} steps (from step {check.start + 1})")
    out = ThreadCheck(threads=check.threads, fixed=check.fixed, cores=check.cores, others_cores=check.others_cores,
                      start=check.start, block=check.block, blocks=ran)
    for b, ms in sorted(kept.items()):
        (out.fixed_ms if ORDER[b] == "fixed" else out.as_written_ms).extend(round(x, 4) for x in ms)
        out.block_ms.append(round(statistics.median(ms), 3))
    return out
