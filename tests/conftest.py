"""Shared test settings: a private twinbench cache, so tests never touch the user's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest
import tiers
from suite_xla_flags import SUITE

from twinbench import xla_flags

os.environ.setdefault("TWINBENCH_CACHE", tempfile.mkdtemp(prefix="twinbench-test-cache-"))
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
# The suite checks computations on the CPU: simulated JAX devices, torchrun with gloo ranks, doctor examples that
# force host devices. On a GPU machine both frameworks are pinned to the CPU too, so `make test` passes there.
os.environ["JAX_PLATFORMS"] = "cpu"
# The tests read whole table rows: the command line's output is 180 columns wide in them (a user's log gets
# 100 unless COLUMNS says otherwise; tests/test_safety.py checks that default)
os.environ.setdefault("COLUMNS", "180")
os.environ["CUDA_VISIBLE_DEVICES"] = ""
# explain's per-shape A/B starts a process a framework (explain/shape_ab.py): the suite's explains, in process and in
# the CLIs it starts, leave their shape unconfirmed ("not timed"); tests/explain/test_shape_ab.py times shapes for real
os.environ["TWINBENCH_SHAPE_AB"] = "0"
# OpenMP threads (torch's intra-op pool) sleep when idle instead of spinning: libgomp's default spin-wait took 11%
# of the suite's CPU samples (perf), cores the other xdist worker and the runs' own threads needed. Set before
# torch is imported (libgomp reads it once); the runs the tests start inherit it. Measured runs outside the
# tests keep the OpenMP default.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# The tests check what is computed, never how fast (speed is measured in benchmarks/): XLA compiles without its
# backend optimisations (~30% faster) and with its classic elemental fusion emitters instead of the MLIR ones (the
# CPU backend compile of a tiny train step takes ~60% less, the suite's JAX cells ~45% less CPU), in this process
# and every run it starts (the flags: tests/suite_xla_flags.py). Both sides of every comparison are compiled alike; the
# JAX-PyTorch parity tolerances hold with it (tests/models/). LLVM code generation is not split into 32 parts
# compiled on threads (split count 1): a tiny train step's compile takes ~16% less CPU (median of 10 processes
# each), CPU the two xdist workers need more than the threads' wall time. The doctor's own runs of example scripts
# keep XLA's emitters and split (tests/doctor/doctor_env.py): their findings' severities are thresholds on
# compile seconds.
os.environ["XLA_FLAGS"] = xla_flags.with_defaults(os.environ.get("XLA_FLAGS", ""), SUITE)
# The Ctrl-C tests send SIGINT to a twinbench they started, as a terminal would. A suite started in the background
# by a shell without job control (a CI step, `make test &` in a script) has SIGINT ignored, and a child started
# while it is ignored ignores it too (Python then installs no KeyboardInterrupt handler): the interrupted compare
# would run to its end. The tests' processes take Python's own handler, which their children leave for the default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


CLOCK = tiers.Clock()  # the suite's CPU seconds, printed at the end (tests/tiers.py)


def pytest_collection_modifyitems(config, items) -> None:
    """Marks the tests of the full tier only ``heavy`` (tests/tiers.py: ``make check`` runs ``-m "not heavy"``).
    Then files holding slow tests first, then those all of whose tests are heavy, each file's tests kept together
    and in order: with ``make test``'s two xdist workers taking a file at a time, the long files start early and
    the workers finish close together instead of one waiting for a long file that started last."""
    for item in items:
        if tiers.is_heavy(item):
            item.add_marker("heavy")
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    # then the files all of whose tests are heavy (processes, compiles in process) before the quick ones: a file
    # of in-process compiles with no slow test of its own (the uncompiled parity cells) does not start last
    light_files = {item.path for item in items if not item.get_closest_marker("heavy")}
    first_seen: dict = {}
    for item in items:
        first_seen.setdefault(item.path, len(first_seen))
    items.sort(key=lambda item: (item.path not in slow_files, item.path in light_files, first_seen[item.path]))


RECORDS_BEFORE = Path(__file__).resolve().parent / "fixtures" / "records_before"


@pytest.fixture
def records_unchanged():
    """``check(records, name)``: the records' field names and losses are those of the same run before the
    trainers were unified (``fixtures/records_before/NAME.json``)."""
    return _records_unchanged


def _records_unchanged(records: list[dict], name: str) -> None:
    before = json.loads((RECORDS_BEFORE / f"{name}.json").read_text())
    assert sorted(before) == sorted(f"{r['framework']}/{r['strategy']}" for r in records)
    for r in records:
        b = before[f"{r['framework']}/{r['strategy']}"]
        assert sorted(r) == b["fields"], set(r) ^ set(b["fields"])
        assert r["losses"] == pytest.approx(b["losses"], rel=1e-4)


def _quick_tier(config) -> bool:
    return "not heavy" in (config.option.markexpr or "")


_STARTED: list[str] = []  # the Python processes started in this process, in a run of the quick tier


def pytest_configure(config) -> None:
    """In a run of the quick tier (``-m "not heavy"``), every Python process or torchrun started is noted (its
    fixtures' too, module-scoped ones included): the test it was started for fails (tests/tiers.py). With
    ``TWINBENCH_TEST_COSTS``, every process started is counted."""
    quick, costs = _quick_tier(config), bool(os.environ.get("TWINBENCH_TEST_COSTS"))
    if not (quick or costs):
        return
    real_init = subprocess.Popen.__init__

    def init(self, args, *a, **k):
        tiers.RunCosts.started += 1
        command = tiers.python_command(args)
        if command and quick:
            _STARTED.append(command)
        real_init(self, args, *a, **k)

    subprocess.Popen.__init__ = init


_SEEN = pytest.StashKey[int]()  # how many had been started when a test's setup began


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    item.stash[_SEEN] = len(_STARTED)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test of the quick tier that started a Python process ends as failed at its teardown, naming it."""
    outcome = yield
    report = outcome.get_result()
    started = _STARTED[item.stash.get(_SEEN, len(_STARTED)):]
    if call.when == "teardown" and started and report.passed:
        report.outcome = "failed"
        report.longrepr = (f"a test of the quick tier started {started[0]!r}: add it to HEAVY_TESTS or HEAVY_FILES "
                           "in tests/tiers.py (make check starts no Python process)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With ``TWINBENCH_TEST_COSTS=DIR``: one line per test into DIR (wall and CPU seconds, processes started),
    what ``python tests/tiers.py DIR`` proposes the tiers from."""
    out = os.environ.get("TWINBENCH_TEST_COSTS")
    if not out:
        yield
        return
    costs = tiers.RunCosts()
    yield
    Path(out).mkdir(parents=True, exist_ok=True)
    with open(Path(out) / f"{os.getpid()}.jsonl", "a") as f:
        f.write(json.dumps({"id": item.nodeid, "slow": item.get_closest_marker("slow") is not None, **costs.end()})
                + "\n")


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """The tests of the quick tier that took longer than ``tiers.QUICK_S``, then the run's CPU seconds (in the
    controller only: with xdist, after its workers have exited)."""
    if hasattr(config, "workerinput"):
        return
    if _quick_tier(config):
        long = sorted(((sum(getattr(r, "duration", 0.0) for r in reports), nodeid) for nodeid, reports in
                       _reports_by_test(terminalreporter).items()), reverse=True)
        long = [(d, n) for d, n in long if d > tiers.QUICK_S]
        if long:
            terminalreporter.write_sep("-", f"quick-tier tests over {tiers.QUICK_S:g} s (tests/tiers.py)")
            for d, n in long:
                terminalreporter.write_line(f"{d:6.1f} s  {n}")
    terminalreporter.write_sep("=", CLOCK.line())


def _reports_by_test(terminalreporter) -> dict[str, list]:
    out: dict[str, list] = {}
    for key in ("", "passed", "failed", "error", "skipped", "xfailed", "xpassed"):  # "": a passed setup/teardown
        for report in terminalreporter.stats.get(key, []):
            if getattr(report, "nodeid", None) and hasattr(report, "duration"):
                out.setdefault(report.nodeid, []).append(report)
    return out


@pytest.fixture
def fake_runs(monkeypatch):
    """runner.run_one replaced: each spec it is given is recorded; an ok record comes back at once (a file may
    define its own)."""
    from twinbench import runner
    from twinbench.record import for_spec

    calls = []

    def run_one(spec, timeout, env=None):
        calls.append(spec)
        return for_spec(spec, "ok", step_ms=10.0, step_ms_p10=10.0, step_ms_p90=10.0, compile_s=0.1,
                        first_step_s=0.2, losses=[1.0], step_times_ms=[10.0])

    monkeypatch.setattr(runner, "run_one", run_one)
    return calls
