"""Twin models, one folder per family (``gpt/``, ``bert/``, ...): ``model_torch.py`` and ``model_jax.py`` mirror
each other name for name, the folder's ``__init__.py`` holds its :class:`~twinbench.models.family.Family`.
Shared layers: ``layers_torch.py`` / ``layers_jax.py``; ``weights.py`` converts; ``hf.py`` reads and writes
Hugging Face checkpoints. The registry of families: one line per family below.
"""

from twinbench.models.family import FAMILIES, register

register("twinbench.models.gpt")
register("twinbench.models.bert")
register("twinbench.models.llama")

__all__ = ["FAMILIES", "register"]
