"""The tasks, a closed vocabulary: one module each (its :class:`~twinbench.tasks.task.Task`), registered here by
one line. Every module asks the Task (``TASKS[spec.train.task].variable_length``), never compares a task's name;
``--task``'s choices and ``Family.task`` are checked against :data:`TASKS` (a misspelled task fails at import).
"""

from __future__ import annotations

from twinbench.tasks import classify, custom, lm
from twinbench.tasks.task import Task

#: every task by name, in the order --help lists them
TASKS: dict[str, Task] = {}


def register(task: Task) -> Task:
    if task.name in TASKS:
        raise ValueError(f"task {task.name!r} registered twice")
    TASKS[task.name] = task
    return task


register(lm.TASK)
register(classify.TASK)
register(custom.TASK)

#: the task of the user's own model (--model FILE.py:build)
USER_TASK = custom.TASK.name


def of(name: object) -> Task | None:
    """The task a record names (a record is data: a name no task has gives None, never an error)."""
    return TASKS.get(name) if isinstance(name, str) else None
