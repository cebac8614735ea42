"""Page faults and kernel time of the run's own process over its steady steps: what the operating system did
for the step, which no framework profiler shows.

On the CPU, a JAX step faults in every page of its temporary buffers afresh each step (glibc's allocator hands
them back to the kernel after each execution and maps them again for the next), and the kernel's zeroing of
those pages can be a large share of the step (benchmarks/RESULTS.md, "Where a third of JAX's CPU step went"). ``getrusage`` of the process counts those
faults and that kernel time, for every thread of the process. Linux and macOS; elsewhere the fields are absent.

The kernel's share of the CPU time is not the faults' alone (system calls, the scheduler, a busy machine's
interrupts), and a few thousand faults a step can cost little. So a run's faults are also costed on their own:
their number times one fault's cost, measured on this machine (:func:`fault_us`), as a share of the process's
CPU time (``fault_cpu_share``). Both shares must reach ``KERNEL_SHARE`` before the faults are called costly.
A fault's time is the kernel's, so that share is bounded by the kernel's own share: the once-a-process
measurement of one fault (a fresh map, cold caches, another CPU than the step's faults ran on) can price the
faults of a step above the whole kernel share on some CPUs, a figure no step can have.
"""

from __future__ import annotations

import functools
import mmap
import time
from dataclasses import dataclass

#: kernel (system) time above this share of the process's CPU time over the steady steps, with at least
#: FAULTS_PER_STEP minor faults a step: the step pays for fresh memory every time (the summary says so)
KERNEL_SHARE = 0.10
FAULTS_PER_STEP = 1000
PAGE = 4096


@dataclass(frozen=True)
class StepUsage:
    """The operating system's share of a span of steps (the record's conditions of the same names)."""

    page_faults_per_step: float | None = None
    kernel_cpu_share: float | None = None  # the kernel's (system) share of the process's CPU time
    fault_cpu_share: float | None = None  # the faults' own share, from one fault's measured cost (None: not costed)


@dataclass(frozen=True)
class Usage:
    minor_faults: int
    major_faults: int
    user_s: float
    system_s: float


def usage() -> Usage | None:
    """This process's (all threads') faults and CPU time so far; None where ``resource`` is missing."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    r = resource.getrusage(resource.RUSAGE_SELF)
    return Usage(r.ru_minflt, r.ru_majflt, r.ru_utime, r.ru_stime)


@functools.cache
def fault_us(pages: int = 4096, rounds: int = 5) -> float | None:
    """CPU time (µs) one fault on a fresh page of anonymous memory costs on this machine, the kernel's zeroing
    included: the median of ``rounds`` first touches of ``pages`` pages newly mapped (huge pages declined, so each
    page faults once), timed by this thread's CPU clock. Measured once a process; None where it cannot be."""
    import numpy as np

    costs = []
    try:
        for _ in range(rounds):
            with mmap.mmap(-1, pages * PAGE) as m:
                if hasattr(mmap, "MADV_NOHUGEPAGE"):
                    m.madvise(mmap.MADV_NOHUGEPAGE)
                view = np.frombuffer(m, np.uint8)
                t0 = time.thread_time()
                view[::PAGE] = 1  # one write a page: one fault a page
                costs.append((time.thread_time() - t0) / pages * 1e6)
                del view  # the buffer's export ends before the map closes
    except (OSError, ValueError, BufferError):
        return None
    costs.sort()
    return round(costs[len(costs) // 2], 3) if costs and costs[len(costs) // 2] > 0 else None


def fault_share(faults: float | None, cpu_s: float | None, cost_us: float | None,
                kernel_share: float | None = None) -> float | None:
    """The faults' own share of a process's CPU time: ``faults`` times one fault's cost (``cost_us``,
    :func:`fault_us`) over the CPU seconds (``cpu_s``) of the same span (or both a second: faults a second and
    cores busy), never above the kernel's share of that time (``kernel_share``, where known: a fault runs in the
    kernel, and a cost measured once elsewhere may be dearer than the step's own faults); None where one is
    unknown."""
    if faults is None or not cpu_s or cost_us is None:
        return None
    share = faults * cost_us * 1e-6 / cpu_s
    return round(share if kernel_share is None else min(share, kernel_share), 3)


def per_step(start: Usage | None, end: Usage | None, steps: int, cost_us: float | None = None) -> StepUsage:
    """The record's fields for ``steps`` steps between two readings: page faults per step, the kernel's share
    of the process's CPU time, and, given one fault's cost (``cost_us``), the faults' own share of it
    (``fault_cpu_share``) (every field None when not measured)."""
    if start is None or end is None or steps < 1:
        return StepUsage()
    cpu = (end.user_s - start.user_s) + (end.system_s - start.system_s)
    faults = end.minor_faults - start.minor_faults + end.major_faults - start.major_faults
    kernel = round((end.system_s - start.system_s) / cpu, 3) if cpu > 0 else None
    share = fault_share(faults, cpu, cost_us, kernel) if cost_us is not None and cpu > 0 else None
    return StepUsage(page_faults_per_step=round(faults / steps, 1), kernel_cpu_share=kernel, fault_cpu_share=share)


def costly(share: float | None, faults: float | None, faults_share: float | None = None) -> bool:
    """Whether a run's steady steps spent a material share of their CPU time in the kernel faulting fresh pages
    (``faults`` a step): the kernel's share (``share``) and, where measured, the faults' own (``faults_share``,
    :func:`fault_share`) both reach ``KERNEL_SHARE``. A record of before the faults were costed has only the
    first."""
    if share is None or faults is None or faults < FAULTS_PER_STEP:
        return False
    return min(share, share if faults_share is None else faults_share) >= KERNEL_SHARE


def describe(faults: float | None, share: float | None) -> str:
    """``36,800 page faults a step (about 144 MiB of fresh pages), 31% of its CPU time in the kernel``."""
    faults = faults or 0
    text = f"{faults:,.0f} page faults a step (about {faults * PAGE / 2**20:,.0f} MiB of fresh 4 KiB pages)"
    return text + (f", {share:.0%} of its CPU time in the kernel" if share is not None else "")
