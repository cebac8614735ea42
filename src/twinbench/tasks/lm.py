"""``lm``: next-token language modelling (GPT, Llama): random windows of a byte corpus, every token real."""

from __future__ import annotations

from twinbench.tasks.task import Task

TASK = Task("lm", "next-token language modelling: windows of a text, a prediction at every token",
            data="twinbench.data.tasks:windows", check_data="twinbench.data.tasks:check_text", next_token=True,
            bytes_per_example=8)  # a window's start, kept a step (data.text.Windows)
