"""The conditions every record carries: the machine's load when the run started, the matmul peak's age and
spread, and the warnings about both; the compare table says them under the table."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from twinbench import runner
from twinbench.machine import LOAD_ENV
from twinbench.record import CONDITION_WARNINGS, Record, as_record, condition_warnings, typed
from twinbench.report.table import conditions, markdown
from twinbench.spec import from_preset, validate

SPEC = validate(from_preset("tiny", {"steps": 3, "warmup": 1}, framework="torch", strategy="eager"))


def test_run_one_records_the_load_the_worker_started_under(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def fake_worker(spec: Any, timeout: float, env: dict[str, str]) -> Record:
        seen.update(env)
        return as_record({"status": "ok", "warnings": ["the batch is replicated"]})

    monkeypatch.setattr(runner, "_run_one", fake_worker)
    monkeypatch.setattr(runner, "LOAD", runner.LoadMeter(shared=False))
    monkeypatch.setattr(runner.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(runner.os, "getloadavg", lambda: (0.4, 0.0, 0.0))
    quiet = runner.run_one(SPEC, timeout=10)
    c = quiet.conditions
    assert (c.load_avg_1m, c.cpu_count, c.load_avg_1m_external) == (0.4, 2, 0.4)
    assert quiet.warnings == ["the batch is replicated"]  # 0.2 per core: no warning
    assert seen[LOAD_ENV] == "0.200"  # the worker knows it, for its peak measurement
    monkeypatch.setattr(runner.os, "getloadavg", lambda: (1.5, 0.0, 0.0))
    busy = runner.run_one(SPEC, timeout=10)
    assert busy.warnings[0] == "the batch is replicated"
    assert busy.warnings[1].startswith("machine busy: load average 1.50 on 2 core(s) (0.75 per core")


def test_own_earlier_runs_are_not_counted_as_load() -> None:
    meter = runner.LoadMeter(shared=False)
    now = 10_000.0
    meter.runs = [(now - 5, 60.0, 2.0)]  # a run that kept 2 cores busy for a minute ended 5 s ago
    own = meter.own(now)
    assert own == pytest.approx(2 * (1 - math.exp(-1)) * math.exp(-5 / 60))
    assert meter.own(now + 600) == 0  # long gone
    rec = {"load_avg_1m": 1.3, "load_avg_1m_external": max(1.3 - own, 0), "cpu_count": 2}
    assert condition_warnings(rec) == []  # 1.3 was mostly our own previous run
    assert condition_warnings({"load_avg_1m": 1.3, "cpu_count": 2})  # without the estimate: busy


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts runnable tasks through Linux /proc")
def test_a_run_of_more_processes_than_cores_is_remembered_by_its_runnable_tasks() -> None:
    """4 CPU-bound processes keep ~4 tasks runnable, which is what the load average counts, even on 2 cores
    (busy cores would say 2 there: the other ~2 would later be taken for another process's load)."""
    meter = runner.LoadMeter(shared=False)
    spin = "import time\nt = time.time()\nwhile time.time() - t < 2.0: pass"
    with meter.track():
        procs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(4)]
        for p in procs:
            p.wait()
    ((_, duration, runnable),) = meter.runs
    assert duration >= 2.0
    assert 3.0 <= runnable <= 5.0, runnable  # 4, give or take the processes' start and end


def test_ended_runs_of_an_earlier_command_are_not_counted_either(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TWINBENCH_CACHE", str(tmp_path))
    first, second = runner.LoadMeter(), runner.LoadMeter()  # two commands of a script, one after the other
    now = 10_000.0
    first.add(now - 5, 60.0, 2.0)
    expected = 2 * (1 - math.exp(-1)) * math.exp(-5 / 60)
    assert second.own(now) == pytest.approx(expected)  # read from the cache directory's history
    assert first.own(now) == pytest.approx(expected)  # counted once, not once from memory and once from the file
    (tmp_path / "recent_runs.jsonl").write_text("torn line\n[1, 2]\n")
    assert runner.LoadMeter().own(now) == 0  # a damaged history costs the estimate, never the run


def test_peak_warnings() -> None:
    assert condition_warnings({"peak_spread": 0.05, "peak_load_per_core": 0.1}) == []
    spread, busy = condition_warnings({"peak_spread": 0.25, "peak_load_per_core": 0.9})
    assert spread.startswith("matmul peak: its repeats disagree by 25%") and "busy machine (0.90" in busy
    assert all(w.startswith(CONDITION_WARNINGS) for w in (spread, busy))


def record(fw: str, **over: Any) -> dict[str, Any]:
    base = {"status": "ok", "framework": fw, "strategy": "eager" if fw == "torch" else "jit", "preset": "small",
            "layers": 4, "d_model": 256, "heads": 4, "vocab": 256, "n_params": 3.2e6, "batch": 8, "seq": 128,
            "steps": 30, "warmup": 5, "precision": "fp32", "compile_cache": "cold", "compile_s": 0.0,
            "first_step_s": 0.2, "step_ms": 100.0, "step_ms_p10": 90.0, "step_ms_p90": 110.0,
            "tokens_per_s": 10240.0, "achieved_tflops": 0.1, "mfu": 0.6, "peak_mem_bytes": 2**20,
            "compiles_during_steps": 0, "loss_first": 5.5, "loss_last": 2.8, "peak_tflops": 0.165,
            "peak_measured_at": "2026-12-03T05:00:00+00:00", "peak_spread": 0.031, "peak_load_per_core": 0.1,
            "load_avg_1m": 0.3, "load_avg_1m_external": 0.3, "cpu_count": 2, "warnings": []}
    return base | over


def test_table_footer_shows_peak_age_spread_load_and_warnings() -> None:
    busy = "machine busy: load average 1.60 on 2 core(s) (0.80 per core, above 0.5) when the run started; ..."
    recs = [record("torch"),
            record("jax", peak_tflops=0.19, peak_spread=0.14, load_avg_1m=1.6, load_avg_1m_external=1.6,
                   warnings=[busy, "matmul peak: its repeats disagree by 14% (above 10%), so the MFU is uncertain"])]
    lines = conditions(typed(recs))
    peak_line = next(ln for ln in lines if ln.startswith("MFU against"))
    assert "torch 165 GFLOP/s (spread 3%, measured 2026-12-03 05:00 UTC," in peak_line and " ago" in peak_line
    assert "jax 190 GFLOP/s (spread 14%" in peak_line
    assert "load: 1-minute load average 0.30-1.60 when the runs started, on 2 core(s)" in lines
    assert [ln for ln in lines if ln.startswith("warning:")] == [
        "warning: machine busy: 1 of 2 run(s) started with more than 0.5 load per core from other processes "
        "(up to 0.80); their timings are not reliable",
        "warning: the jax matmul peak is not to be trusted: its repeats disagree by 14% (above 10%), so its MFU is "
        "uncertain; `twinbench peak --remeasure` on an idle machine"]
    recs[0]["load_avg_1m_external"] = 0.1  # twinbench's own previous run made most of it
    assert "load: 1-minute load average 0.30-1.60 when the runs started, on 2 core(s); 0.10-1.60 without what " \
           "twinbench's own ended runs still add to it" in conditions(typed(recs))
    assert "(spread 3%" in markdown(typed(recs), 1000)


def test_records_of_an_older_twinbench_still_render() -> None:
    old = {k: v for k, v in record("torch").items() if not k.startswith(("peak_m", "peak_s", "peak_l", "load", "cpu"))}
    lines = conditions(typed([old]))  # a results file's line, read as the loader reads it
    assert "MFU against the measured matmul peak of each framework on this device: torch 165 GFLOP/s" in lines
    assert not any(ln.startswith(("load:", "warning:")) for ln in lines)
