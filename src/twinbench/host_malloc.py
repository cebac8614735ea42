"""The host allocator of a run: twinbench's measured glibc ``malloc`` settings, merged with the user's
``GLIBC_TUNABLES``.

XLA:CPU takes a step's temporary buffers (134 MB on the ``small`` preset) from ``malloc`` at every execution
and frees them after it. glibc serves an allocation that large from a fresh ``mmap`` and unmaps it on ``free``,
so the next step faults every page in again, 4 KiB at a time, and the kernel zeroes each one: on this project's
2-core CPU a third of the JAX step (110 -> 73 ms with huge pages; torch's eager step, whose tensors glibc reuses,
did not move; benchmarks/RESULTS.md, "Where a third of JAX's CPU step went"). The settings:

- ``glibc.malloc.hugetlb=1``: glibc asks for transparent huge pages on the memory it maps (``madvise``), so a
  step faults 2 MiB pages, 512 times fewer; it needs the kernel's THP in ``madvise`` or ``always`` mode;
- one arena, no ``mmap`` and no trimming (``arena_max=1``, ``mmap_max=0``, a trim threshold of 4 GiB), so freed
  buffers stay in the process and are reused: no faults at all after the first steps. With huge pages alone the
  naive port (many small programs a step) still faulted 4,100-4,400 pages a step, 16-20% of its CPU time in the
  kernel; with both, 1-2 pages and 5%, and its step 13% shorter.

``tuned`` (the default) gives every worker both where the run is on the CPU (the second alone where the kernel has
no transparent huge pages), and huge pages only on an accelerator's host, for both frameworks alike; ``system``
keeps glibc's own. The variable must be in a process's environment when it starts, so the runner
sets it for each worker (and torchrun's ranks inherit it). A tunable the user already sets in
``GLIBC_TUNABLES`` is never overridden; elsewhere than Linux with glibc nothing is set. Every record carries
the ``GLIBC_TUNABLES`` it ran with, its page faults a step and the kernel's share of its CPU time
(measure/page_faults.py).
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

#: ``--host-malloc`` values: twinbench's measured setting, or glibc's own.
CHOICES = ("tuned", "system")
HUGE_PAGES = ("glibc.malloc.hugetlb=1",)
KEEP_FREED = ("glibc.malloc.arena_max=1", "glibc.malloc.mmap_max=0", "glibc.malloc.trim_threshold=4294967296")
THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")
ENV = "GLIBC_TUNABLES"


def thp_mode(path: Path = THP_MODE) -> str | None:
    """The kernel's transparent huge page mode (``always``, ``madvise``, ``never``), None where unknown."""
    try:
        text = path.read_text()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1:end] if 0 <= start < end else None


def glibc() -> bool:
    """Whether this is Linux with glibc (the tunables mean nothing to another C library)."""
    return sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


def tuned_tunables(mode: str | None, cpu: bool = True) -> tuple[str, ...]:
    """The tunables ``tuned`` applies under THP mode ``mode``: huge pages where the kernel gives them, and freed
    memory kept where the step runs on the CPU (an accelerator's host keeps glibc's arenas as they are: its
    runtime's many threads allocate concurrently, and nothing there was measured)."""
    huge = HUGE_PAGES if mode in ("always", "madvise") else ()
    return (*huge, *KEEP_FREED) if cpu else huge


def merged(user: str, choice: str, mode: str | None, cpu: bool = True) -> str:
    """``user`` (the user's ``GLIBC_TUNABLES``, colon-separated) plus the tuned tunables it does not set itself."""
    if choice not in CHOICES:
        raise ValueError(f"--host-malloc: unknown value {choice!r}; allowed: {', '.join(CHOICES)}")
    given = [t for t in user.split(":") if t]
    if choice == "system":
        return ":".join(given)
    names = {t.split("=", 1)[0] for t in given}
    return ":".join([*given, *(t for t in tuned_tunables(mode, cpu) if t.split("=", 1)[0] not in names)])


def worker_env(choice: str, environ: dict[str, str] | None = None) -> dict[str, str]:
    """What a worker's environment gets for ``choice``: ``{"GLIBC_TUNABLES": ...}``, or {} (nothing to set)."""
    from twinbench.measure import platforms

    env = os.environ if environ is None else environ
    if not glibc():
        return {}
    value = merged(env.get(ENV, ""), choice, thp_mode(), cpu=platforms.here() == "cpu")
    return {ENV: value} if value else {}
