"""The one place strategies are registered: name -> framework, one-line description, builder.

A strategy name is a base strategy optionally followed by modifiers joined with ``+``, the one naming
scheme used everywhere (CLI, records, reports): ``compile+bf16+remat``, ``jit+nodonate``. Bases build a
trainer; modifiers are declared in ``strategies/modifiers.py`` with the frameworks (and bases) they apply to, and
the builders read them from ``spec.strategy.mods``.

Builders are named as ``"module:function"`` strings and imported only when a run needs them, so listing
strategies (or the parent process of a compare) never imports torch or jax.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twinbench import backends
from twinbench.models import family as model_family
from twinbench.spec import FRAMEWORKS, USER, RunSpec, SpecError
from twinbench.spec_sections import split_name
from twinbench.strategies.modifiers import DECLARED, LENGTH_POLICIES, Modifier
from twinbench.tasks import TASKS


@dataclass(frozen=True)
class Strategy:
    framework: str
    name: str
    summary: str
    builder: str  # "module:function" with signature (spec, canonical_weights) -> Trainer
    default: bool = True  # part of the representative set `twinbench compare` runs without --strategies
    multi_device: bool = False  # runs on --devices N > 1 (data parallel / FSDP); others use one device
    launcher: str = ""  # "torchrun": the runner starts the worker through torchrun, one process per device
    families: tuple[str, ...] | None = None  # the model families it builds; None: every family
    needs: tuple[str, ...] = ()  # the family options (Family.supports) it needs besides the frameworks' own
    shared_step: bool = True  # runs the shared step (torch_eager's / jax_jit's), so modifiers' step hooks apply

    def load(self) -> Callable:
        module, func = self.builder.split(":")
        return getattr(importlib.import_module(module), func)


REGISTRY: dict[tuple[str, str], Strategy] = {}
#: every modifier, declared in strategies/modifiers.py (frameworks, bases, summary, family option, data-side)
MODIFIERS: dict[str, Modifier] = DECLARED
#: Full names (base+modifiers) that `compare` runs by default in addition to the default bases.
DEFAULT_COMBOS: list[tuple[str, str]] = []


def register(framework: str, name: str, summary: str, builder: str, default: bool = True,
             multi_device: bool = False, launcher: str = "", families: tuple[str, ...] | None = None,
             needs: tuple[str, ...] = (), shared_step: bool = True) -> None:
    if framework not in FRAMEWORKS:  # a misspelled framework fails at import
        raise ValueError(f"strategy {name!r}: no framework {framework!r}; allowed: {', '.join(FRAMEWORKS)}")
    REGISTRY[(framework, name)] = Strategy(framework, name, summary, builder, default, multi_device, launcher,
                                           families, needs, shared_step)


register("torch", "eager", "PyTorch eager: forward, backward, clip, AdamW op by op; no compilation",
         "twinbench.strategies.torch_eager:build")
register("jax", "naive", "JAX naive port: only value_and_grad jitted, Optax update eager outside jit",
         "twinbench.strategies.jax_naive:build", shared_step=False)
register("jax", "jit", "JAX whole step (loss, grad, clip, AdamW) in one jit, params+opt state donated",
         "twinbench.strategies.jax_jit:build")

# Execution strategies: how each framework is driven. See `twinbench strategies`.
register("torch", "compile", "torch.compile of model+loss as one graph (Inductor, fwd+bwd); optimizer eager "
         "unless +optc", "twinbench.strategies.torch_compile:build", default=False)
register("torch", "compile-regional", "each Transformer block compiled once (block.compile()) and reused for "
         "every layer; rest eager", "twinbench.strategies.torch_compile:build_regional", needs=("compile-regional",))
register("jax", "scan-steps", "K whole jitted steps per call (lax.scan over K stacked batches; --scan-k); "
         "step time = call time / K", "twinbench.strategies.jax_scan:build", default=False)
register("jax", "scan-layers", "jit step over a model whose blocks are stacked (nnx.vmap) and applied with "
         "nnx.scan: one block compiled (--scan-unroll)", "twinbench.strategies.jax_jit:build", default=False,
         needs=("scan-layers",))
def for_family(family: Any, chosen: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The default (or ``all``) selection for a preset of ``family``: every chosen cell the family can run plus
    the cells it adds itself (``Family.default_cells``, e.g. BERT's variable-length cases)."""
    fws = {f for f, _ in chosen}
    keep = [(f, n) for f, n in chosen if cell_reason(family, f, n) is None]
    return list(dict.fromkeys(keep + [(f, n) for f, n in family.default_cells if f in fws]))
#: Modifier combinations `--strategies all` runs besides every base (one representative use of each modifier).
ALL_COMBOS: list[tuple[str, str]] = [
    ("torch", "eager+bf16"), ("torch", "eager+remat"), ("torch", "compile+optc"), ("torch", "compile+bf16"),
    ("jax", "jit+bf16"), ("jax", "jit+remat"), ("jax", "jit+nodonate"), ("jax", "scan-layers+remat"),
]

# Many devices: parallelism applied from outside the model; not in the default single-device set.
register("jax", "mesh-dp", "JAX data parallel: jit + NamedSharding, batch split over the 'data' mesh axis, "
         "params replicated", "twinbench.strategies.jax_mesh:build_dp", default=False, multi_device=True)
register("jax", "mesh-fsdp", "JAX FSDP (ZeRO-3): params, optimizer state and batch sharded over the 'data' axis",
         "twinbench.strategies.jax_mesh:build_fsdp", default=False, multi_device=True)
register("jax", "pmap", "JAX legacy data parallel: pmap with lax.pmean of the gradients",
         "twinbench.strategies.jax_pmap:build", default=False, multi_device=True)
register("torch", "ddp", "PyTorch DistributedDataParallel, one process per device via torchrun",
         "twinbench.strategies.torch_ddp:build", default=False, multi_device=True, launcher="torchrun")
register("torch", "fsdp", "PyTorch FSDP2 (fully_shard per block), one process per device via torchrun",
         "twinbench.strategies.torch_fsdp:build", default=False, multi_device=True, launcher="torchrun")

# PyTorch code compiled by XLA: a family's torch module (a twin's model_torch.py, or the user's --model) run by
# torchax inside the twins' JAX step (strategies/torchax_step.py). A JAX run: JAX's device, peak, memory, profiler.
register("jax", "torchax", "the family's PyTorch module (twin or --model) run by torchax: forward, backward and "
         "Optax AdamW in one jit, params+opt state donated", "twinbench.strategies.torchax_step:build",
         default=False)
#: bases whose step runs the family's torch module, not an NNX twin (so they need no "jax-twin")
TORCH_MODULE = ("torchax",)

# Bring your own model (`compare --model FILE.py:build`, see twinbench/byo): the user's module is one more family
# (byo/family.py), so every torch base above builds it through the same trainers as the twins; its JAX side has
# no NNX twin, so it runs torchax (above), the twins' mesh steps over the torch module, or the user's port.
register("jax", "port", "the user's own JAX port (--jax-model), parity-checked against the torch module: one "
         "jit step, value_and_grad + Optax AdamW, donated", "twinbench.strategies.jax_user:build_port",
         default=False, families=(USER,))
for _name, _what in (("torchax-mesh-dp", "the user's torch module via torchax"),
                     ("port-mesh-dp", "the user's own JAX port (--jax-model)")):
    register("jax", _name, f"{_what} under mesh-dp: jit + NamedSharding, batch split over the 'data' axis, "
             "params replicated", "twinbench.strategies.jax_user:build_mesh", default=False, multi_device=True,
             families=(USER,))
    register("jax", _name.replace("-dp", "-fsdp"), f"{_what} under mesh-fsdp: params, optimizer state and batch "
             "sharded over the 'data' axis (the twins' rule)", "twinbench.strategies.jax_user:build_mesh",
             default=False, multi_device=True, families=(USER,))
#: Bases only a user model runs (a twin has no torch module for torchax, nor a port).
USER_ONLY = tuple(n for (_, n), s in REGISTRY.items() if s.families == (USER,))


def builder(spec: RunSpec) -> Callable:
    """The trainer builder of ``spec``'s strategy (the same for a twin and a user's model)."""
    return get(spec.framework, spec.strategy.name).load()


def get(framework: str, full: str) -> Strategy:
    """The base strategy of ``full`` for ``framework``; its modifiers are checked to apply."""
    name, mods = split_name(full)
    if (framework, name) not in REGISTRY:
        allowed = ", ".join(s for (f, s) in REGISTRY if f == framework)
        raise SpecError(f"--strategies: unknown {framework} strategy {name!r}; allowed: {allowed}")
    strategy = REGISTRY[(framework, name)]
    for mod in mods:
        m = MODIFIERS.get(mod)
        if m is None or modifier_reason(m, strategy) is not None:
            fits = [k for k, v in MODIFIERS.items() if modifier_reason(v, strategy) is None]
            why = f" ({modifier_reason(m, strategy)})" if m is not None else ""
            raise SpecError(f"--strategies: modifier {mod!r} does not apply to {framework} {name!r}{why}; "
                            f"allowed: {', '.join(fits) or 'none'}")
    if len(set(mods)) != len(mods):
        raise SpecError(f"--strategies: modifier repeated in {full!r}")
    return REGISTRY[(framework, name)]


def select(frameworks: list[str], names: list[str] | None) -> list[tuple[str, str]]:
    """The (framework, full strategy name) pairs to run for a compare.

    ``names`` None: the default set of each framework; ``["all"]``: every registered base. A name may be
    qualified (``torch:eager``); an unqualified name runs in every listed framework that has its base.
    """
    for fw in frameworks:
        if fw not in FRAMEWORKS:
            raise SpecError(f"--framework: unknown framework {fw!r}; allowed: {', '.join(FRAMEWORKS)}")
    if names is None or names == ["all"]:
        pairs = [(f, n) for (f, n), s in REGISTRY.items() if f in frameworks and (names or s.default)
                 and n not in USER_ONLY]
        combos = DEFAULT_COMBOS if names is None else ALL_COMBOS
        return pairs + [(f, n) for f, n in combos if f in frameworks]
    chosen: list[tuple[str, str]] = []
    for raw in names:
        fw_part, _, full = raw.rpartition(":")
        base = split_name(full)[0]
        if base in USER_ONLY:
            raise SpecError(f"--strategies: {raw!r} runs a user's own model: give --model FILE.py:build")
        fws = [fw_part] if fw_part else [f for f in frameworks if (f, base) in REGISTRY]
        if not fws:
            allowed = ", ".join(sorted({n for (f, n) in REGISTRY if f in frameworks}))
            raise SpecError(f"--strategies: unknown strategy {raw!r}; allowed: {allowed}, all")
        for fw in fws:
            get(fw, full)
            chosen.append((fw, full))
    return list(dict.fromkeys(chosen))


def check_devices(spec: RunSpec) -> None:
    """A single-device strategy asked to run on several devices is a user error, not a silent 1-device run;
    so is a cell of the matrix that cannot exist (one line, with the reason)."""
    strategy = get(spec.framework, spec.strategy.name)
    if spec.launch.devices > 1 and not strategy.multi_device:
        many = ", ".join(n for (f, n), s in REGISTRY.items() if f == spec.framework and s.multi_device)
        raise SpecError(f"--devices {spec.launch.devices}: {spec.framework} strategy {spec.strategy.base!r} runs on one "
                        f"device; allowed with --devices > 1: {many}")
    reason = cell_reason(model_family.get(spec), spec.framework, spec.strategy.name)
    if reason:
        raise SpecError(f"--strategies: {spec.framework}:{spec.strategy.name} with the {spec.model.family} family: {reason}")


# ------------------------------------------------------------------------------------------ the matrix


def modifier_reason(m: Modifier, strategy: Strategy) -> str | None:
    """None if the modifier ``m`` applies to ``strategy`` (its own declaration decides); else why not."""
    why = m.reason(strategy.framework, strategy.name, strategy.multi_device)
    if why is None and (m.torch_step or m.jax_step) and not strategy.shared_step:
        why = f"+{m.name} wraps the shared step, which {strategy.name} does not run"
    return why


def _options_needed(framework: str, base: str, mods: tuple[str, ...]) -> list[str]:
    """The family options (``Family.supports``) a cell needs."""
    strategy = REGISTRY[(framework, base)]
    twin = backends.get(framework).TWIN_OPTION  # "jax-twin": a JAX strategy builds the family's NNX twin
    need = [twin] if twin and strategy.families is None and base not in TORCH_MODULE else []
    need += [name for name, m in MODIFIERS.items() if m.family_option and name in mods]
    need += strategy.needs
    if strategy.multi_device:
        need.append("multi-device")
    return need


def cell_reason(family: Any, framework: str, full: str) -> str | None:
    """None if ``framework:full`` can run the family ``family`` (a :class:`~twinbench.models.family.Family`);
    else the one-line reason it cannot exist."""
    base, mods = split_name(full)
    if (framework, base) not in REGISTRY:
        return f"{framework} has no strategy {base!r}"
    only = REGISTRY[(framework, base)].families
    if only is not None and family.name not in only:
        return f"{base} builds the {'/'.join(only)} family only"
    for mod in mods:
        m = MODIFIERS.get(mod)
        if m is None:
            return f"no modifier {mod!r}"
        if (why := modifier_reason(m, REGISTRY[(framework, base)])) is not None:
            return why
    for option in _options_needed(framework, base, mods):
        why = family.reason(option)
        if why:
            return why
    lengths = [m for m in mods if m in LENGTH_POLICIES]
    if lengths and not TASKS[family.task].variable_length:
        return f"+{lengths[0]} pads variable-length text; the {family.task} task has fixed-length windows"
    return None


@dataclass(frozen=True)
class Cell:
    family: str
    framework: str
    strategy: str  # the base
    modifier: str  # "" for the plain base
    reason: str | None  # None: ok

    @property
    def full(self) -> str:
        return self.strategy + (f"+{self.modifier}" if self.modifier else "")


def matrix(families: list[Any] | None = None) -> list[Cell]:
    """Every (family, framework, strategy, modifier) cell: ok (reason None) or why it cannot exist."""
    if families is None:
        families = list(model_family.FAMILIES.values())
    cells = []
    for fam in families:
        for (fw, base) in REGISTRY:
            for mod in ("", *MODIFIERS):
                full = base + (f"+{mod}" if mod else "")
                cells.append(Cell(fam.name, fw, base, mod, cell_reason(fam, fw, full)))
    return cells
