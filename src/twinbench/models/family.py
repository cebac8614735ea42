"""Which twin a model family uses: ``gpt`` -> ``gpt_torch``/``gpt_jax``, ``bert`` -> ``bert_torch``/``bert_jax``.

Each twin module provides the model class, ``loss_fn(model, x, y)``, ``make_optimizer`` and ``decay_mask``
(torch also ``clip_grads``), so a strategy builds any family the same way. Imported lazily: a process only
loads the framework it runs.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

MODEL_CLASSES = {"gpt": "GPT", "bert": "BERT"}


def module(framework: str, family: str) -> ModuleType:
    """``twinbench.models.<family>_<framework>``."""
    return importlib.import_module(f"twinbench.models.{family}_{framework}")


def model_class(framework: str, family: str) -> Any:
    return getattr(module(framework, family), MODEL_CLASSES[family])
