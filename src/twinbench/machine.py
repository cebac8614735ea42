"""The leaf constants about the machine runs measure on, read by the runner, the records, the compile
caches and the peak measurement alike; it imports nothing of twinbench.

Where twinbench keeps its caches (``cache_root``), when the machine counts as busy (``HIGH_LOAD``, and
``LOAD_ENV``, the variable through which the runner tells a worker the load it started under) and when
repeated timings disagree (``MAX_SPREAD``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path

MAX_SPREAD = 0.10  # repeats of the measured size must agree within this (max/min - 1)
HIGH_LOAD = 0.5  # load average per core above which the machine counts as busy
#: Load per core of the machine (other processes) at the time the runner started this process.
LOAD_ENV = "TWINBENCH_LOAD_PER_CORE"


def cache_root() -> Path:
    """``$TWINBENCH_CACHE``, else ``$XDG_CACHE_HOME/twinbench`` (``~/.cache/twinbench``)."""
    base = os.getenv("TWINBENCH_CACHE") or os.path.join(
        os.getenv("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "twinbench")
    return Path(base)


@dataclass(frozen=True)
class Ranks:
    """A process's place among its launch's processes, as torchrun sets it in the environment (each field's
    variable is its name in capitals: ``RANK``, ``LOCAL_RANK``, ...); the defaults are a lone process's."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int | None = None  # None: not under torchrun (one process on its host)
    node_rank: int | None = None  # torchrun's --node-rank for a multi-host run, when the launcher sets it
    master_addr: str = ""
    master_port: int = 29500
    torchelastic_run_id: str = ""  # set by torchrun in every process it starts


def ranks(env: Mapping[str, str] | None = None) -> Ranks:
    """The launch variables of ``env`` (this process's environment by default) decoded (stdlib only: the
    doctor's side in a user's interpreter reads them too); a malformed number is a ValueError naming it."""
    env = os.environ if env is None else env
    given: dict[str, int | str] = {}
    for f in fields(Ranks):
        raw = env.get(f.name.upper(), "")
        if raw == "":
            continue
        try:
            given[f.name] = int(raw) if "int" in str(f.type) else raw
        except ValueError:
            raise ValueError(f"the launch environment: {f.name.upper()}={raw!r} is no whole number") from None
    return Ranks(**given)  # type: ignore[arg-type]
