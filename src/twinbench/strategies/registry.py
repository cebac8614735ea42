"""The one place strategies are registered: name -> framework, one-line description, builder.

Builders are named as ``"module:function"`` strings and imported only when a run needs them, so listing
strategies (or the parent process of a compare) never imports torch or jax.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from twinbench.spec import FRAMEWORKS, SpecError


@dataclass(frozen=True)
class Strategy:
    framework: str
    name: str
    summary: str
    builder: str  # "module:function" with signature (spec, canonical_weights) -> Trainer
    default: bool = True  # part of the representative set `twinbench compare` runs without --strategies

    def load(self) -> Callable:
        module, func = self.builder.split(":")
        return getattr(importlib.import_module(module), func)


REGISTRY: dict[tuple[str, str], Strategy] = {}


def register(framework: str, name: str, summary: str, builder: str, default: bool = True) -> None:
    REGISTRY[(framework, name)] = Strategy(framework, name, summary, builder, default)


register("torch", "eager", "PyTorch eager: forward, backward, clip, AdamW op by op; no compilation",
         "twinbench.strategies.torch_eager:build")
register("jax", "naive", "JAX naive port: only value_and_grad jitted, Optax update eager outside jit",
         "twinbench.strategies.jax_naive:build")
register("jax", "jit", "JAX whole step (loss, grad, clip, AdamW) in one jit, params+opt state donated",
         "twinbench.strategies.jax_jit:build")


def get(framework: str, name: str) -> Strategy:
    if (framework, name) not in REGISTRY:
        allowed = ", ".join(s for (f, s) in REGISTRY if f == framework)
        raise SpecError(f"--strategies: unknown {framework} strategy {name!r}; allowed: {allowed}")
    return REGISTRY[(framework, name)]


def select(frameworks: list[str], names: list[str] | None) -> list[Strategy]:
    """The strategies to run for a compare.

    ``names`` None: the default set of each framework; ``["all"]``: every registered one. A name may be
    qualified (``torch:eager``); an unqualified name runs in every listed framework that has it.
    """
    for fw in frameworks:
        if fw not in FRAMEWORKS:
            raise SpecError(f"--framework: unknown framework {fw!r}; allowed: {', '.join(FRAMEWORKS)}")
    if names is None or names == ["all"]:
        return [s for (f, _), s in REGISTRY.items() if f in frameworks and (names or s.default)]
    chosen: list[Strategy] = []
    for raw in names:
        fw_part, _, name = raw.rpartition(":")
        fws = [fw_part] if fw_part else [f for f in frameworks if (f, name) in REGISTRY]
        if not fws:
            allowed = ", ".join(sorted({n for (f, n) in REGISTRY if f in frameworks}))
            raise SpecError(f"--strategies: unknown strategy {raw!r}; allowed: {allowed}, all")
        chosen += [get(fw, name) for fw in fws]
    return list(dict.fromkeys(chosen))
