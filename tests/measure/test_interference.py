"""What other processes took during the timed steps: measured from /proc, the run's own process tree excluded."""

from __future__ import annotations

import subprocess
import time

from twinbench.measure.interference import Meter, core_busy_s, tree_cpu_s
from twinbench.record import condition_warnings


def _burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_own_work_is_not_interference_and_others_work_is():
    """One window, two meters: the same CPU burnt by this process is the run's own for a meter rooted here and
    interference for a meter rooted at another process; the difference is that burn's CPU seconds."""
    other = subprocess.Popen(["sleep", "30"])
    try:
        with Meter() as own, Meter(root=other.pid) as foreign:
            _burn(0.6)
    finally:
        other.kill()
    gap = foreign.fields().interference_cores - own.fields().interference_cores
    burnt = gap * own.fields().interference_window_s  # cores x seconds: CPU seconds, however busy the machine
    assert 0.45 < burnt < 0.9, (own.fields(), foreign.fields())
    assert set(own.fields().cpu_busy_per_core) == set(core_busy_s())


def test_tree_cpu_counts_children():
    """A child that has burnt 0.4 s of CPU (it says so when done, however long a busy machine makes that take)."""
    child = subprocess.Popen(["python3", "-c", "import time\nt=time.process_time()+0.4\nwhile time.process_time()<t: pass\n"
                              "print('burnt', flush=True)\ntime.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "burnt"
        assert tree_cpu_s(child.pid) >= 0.3
        import os

        assert tree_cpu_s(os.getpid()) >= tree_cpu_s(child.pid)  # the child is below this process
    finally:
        child.kill()
        child.wait()


def test_busy_warning_comes_from_the_measured_figure():
    quiet_but_damped = {"interference_cores": 0.05, "cpu_count": 2, "load_avg_1m": 3.0}
    assert not any(w.startswith("machine busy") for w in condition_warnings(quiet_but_damped))
    busy = {"interference_cores": 0.9, "cpu_count": 2, "load_avg_1m": 0.1}
    assert any("during the timed steps" in w for w in condition_warnings(busy))
    old_record = {"cpu_count": 2, "load_avg_1m": 3.0}  # no measurement: the load average decides, as before
    assert any(w.startswith("machine busy") for w in condition_warnings(old_record))


def test_runqueue_wait_is_the_calling_threads_own():
    """The second field of the calling thread's schedstat (Linux), read again on each call, in each thread."""
    import threading
    from pathlib import Path

    import pytest

    from twinbench.measure.interference import runqueue_wait_s

    def direct() -> float:
        return int(Path("/proc/thread-self/schedstat").read_text().split()[1]) / 1e9

    if not Path("/proc/thread-self/schedstat").exists():
        pytest.skip("no schedstat on this kernel")
    for _ in range(2):  # the second call reads the kept-open file again
        before = direct()
        got = runqueue_wait_s()
        assert got is not None and before <= got <= direct()
    seen: list[tuple[float, float | None, float]] = []
    worker = threading.Thread(target=lambda: seen.append((direct(), runqueue_wait_s(), direct())))
    worker.start()
    worker.join()
    lo, got, hi = seen[0]
    assert got is not None and lo <= got <= hi  # the worker's own figure, not the main thread's
