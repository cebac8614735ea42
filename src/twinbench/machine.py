"""The leaf constants about the machine runs measure on, read by the runner, the records, the compile
caches and the peak measurement alike; it imports nothing of twinbench.

Where twinbench keeps its caches (``cache_root``), when the machine counts as busy (``HIGH_LOAD``, and
``LOAD_ENV``, the variable through which the runner tells a worker the load it started under) and when
repeated timings disagree (``MAX_SPREAD``).
"""

from __future__ import annotations

import os
from pathlib import Path

MAX_SPREAD = 0.10  # repeats of the measured size must agree within this (max/min - 1)
HIGH_LOAD = 0.5  # load average per core above which the machine counts as busy
#: Load per core of the machine (other processes) at the time the runner started this process.
LOAD_ENV = "TWINBENCH_LOAD_PER_CORE"


def cache_root() -> Path:
    """``$TWINBENCH_CACHE``, else ``$XDG_CACHE_HOME/twinbench`` (``~/.cache/twinbench``)."""
    base = os.environ.get("TWINBENCH_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "twinbench")
    return Path(base)
