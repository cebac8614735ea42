"""On a busy machine, compare's and claims' lines say which run other processes disturbed and the one flag that
fixes it (measure/interference.py ``disturbed``); a quiet machine gets no line. Synthetic records, no process."""

from __future__ import annotations

from typing import Any

from twinbench.claims.core import Evidence, Setup
from twinbench.measure.interference import disturbed
from twinbench.record import as_record


def rec(framework: str, strategy: str, step: float, p10: float, p90: float, **kw: Any) -> Any:
    base = {"status": "ok", "framework": framework, "strategy": strategy, "run_id": f"{framework}-{strategy}",
            "step_ms": step, "step_ms_p10": p10, "step_ms_p90": p90, "threads": 2, "cpu_count": 2,
            "interference_cores": 1.3, "load_avg_1m": 3.0}
    return as_record(base | kw)


def test_the_side_whose_steps_spread_is_named_with_the_threads_flag():
    """The README's case: torch eager 357.7 ms against JAX's 2.8 ms while other processes kept 1.3 of 2 cores busy;
    torch's steps spread (its thread pool waits for a descheduled thread), JAX's did not: torch is named, JAX
    steady, and `--threads 1` is the flag (one thread gave 12x)."""
    torch = rec("torch", "eager", 357.7, 120.0, 420.0)
    jax = rec("jax", "jit", 2.8, 2.7, 2.9, threads=1)
    (line,) = disturbed([torch, jax], {"torch-eager": "torch/eager", "jax-jit": "jax/jit"})
    assert "disturbed (its steps spread, most first): torch/eager (2 thread(s), steps p10-p90 120-420 ms, 3.5x)" in line
    assert "steady: jax/jit" in line and "`--threads 1`" in line
    assert line.index("disturbed") < line.index("steady")


def test_a_run_with_more_threads_than_the_cores_left_is_named_and_a_quiet_machine_gets_nothing():
    crowded = rec("torch", "eager", 30.0, 29.0, 31.0, interference_cores=1.5, cpu_count=4, threads=4)
    (line,) = disturbed([crowded])
    assert "sharing its cores" in line and "`--threads 2`" in line  # 4 cores, 1.5 taken: 2 left
    assert disturbed([rec("torch", "eager", 30.0, 29.0, 31.0, interference_cores=0.05)]) == []
    fits = rec("jax", "jit", 3.0, 2.0, 4.0, threads=1)  # spread 2x, but one thread already fits: no flag helps
    (line,) = disturbed([fits])
    assert "No flag fixes it" in line and "--threads" not in line


def test_a_claims_caveat_on_a_loaded_machine_names_the_run_and_the_flag():
    torch = rec("torch", "eager+dynamic", 144.0, 60.0, 300.0)
    jax = rec("jax", "naive+dynamic", 40.0, 39.0, 41.0, threads=1)
    caveat = Evidence(Setup(), {"torch": torch, "jax_naive": jax}).loaded()
    assert "timings are disturbed" in caveat and "torch/eager+dynamic" in caveat and "`--threads 1`" in caveat


def test_several_disturbed_runs_are_ranked_by_their_spread():
    """The sitting of this change (tiny, 1.6 of 2 cores busy): torch eager's steps 67-1798 ms (26.8x), jax jit's
    2.24-11 ms (4.9x): both named, torch first, and `--threads 1`."""
    torch = rec("torch", "eager", 687.4, 67.2, 1798.1)
    jax = rec("jax", "jit", 3.2, 2.24, 11.0)
    (line,) = disturbed([jax, torch])
    assert "their steps spread, most first): torch/eager (2 thread(s), steps p10-p90 67.2-1798 ms, 26.8x), jax/jit" in line
    assert "`--threads 1`" in line
