"""``classify``: sequence classification (BERT): labelled texts of varying length, padded by a length policy,
with held-out accuracy."""

from __future__ import annotations

from typing import Any

from twinbench.tasks.task import Task

#: the shortest sequence a classification batch is cut to (the embedded task's texts need room)
MIN_SEQ = 16


def _refusal(spec: Any, family: Any) -> str | None:
    m, t = spec.model, spec.train
    if not isinstance(m.num_labels, int) or m.num_labels < 2:
        return f"--num-labels must be an integer >= 2, got {m.num_labels!r}"
    if m.vocab < family.min_vocab:
        return f"--vocab {m.vocab} is too small for the byte tokenizer; allowed: >= {family.min_vocab}"
    if t.seq < MIN_SEQ:
        return f"--seq {t.seq} is too short for classification; allowed: {MIN_SEQ}..{m.context}"
    return None


TASK = Task("classify", "sequence classification: labelled texts of varying length, padded; held-out accuracy",
            data="twinbench.data.tasks:labelled", check_data="twinbench.data.tasks:check_jsonl",
            variable_length=True, bytes_per_example=8, check=_refusal)
