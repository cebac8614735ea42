"""Page faults and kernel time of the run's own process over its steady steps: what the operating system did
for the step, which no framework profiler shows.

On the CPU, a JAX step faults in every page of its temporary buffers afresh each step (glibc's allocator hands
them back to the kernel after each execution and maps them again for the next), and the kernel's zeroing of
those pages can be a large share of the step (benchmarks/RESULTS.md, "Where a third of JAX's CPU step went"). ``getrusage`` of the process counts those
faults and that kernel time, for every thread of the process. Linux and macOS; elsewhere the fields are absent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: kernel (system) time above this share of the process's CPU time over the steady steps, with at least
#: FAULTS_PER_STEP minor faults a step: the step pays for fresh memory every time (the summary says so)
KERNEL_SHARE = 0.10
FAULTS_PER_STEP = 1000
PAGE = 4096


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


def per_step(start: Usage | None, end: Usage | None, steps: int) -> dict[str, Any]:
    """The record's fields for ``steps`` steps between two readings: page faults per step and the kernel's share
    of the process's CPU time ({} when not measured)."""
    if start is None or end is None or steps < 1:
        return {}
    cpu = (end.user_s - start.user_s) + (end.system_s - start.system_s)
    return {"page_faults_per_step": round((end.minor_faults - start.minor_faults
                                           + end.major_faults - start.major_faults) / steps, 1),
            "kernel_cpu_share": round((end.system_s - start.system_s) / cpu, 3) if cpu > 0 else None}


def costly(share: float | None, faults: float | None) -> bool:
    """Whether a run's steady steps spent a material share (``share``: the kernel's share of its CPU time) in the
    kernel faulting fresh pages (``faults`` a step)."""
    return bool(share is not None and faults is not None and share >= KERNEL_SHARE and faults >= FAULTS_PER_STEP)


def describe(faults: float | None, share: float | None) -> str:
    """``36,800 page faults a step (about 144 MiB of fresh pages), 31% of its CPU time in the kernel``."""
    faults = faults or 0
    text = f"{faults:,.0f} page faults a step (about {faults * PAGE / 2**20:,.0f} MiB of fresh 4 KiB pages)"
    return text + (f", {share:.0%} of its CPU time in the kernel" if share is not None else "")
