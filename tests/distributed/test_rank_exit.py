"""A torchrun rank ends right after its record (``distributed.end``), never in the interpreter's teardown.

torch's C++ teardown at interpreter exit now and then aborts a rank that finished cleanly ("terminate called
without an active exception", exit -6); torchrun then counts it as failed, its host's agent skips the exit
barrier, and a multi-host run's other agents wait in that barrier for 300 s. Here a finalizer that aborts
stands in for that teardown.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent("""
    import atexit, os, sys
    from pathlib import Path
    from twinbench import distributed

    class AbortsInTeardown:
        def __del__(self):
            os.abort()

    keep = AbortsInTeardown()  # destroyed only when the interpreter tears the module down
    atexit.register(Path(sys.argv[1]).write_text, "exit handlers ran")
    sys.exit(distributed.end(int(sys.argv[2])))
""")


def run_rank(tmp_path: Path, code: int, torchrun: bool) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k != "TORCHELASTIC_RUN_ID"}
    if torchrun:
        env["TORCHELASTIC_RUN_ID"] = "test"
    marker = tmp_path / f"atexit-{code}-{torchrun}"
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(marker), str(code)], env=env, capture_output=True,
                       text=True, timeout=60)
    return p.returncode, marker.read_text() if marker.exists() else ""


@pytest.mark.parametrize("code", [0, 1])
def test_a_torchrun_rank_ends_with_its_code_before_the_teardown(tmp_path, code):
    rc, ran = run_rank(tmp_path, code, torchrun=True)
    assert rc == code  # not -SIGABRT: the teardown that aborts never ran
    assert ran == "exit handlers ran"  # Python's exit handlers did (temporary caches are removed)


def test_outside_torchrun_the_worker_returns_its_code(tmp_path):
    rc, ran = run_rank(tmp_path, 0, torchrun=False)
    assert rc == -signal.SIGABRT  # an ordinary exit: the stand-in teardown ran (and aborted)
    assert ran == "exit handlers ran"
