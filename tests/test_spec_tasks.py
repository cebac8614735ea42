"""A task is a closed type (tasks/): one Task object per task, registered once; every module outside tasks/ and
models/ asks it (``TASKS[name].variable_length``) instead of comparing the task's name, and a misspelled task
fails where it is declared."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest

from twinbench import config, tasks
from twinbench.models import family
from twinbench.spec import FIELDS, SpecError, from_preset, validate

SRC = Path(__file__).resolve().parents[1] / "src" / "twinbench"


def _compares_a_task_name(node: ast.AST) -> bool:
    """``x.task == "lm"``, ``"classify" != task``, ``task in ("lm", ...)``: a task's name tested in code."""
    if not isinstance(node, ast.Compare):
        return False
    sides = [node.left, *node.comparators]
    names = {s.value for s in sides if isinstance(s, ast.Constant)}
    names |= {e.value for s in sides if isinstance(s, (ast.Tuple, ast.List, ast.Set)) for e in s.elts
              if isinstance(e, ast.Constant)}
    return bool(names & set(tasks.TASKS))


def test_no_module_outside_the_tasks_and_models_compares_a_task_name():
    hits = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        if rel.parts[0] in ("tasks", "models"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if _compares_a_task_name(node):
                hits.append(f"{rel}:{node.lineno}")
    assert hits == []


def test_the_task_flag_and_the_families_read_the_registry():
    assert tuple(tasks.TASKS) == config.TASKS and config.choices(FIELDS["task"][0]) == config.TASKS
    assert {f.task for f in family.FAMILIES.values()} <= set(tasks.TASKS)
    assert tasks.of("classify") is tasks.TASKS["classify"] and tasks.of("no-such-task") is None and tasks.of(3) is None
    with pytest.raises(ValueError, match="registered twice"):
        tasks.register(tasks.TASKS["lm"])


def test_a_family_with_a_misspelled_task_fails_at_registration(monkeypatch):
    import types

    module = types.ModuleType("fake_family")
    module.FAMILY = replace(family.FAMILIES["bert"], name="fake", task="clasify", presets={})
    monkeypatch.setitem(__import__("sys").modules, "fake_family", module)
    with pytest.raises(ValueError, match="no task 'clasify'"):
        family.register("fake_family")
    assert "fake" not in family.FAMILIES


def test_a_task_s_own_rules_refuse_a_spec_in_one_line():
    with pytest.raises(SpecError, match=r"^--seq 8 is too short for classification; allowed: 16\.\."):
        validate(from_preset("bert-tiny", {"seq": 8}, framework="torch", strategy="eager"))
    with pytest.raises(SpecError, match=r"needs --task classify"):
        validate(from_preset("tiny", framework="torch", strategy="eager+bucket"))
    assert tasks.TASKS["classify"].variable_length and not tasks.TASKS["lm"].variable_length
    assert tasks.TASKS["lm"].next_token and not tasks.TASKS["custom"].next_token
