"""The package's import graph has no cycle among twinbench modules.

Built from the source with ``ast``: every ``import`` / ``from ... import`` of a twinbench module counts, at module
level, inside a function (a function-level import only hides a cycle until that function runs) or under
``if TYPE_CHECKING:`` (a type-only import is still a circle a reader follows round, and it runs the day something
evaluates the annotations: ``typing.get_type_hints``, a dropped guard). ``from pkg import name`` is an edge to
``pkg.name`` when that is a module, else to ``pkg``. A package's ``__init__`` importing its own submodules is an
edge like any other, so a submodule that imports its package back closes a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


def modules(src: Path = SRC) -> dict[str, Path]:
    """Dotted module name -> its file, for every module of the twinbench package."""
    out = {}
    for path in sorted((src / "twinbench").rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of ``tree``, at any depth (functions, ``if TYPE_CHECKING:`` blocks included)."""
    return [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]


def graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the twinbench modules it imports (anywhere in its body)."""
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    pkg = package
                    for _ in range(node.level - 1):
                        pkg = pkg.rpartition(".")[0]
                    base = f"{pkg}.{base}" if base else pkg
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            edges[name].update(t for t in targets if t in mods and t != name)
    return edges


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as ``[a, b, ..., a]``, or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in sorted(edges):
        if root in state:
            continue
        path, stack = [root], [iter(sorted(edges[root]))]
        state[root] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(edges[nxt])))
    return None


def all_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Cycles enough to name every circle: one found, its closing edge set aside, the search run again."""
    edges = {k: set(v) for k, v in edges.items()}
    out = []
    while (cycle := find_cycle(edges)) is not None:
        out.append(cycle)
        edges[cycle[-2]].discard(cycle[-1])
    return out


def test_twinbench_imports_have_no_cycle():
    mods = modules()
    assert "twinbench.spec" in mods and "twinbench.models.family" in mods
    cycles = [" -> ".join(c) for c in all_cycles(graph(mods))]
    assert cycles == [], "import cycles:\n" + "\n".join(cycles)


@pytest.mark.parametrize(("sources", "expected"), [
    ({"a": "from twinbench import b", "b": "def f():\n    from twinbench.a import x"}, ["a", "b", "a"]),
    ({"a": "from . import b", "b": "import twinbench.c", "c": "from .a import y"}, ["a", "b", "c", "a"]),
    ({"a": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from twinbench import b", "b": "import twinbench.a"},
     ["a", "b", "a"]),
    ({"p/__init__": "from twinbench.p.m import f", "p/m": "from typing import TYPE_CHECKING\n"
      "if TYPE_CHECKING:\n    from twinbench.p import Whole"}, ["p", "p.m", "p"]),
    ({"a": "import twinbench.b", "b": "import os\nimport numpy"}, None),
])
def test_the_cycle_check_sees_function_level_type_only_and_relative_imports(tmp_path, sources, expected):
    pkg = tmp_path / "twinbench"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name, text in sources.items():
        (pkg / f"{name}.py").parent.mkdir(exist_ok=True)
        (pkg / f"{name}.py").write_text(text + "\n")
    cycle = find_cycle(graph(modules(tmp_path)))
    assert cycle == (None if expected is None else [f"twinbench.{m}" for m in expected])
