"""What every experiment in benchmarks/ shares: wait for a quiet machine, and summarise repeats.

    python benchmarks/sitting.py --wait [--max-load 0.3]    # block until the 1-minute load per core is below it
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from twinbench.record import read_jsonl  # every line in the flat layout, whatever its version


def wait_quiet(max_load_per_core: float = 0.3, timeout_s: float = 600.0) -> float:
    """Block until the 1-minute load average per core is at most ``max_load_per_core`` (or ``timeout_s``
    passed); return the load per core at the start."""
    cores = len(os.sched_getaffinity(0))
    end = time.time() + timeout_s
    while os.getloadavg()[0] / cores > max_load_per_core and time.time() < end:
        time.sleep(5)
    load = os.getloadavg()[0] / cores
    print(f"sitting: load {load:.2f} per core on {cores} core(s) at {time.strftime('%Y-%m-%d %H:%M:%S')}",
          file=sys.stderr)
    return load


def records(out: Path) -> list[dict]:
    """Every record of a results directory (or of its sub-directories, one per round)."""
    files = [out / "results.jsonl"] if (out / "results.jsonl").exists() else sorted(out.glob("*/results.jsonl"))
    return [r for f in files for r in read_jsonl(f)]


def median_range(values: list[float], fmt: str = "{:.0f}") -> str:
    """``159 (154-173)``: the median of the repeats with their range."""
    if not values:
        return "-"
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def cpu_info() -> dict[str, object]:
    """The CPU model and the vector/matrix extensions it has (framework gaps differ per machine: every
    benchmark records which machine it measured), as every twinbench record names it (``host_cpu``)."""
    from twinbench.measure.device import cpu_isa, cpu_name, host_cpu

    isa = cpu_isa()
    return {"cpu_model": cpu_name(), "isa": isa.split(", ") if isa else [], "cores": len(os.sched_getaffinity(0)),
            "cpu": host_cpu()}


def time_steps(step: Callable[..., Any], sync: Callable[[], None], batches: list[Any], warmup: int,
               steps: int) -> tuple[list[float], Any]:
    """``warmup`` untimed steps, then ``steps`` timed ones, the device synchronised before each clock read:
    (milliseconds per step, the last step's result). ``step(*batch)`` cycles through ``batches``."""
    for i in range(warmup):
        step(*batches[i % len(batches)])
    sync()
    times, out = [], None
    for i in range(steps):
        t = time.perf_counter()
        out = step(*batches[i % len(batches)])
        sync()
        times.append((time.perf_counter() - t) * 1e3)
    return times, out


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--wait", action="store_true")
    p.add_argument("--max-load", type=float, default=0.3)
    a = p.parse_args()
    if a.wait:
        wait_quiet(a.max_load)
