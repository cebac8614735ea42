"""The host allocator of a run: twinbench's measured glibc ``malloc`` settings, merged with the user's
``GLIBC_TUNABLES``.

XLA:CPU takes a step's temporary buffers (a hundred megabytes and more on the ``small`` preset) from ``malloc``
at every execution and frees them after it. glibc hands memory that large back to the kernel on ``free`` (from
the worker thread's arena, or its own ``mmap``), so the next step faults every page in again, one base page at a
time, and the kernel zeroes each one: a large share of the JAX step, which huge pages take back (torch's eager
step, whose tensors glibc reuses, does not move; benchmarks/RESULTS.md, "Where a third of JAX's CPU step went").
The settings:

- ``glibc.malloc.hugetlb=1``: glibc asks for transparent huge pages on the memory it maps (``madvise``), so a
  step faults 2 MiB pages, 512 times fewer; it needs the kernel's THP in ``madvise`` or ``always`` mode;
- one arena, no ``mmap`` and no trimming (``arena_max=1``, ``mmap_max=0``, a trim threshold of 4 GiB), so freed
  buffers stay in the process and are reused: no faults at all after the first steps, but the process keeps what
  it ever held: jax/jit's peak memory grows by most of a step's temporaries with it (torch's does not move), which
  would make every memory comparison of the two frameworks on a CPU a comparison of allocators.

``tuned`` (the default) gives every worker, of both frameworks alike, huge pages where the kernel has them, and
only where it has none (and the run is on the CPU) the freed-memory settings, whose memory cost is then the price
of not faulting; ``system`` keeps glibc's own. With huge pages alone the naive port (many small programs a step)
still faults thousands of pages a step, a sizeable share of its CPU time in the kernel (which the freed-memory
settings take back); jax/jit far fewer (benchmarks/RESULTS.md, "Where a third of JAX's CPU step went").

The variable must be in a process's environment when it starts, so the runner sets it for each worker (and
torchrun's ranks inherit it). A tunable the user already sets in ``GLIBC_TUNABLES`` is never overridden; elsewhere
than Linux with glibc nothing is set. Every record carries the ``GLIBC_TUNABLES`` it ran with, its page faults a
step and the kernel's share of its CPU time (measure/page_faults.py).
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


def thp(mode: str | None) -> bool:
    """Whether the kernel gives transparent huge pages to memory that asks for them (THP mode)."""
    return mode in ("always", "madvise")


def tuned_tunables(mode: str | None, cpu: bool = True) -> tuple[str, ...]:
    """The tunables ``tuned`` applies under THP mode ``mode``: huge pages where the kernel gives them; else, for a
    run on the CPU, freed memory kept (an accelerator's host keeps glibc's own then: nothing was measured there)."""
    if thp(mode):
        return HUGE_PAGES
    return KEEP_FREED if cpu else ()


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
