"""What the variable-length and input modifiers mean for a run: padding policy, compile shapes, prefetch.

``+pad-max`` / ``+bucket`` / ``+dynamic`` choose how classification batches are padded (``data/classify.py``);
JAX's jit needs nothing more (it compiles one program per distinct shape by itself). ``torch.compile`` is
told what to expect: ``dynamic=False`` for ``+bucket`` and ``+pad-max`` (one static graph per bucket),
its default ``dynamic=None`` for ``+dynamic`` (a second shape triggers a recompile with symbolic sizes),
``dynamic=True`` with ``+symbolic`` (symbolic sizes from the first call). ``+prefetch`` switches the input
pipeline to background workers and device prefetch (``data/pipeline.py``).
"""

from __future__ import annotations

from twinbench.data.classify import length_policy
from twinbench.spec import RunSpec
from twinbench.tasks import TASKS


def compile_dynamic(spec: RunSpec) -> bool | None:
    """The ``dynamic`` argument of ``torch.compile`` for this run."""
    if spec.strategy.mods.symbolic:
        return True
    if TASKS[spec.train.task].variable_length and length_policy(spec) in ("pad-max", "bucket"):
        return False
    return None


def prefetch(spec: RunSpec) -> bool:
    return spec.strategy.mods.prefetch
