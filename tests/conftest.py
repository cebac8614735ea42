"""Shared test settings: a private twinbench cache, so tests never touch the user's."""

from __future__ import annotations

import json
import os
import signal
import tempfile
from pathlib import Path

import pytest
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


def pytest_collection_modifyitems(config, items) -> None:
    """Files holding slow tests first, each file's tests kept together and in order: with ``make test``'s two
    xdist workers taking a file at a time, the long files start early and the workers finish close together
    instead of one waiting for a long file that started last."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    first_seen: dict = {}
    for item in items:
        first_seen.setdefault(item.path, len(first_seen))
    items.sort(key=lambda item: (item.path not in slow_files, first_seen[item.path]))


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
