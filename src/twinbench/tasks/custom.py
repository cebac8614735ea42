"""``custom``: the user's own model (``--model``): its loss is its own, on the language-model windows."""

from __future__ import annotations

from twinbench.tasks.task import Task

TASK = Task("custom", "the user's model (--model): its own loss on windows of a text",
            data="twinbench.data.tasks:windows", check_data="twinbench.data.tasks:check_text")
