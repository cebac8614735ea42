"""The matmul peak cache: keyed on versions, refuses disagreeing repeats, knows when and under what load it
was measured, reads the first cache format as stale; `twinbench peak` shows it and measures on request.

The measurement itself is replaced by scripted repeats here (no timing is asserted); one test measures for
real through the CLI and checks only what was stored.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from twinbench.measure import peak

ARGS = ("torch", "cpu", "Test CPU", "fp32", 2)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TWINBENCH_CACHE", str(tmp_path))
    monkeypatch.setenv(peak.LOAD_ENV, "0.1")  # a quiet machine unless a test says otherwise
    monkeypatch.setattr(peak, "framework_versions", lambda fw: {"torch": "2.13.0+cpu"})
    return tmp_path / "peaks.json"


class Scripted:
    """Stands in for the timed matmuls: each call returns the next list of repeats (TFLOP/s) per size."""

    def __init__(self, *attempts: list[float]) -> None:
        self.attempts, self.calls = list(attempts), 0

    def __call__(self, framework: str, platform: str, dtype: str, reps: int,
                 sizes: tuple[int, ...] | None = None) -> dict[int, list[float]]:
        reps_ = self.attempts[min(self.calls, len(self.attempts) - 1)]
        self.calls += 1
        self.sizes = sizes
        return {n: reps_ if n == 2048 else [r / 2 for r in reps_] for n in sizes or (512, 2048)}


STEADY = [0.19, 0.188, 0.185, 0.19, 0.186, 0.189, 0.187]  # spread 2.7%
NOISY = [0.19, 0.12, 0.15, 0.19, 0.10, 0.17, 0.18]  # spread 90%


def test_measured_peak_is_cached_with_when_how_and_spread(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scripted = Scripted(STEADY)
    monkeypatch.setattr(peak, "_per_size", scripted)
    p = peak.lookup(*ARGS)
    assert p.tflops == 0.19 and p.spread == pytest.approx(0.19 / 0.185 - 1) and p.trusted
    assert p.method.size == 2048 and p.method.repeats == peak.REPEATS and p.method.attempts == 1
    assert p.repeats_tflops == STEADY and p.load_per_core == 0.1
    assert p.age_s() is not None and p.age_s() < 3600
    entry = json.loads(cache.read_text())[p.key]
    assert entry["versions"] == {"torch": "2.13.0+cpu"} and entry["measured_at"] == p.measured_at
    assert "torch=2.13.0+cpu" in p.key
    assert peak.lookup(*ARGS).tflops == 0.19 and scripted.calls == 1  # from the cache
    fields = dataclasses.asdict(p.record_fields())
    assert set(fields) == {"peak_measured_at", "peak_spread", "peak_load_per_core", "peak_device_shared"}
    assert fields["peak_device_shared"] == 0


def test_a_new_library_version_measures_again(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scripted = Scripted(STEADY)
    monkeypatch.setattr(peak, "_per_size", scripted)
    peak.lookup(*ARGS)
    monkeypatch.setattr(peak, "framework_versions", lambda fw: {"torch": "2.14.0+cpu"})
    peak.lookup(*ARGS)
    assert scripted.calls == 2 and len(json.loads(cache.read_text())) == 2


def test_disagreeing_repeats_are_measured_again_then_refused(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    noisy = Scripted(NOISY)
    monkeypatch.setattr(peak, "_per_size", noisy)
    p = peak.lookup(*ARGS)
    assert noisy.calls == peak.ATTEMPTS and not p.trusted and p.method.attempts == peak.ATTEMPTS
    assert noisy.sizes == (2048,)  # the attempts after the first time the fastest size only
    assert "disagree by 90%" in p.problems()[0]
    # a noisy first attempt, then a steady one: the steady one is kept
    monkeypatch.setattr(peak, "_per_size", Scripted(NOISY, STEADY))
    p = peak.lookup(*ARGS)  # the refused entry is measured again on a quiet machine
    assert p.trusted and p.method.attempts == 2 and p.spread < peak.MAX_SPREAD


def test_a_busy_machine_gets_one_attempt(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Measured under load the figure is refused whatever its spread: disagreeing repeats are not timed again."""
    noisy = Scripted(NOISY, STEADY)
    monkeypatch.setattr(peak, "_per_size", noisy)
    monkeypatch.setenv(peak.LOAD_ENV, "1.4")
    p = peak.lookup(*ARGS)
    assert noisy.calls == 1 and p.method.attempts == 1 and not p.trusted
    assert [q.split(" (")[0] for q in p.problems()] == ["its repeats disagree by 90%", "it was measured on a busy machine"]


def test_load_policy(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scripted = Scripted(STEADY)
    monkeypatch.setattr(peak, "_per_size", scripted)
    monkeypatch.setenv(peak.LOAD_ENV, "1.4")  # busy: measured anyway (nothing cached), flagged
    busy = peak.lookup(*ARGS)
    assert not busy.trusted and "busy machine (load 1.40 per core" in busy.problems()[0]
    peak.lookup(*ARGS)
    assert scripted.calls == 1  # still busy: measuring again would not give a better figure
    monkeypatch.setenv(peak.LOAD_ENV, "0.2")
    quiet = peak.lookup(*ARGS)
    assert scripted.calls == 2 and quiet.trusted  # quiet again: the busy figure is replaced
    monkeypatch.setenv(peak.LOAD_ENV, "3.0")
    assert peak.lookup(*ARGS) == quiet and scripted.calls == 2  # a trusted peak is kept, whatever the load now


def test_runs_starting_together_measure_once(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two lookups at once with nothing cached: the second waits while the first measures (their matmuls are not
    timed against each other) and takes its figure."""
    import threading
    import time

    scripted = Scripted(STEADY)

    def measuring_slowly(*args: Any, **kwargs: Any) -> dict[int, list[float]]:
        time.sleep(0.3)  # long enough for the other lookup to arrive meanwhile
        return scripted(*args, **kwargs)

    monkeypatch.setattr(peak, "_per_size", measuring_slowly)
    got: list[peak.Peak] = []
    runs = [threading.Thread(target=lambda: got.append(peak.lookup(*ARGS))) for _ in range(2)]
    for t in runs:
        t.start()
    for t in runs:
        t.join()
    assert scripted.calls == 1 and len(got) == 2 and got[0] == got[1] and got[0].trusted


def test_remeasure_never_replaces_a_trusted_peak_with_a_refused_one(cache: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(peak, "_per_size", Scripted(STEADY))
    good = peak.lookup(*ARGS)
    monkeypatch.setattr(peak, "_per_size", Scripted(NOISY))
    assert not peak.lookup(*ARGS, remeasure=True).trusted
    assert peak.Peak.from_json(json.loads(cache.read_text())[good.key]) == good


def test_first_format_cache_is_read_as_stale(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old_key = "torch|cpu|Test CPU|fp32|threads=2"
    cache.write_text(json.dumps({old_key: 0.035}))  # a peak taken under load, cached forever by old twinbench
    scripted = Scripted(STEADY)
    monkeypatch.setattr(peak, "_per_size", scripted)
    assert peak.lookup(*ARGS).tflops == 0.19 and scripted.calls == 1
    listed = dict(peak.cached_peaks())
    assert listed[old_key] is None and len(listed) == 2
    cache.write_text("{not json")
    assert peak.cached_peaks() == [] and peak.Peak.from_json({"format": 2, "tflops": 1.0}) is None


def _twinbench(cache_dir: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "TWINBENCH_CACHE": str(cache_dir), "COLUMNS": "250"}
    return subprocess.run([sys.executable, "-m", "twinbench.cli", "peak", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


def _entry(**over: Any) -> dict[str, Any]:
    p = peak.Peak("jax", "cpu", "Test CPU", "fp32", 2, {"jax": "0.10.2", "jaxlib": "0.10.2"}, 0.19, STEADY,
                  peak.spread(STEADY), "2026-01-01T00:00:00+00:00", 0.05, peak.Method(size=2048))
    return {**p.to_json(), **over}


def _invoke(cache_dir: Path, *args: str) -> Any:
    """`twinbench peak ARGS` in this process (typer's test runner)."""
    from typer.testing import CliRunner

    from twinbench.cli import app

    return CliRunner().invoke(app, ["peak", *args], env={"TWINBENCH_CACHE": str(cache_dir)})


def test_peak_command_lists_the_cache(tmp_path: Path) -> None:
    entries = [_entry(), _entry(dtype="bf16", load_per_core=1.2)]
    cached = {peak.Peak.from_json(e).key: e for e in entries} | {"torch|cpu|Old CPU|fp32|threads=2": 0.035}
    (tmp_path / "peaks.json").write_text(json.dumps(cached))
    p = _invoke(tmp_path)
    assert p.exit_code == 0, p.output
    assert "190.0" in p.output and "2.7%" in p.output and "jaxlib 0.10.2" in p.output
    assert " d " in p.output  # its age, in days
    assert "measured busy (1.20/core)" in p.output and "stale (old format)" in p.output
    empty = _invoke(tmp_path / "none")
    assert empty.exit_code == 0 and "--remeasure" in empty.output


@pytest.mark.parametrize(("args", "message"), [
    (["--precision", "fp16"], "--precision: unknown value 'fp16'"),
    (["--framework", "mxnet"], "--framework: unknown framework 'mxnet'"),
    (["--threads", "-1"], "--threads must be >= 0"),
])
def test_peak_command_bad_input_is_one_line_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    p = _invoke(tmp_path, "--remeasure", *args)
    assert p.exit_code == 2 and message in p.output and "Traceback" not in p.output
    assert len(p.output.strip().splitlines()) == 1
    assert not (tmp_path / "peaks.json").exists()  # nothing was measured


def test_remeasure_measures_in_a_fresh_process_and_caches(tmp_path: Path) -> None:
    p = _twinbench(tmp_path, "--remeasure", "--framework", "torch", "--threads", "1")
    # a busy machine may make the repeats disagree (exit 1 with one line saying so); either way it is stored
    assert p.returncode in (0, 1), p.stderr
    if p.returncode == 1:
        assert "disagree" in p.stderr or "busy" in p.stderr
    (key, entry), = json.loads((tmp_path / "peaks.json").read_text()).items()
    assert key.startswith("torch|cpu|") and "threads=1" in key and "torch=" in key
    assert entry["threads"] == 1 and len(entry["repeats_tflops"]) == peak.REPEATS and entry["tflops"] > 0
    assert entry["spread"] == pytest.approx(peak.spread(entry["repeats_tflops"]), rel=1e-3)
    assert "GFLOP/s" in p.stdout and "torch" in p.stdout


def test_larger_sizes_are_skipped_once_a_call_is_long() -> None:
    assert not peak._long(1024, [0.19] * 7)  # 11 ms per call at 190 GFLOP/s: try the next size
    assert peak._long(2048, [0.03] * 7)  # 0.57 s per call (bf16 on a CPU): at peak already, stop there
