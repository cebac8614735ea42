"""The package's import graph has no cycle among twinbench modules.

Built from the source with ``ast``: every ``import`` / ``from ... import`` of a twinbench module counts, at module
level or inside a function (a function-level import only hides a cycle until that function runs); imports under
``if TYPE_CHECKING:`` never run and do not count. ``from pkg import name`` is an edge to ``pkg.name`` when that is
a module, else to ``pkg``.
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


def _is_type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of ``tree``, at any depth, except those under ``if TYPE_CHECKING:``."""
    out, todo = [], [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        for child in ast.iter_child_nodes(node):
            if not _is_type_checking(child):
                todo.append(child)
            else:
                todo.extend(child.orelse)
    return out


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


def test_twinbench_imports_have_no_cycle():
    mods = modules()
    assert "twinbench.spec" in mods and "twinbench.models.family" in mods
    cycle = find_cycle(graph(mods))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize(("sources", "expected"), [
    ({"a": "from twinbench import b", "b": "def f():\n    from twinbench.a import x"}, ["a", "b", "a"]),
    ({"a": "from . import b", "b": "import twinbench.c", "c": "from .a import y"}, ["a", "b", "c", "a"]),
    ({"a": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from twinbench import b", "b": "import twinbench.a"},
     None),
])
def test_the_cycle_check_sees_function_level_and_relative_imports(tmp_path, sources, expected):
    pkg = tmp_path / "twinbench"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name, text in sources.items():
        (pkg / f"{name}.py").write_text(text + "\n")
    cycle = find_cycle(graph(modules(tmp_path)))
    assert cycle == (None if expected is None else [f"twinbench.{m}" for m in expected])
