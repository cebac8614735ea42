"""A child process of the runner ends with its parent: a ``kill -9`` of twinbench never leaves a worker running.

The runner starts each child in a session of its own (so a Ctrl-C reaches only twinbench, which then stops the
child), so the child would outlive a parent killed with SIGKILL, which cannot stop it: its record would be
written into a temporary folder nobody reads, and its load would disturb the next measurement. The runner
puts its pid in the child's environment (:data:`ENV`); :func:`watch_parent`, called first thing by every child
module, checks twice a second that this process is still alive and otherwise kills the child's process group
(the worker and what it started: torchrun's ranks).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from pathlib import Path

ENV = "TWINBENCH_PARENT_PID"
INTERVAL_S = 0.5


def child_env() -> dict[str, str]:
    """What the runner adds to a child's environment."""
    return {ENV: str(os.getpid())}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError, IndexError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2] not in "ZX"  # killed, not yet reaped: dead all the same
    return True


def watch_parent() -> None:
    """Start the watch (a daemon thread) when the runner started this process; a no-op otherwise."""
    try:
        parent = int(os.environ.get(ENV, ""))
    except ValueError:
        return
    if parent == os.getpid():
        return

    def watch() -> None:
        while alive(parent):
            threading.Event().wait(INTERVAL_S)
        group = os.getpgrp()
        if group == os.getsid(0):  # our own session (the runner's start_new_session): only our processes
            with contextlib.suppress(OSError):
                os.killpg(group, signal.SIGKILL)
        os._exit(137)

    threading.Thread(target=watch, name="twinbench-lifeline", daemon=True).start()
