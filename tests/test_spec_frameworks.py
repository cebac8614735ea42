"""Frameworks are a closed type (config.Framework): the backends are keyed by it, a strategy or a modifier naming
any other fails at import, and only the backends (backends/) compare a framework's name. The comparisons left in
other modules are listed here, each a debt: a module may lose some, never gain one, and no other module may
start (fix one by asking the run's backend, ``backends.get(framework).SOMETHING``, and lower its count)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from twinbench import backends
from twinbench.config import FRAMEWORKS, Framework
from twinbench.strategies import registry
from twinbench.strategies.modifiers import DECLARED

SRC = Path(__file__).resolve().parents[1] / "src" / "twinbench"

#: module -> framework-name comparisons it still makes (17 in 12 modules; issue 74 counted 25 in 18 by grep)
KNOWN = {
    "doctor/session.py": 1, "doctor/findings/compilation.py": 4, "doctor/findings/machine.py": 1,
    "report/table.py": 1, "explain/runs.py": 1, "explain/depth.py": 2, "explain/trace_file.py": 1,
    "explain/gap.py": 1, "explain/ops.py": 1, "cli/analyse.py": 1, "byo/plan.py": 2,
    "byo/run.py": 1,
}


def comparisons() -> dict[str, int]:
    """Per module outside backends/: comparisons (``==``, ``!=``, ``in``) with a framework's name."""
    out: dict[str, int] = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("backends/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            names = {s.value for s in sides if isinstance(s, ast.Constant)}
            names |= {e.value for s in sides if isinstance(s, (ast.Tuple, ast.List, ast.Set)) for e in s.elts
                      if isinstance(e, ast.Constant)}
            if names & set(FRAMEWORKS):
                out[rel] = out.get(rel, 0) + 1
    return out


def test_no_module_outside_the_backends_starts_comparing_framework_names():
    found = comparisons()
    new = {m: n for m, n in found.items() if n > KNOWN.get(m, 0)}
    assert new == {}, "ask the run's backend (backends.get(framework)) instead of comparing its name"


def test_frameworks_are_a_closed_type_the_backends_strategies_and_modifiers_name():
    assert tuple(Framework) == FRAMEWORKS and set(backends.BACKENDS) == set(FRAMEWORKS)
    assert {fw for fw, _ in registry.REGISTRY} <= set(FRAMEWORKS)
    assert all(set(m.frameworks) <= set(FRAMEWORKS) for m in DECLARED.values())
    with pytest.raises(ValueError, match="no framework 'jxa'"):
        registry.register("jxa", "x", "a misspelled framework", "m:f")
    assert ("jxa", "x") not in registry.REGISTRY
