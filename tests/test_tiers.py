"""The suite's tiers (tests/tiers.py): the lists of heavy tests name files and tests that exist, a Python process
is told from another command, and the clock counts CPU seconds."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import tiers

TESTS = Path(__file__).resolve().parent


def test_every_heavy_file_and_test_exists():
    missing = [f for f in tiers.HEAVY_FILES if not (TESTS / f).is_file()]
    for entry in tiers.HEAVY_TESTS:
        path, _, name = entry.partition("::")
        source = (TESTS / path).read_text() if (TESTS / path).is_file() else ""
        if not re.search(rf"^def {re.escape(name)}\(", source, re.M):
            missing.append(entry)
    assert missing == []
    assert not {t.partition("::")[0] for t in tiers.HEAVY_TESTS} & tiers.HEAVY_FILES  # a file is listed once


@pytest.mark.parametrize(("args", "python"), [
    ([sys.executable, "-m", "twinbench.worker", "spec.json"], True),
    (["/usr/bin/python3.11", "-c", "pass"], True),
    (["torchrun", "--nproc-per-node", "2", "x.py"], True),
    ("python3 -m twinbench compare", True),
    (["bash", "benchmarks/tpu/setup.sh"], False),
    ("git status", False),
    ([], False),
])
def test_a_python_process_is_told_from_other_commands(args, python):
    assert (tiers.python_command(args) is not None) == python


def test_the_clock_counts_this_process_cpu():
    clock = tiers.Clock()
    before, total = clock.cpu_s(), 0
    for _ in range(100_000):  # busy: the figure must grow with the CPU this process spends (~0.3 s of it)
        total += sum(range(10_000))
        if clock.cpu_s() >= before + 0.3:
            break
    assert clock.cpu_s() >= before + 0.3
    assert total > 0 and re.match(r"CPU [\d.]+ s \(user [\d.]+ \+ sys [\d.]+; .* wall on \d+ cores", clock.line())


def test_the_lists_are_proposed_from_recorded_costs(tmp_path):
    def row(test: str, started: int = 0, cpu: float = 0.1, slow: bool = False) -> str:
        return json.dumps({"id": f"tests/{test}", "slow": slow, "wall": 1.0, "self_cpu": cpu, "child_cpu": 0.0,
                           "started": started}) + "\n"

    (tmp_path / "1.jsonl").write_text(
        row("a/test_x.py::test_spawns[p1]", started=1) + row("a/test_x.py::test_spawns[p2]")  # one variant: all
        + row("a/test_x.py::test_quick") + row("a/test_x.py::test_quick_too") + row("a/test_x.py::test_and_this")
        + row("test_y.py::test_compiles", cpu=tiers.HEAVY_CPU_S) + row("test_y.py::test_slow", slow=True)
        + row("test_z.py::test_quick"))
    assert tiers.propose(tmp_path) == (["test_y.py"], ["a/test_x.py::test_spawns"])
