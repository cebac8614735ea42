"""The sections of a run spec besides the model's and the training's (``config.py``): the strategy (a base, its
modifiers parsed once, and the options they take), the host, the launch over devices and processes, the user's
own model, and the outputs. Each field is declared once with :func:`~twinbench.config.option`: its default, its
description (the ``--help`` of its flag), whether a flag sets it and the values it allows. ``spec.py`` assembles
them into a :class:`~twinbench.spec.RunSpec`, derives the CLI's flags from them and validates them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from twinbench.config import Identity, option
from twinbench.host_malloc import CHOICES as HOST_MALLOC_CHOICES
from twinbench.models.options import (
    ATTENTION_IMPLS,
    MLP_ACTIVATIONS,
    OPTIMIZER_STATES,
    SPLASH_LAYOUTS,
)
from twinbench.strategies.modifiers import ModifierOptions, Modifiers
from twinbench.xla_flags import CHOICES as XLA_CPU_FLAG_CHOICES

COMPILE_CACHE_STATES = ("cold", "warm")


@dataclass(frozen=True)
class StrategySpec(ModifierOptions):
    """How the step runs: a base strategy, its modifiers (``compile+bf16+remat``: base ``compile``, modifiers
    ``bf16``, ``remat``; their order kept as written) and the options of the bases and modifiers (a modifier's own
    are declared beside it, in strategies/modifiers.py's ModifierOptions). ``mods`` is the modifiers as one typed
    value, parsed once."""

    base: str = option("eager", "the base strategy (strategies/registry.py): eager, compile, jit, scan-steps, ...",
                       flag=False)
    modifiers: tuple[str, ...] = option((), "the modifiers of the base, as written after it (strategies/modifiers.py)",
                                        flag=False)
    scan_k: int = option(0, "override the preset's scan_k: training steps per call of scan-steps (0: chosen from "
                         "--steps, see strategies/jax_scan.py)")
    scan_unroll: int = option(1, "override the preset's scan_unroll: layers per loop trip of scan-layers' layer "
                              "scan (nnx.scan unroll)")
    attention_impl: str = option(
        "default", "JAX attention: 'default' (written out with einsums, fp32 softmax; keeps every layer's seq x seq "
        "probabilities), 'jax-nn' (jax.nn.dot_product_attention as JAX chooses), 'chunked' (GPT: blocks of queries "
        "rematerialised in the backward pass: no seq x seq probabilities kept), 'cudnn' (cuDNN fused attention; CUDA "
        "and bf16 only) or 'splash' (the Pallas TPU splash-attention kernel: fused, no seq x seq scores stored; TPU "
        "only, seq a multiple of 128); jax:torchax runs torch's SDPA as the JAX attention named (torchax's own "
        "lowering for 'default'); torch's SDPA picks its own (attention_kernel in the record says which ran)",
        choices=ATTENTION_IMPLS, later=True)
    splash_layout: str = option(
        "auto", "how the splash kernel reads q, k and v (the same maths): 'head-dim-minor' (the kernel's default), "
        "'seq-minor' (the sequence in the lanes: a projection written heads first then fills them, where a 64-wide "
        "head fills half), or 'auto': seq-minor where the twin's projections write q, k, v heads first (BERT), "
        "head-dim-minor elsewhere; with --attention-impl splash only", choices=SPLASH_LAYOUTS, later=True)
    mlp_activation: str = option(
        "fused", "JAX twins: how the MLP's activation reaches the products that read it (the same maths): 'fused' "
        "(XLA may recompute it inside them) or 'stored' (written once, read by the next product and the backward "
        "pass: one activation a layer more of memory)", choices=MLP_ACTIVATIONS, later=True)
    optimizer_state: str = option(
        "tree", "JAX twins: how AdamW's moments are kept (the same maths): 'tree' (an array per parameter, as optax "
        "does) or 'flat' (clipping and moments over one vector of all parameters, optax.flatten: the step takes and "
        "returns two arrays a parameter fewer)", choices=OPTIMIZER_STATES, later=True)
    mods: Modifiers = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "modifiers", tuple(self.modifiers))  # a JSON list read back: hashable again
        object.__setattr__(self, "mods", Modifiers.parse(self.modifiers))

    @classmethod
    def named(cls, name: str, **options: Any) -> StrategySpec:
        """The strategy of a full name: ``"compile+bf16+remat"`` -> base ``compile``, modifiers ``(bf16, remat)``."""
        return cls(**dict(zip(NAME_PARTS, split_name(name), strict=True)), **options)

    @property
    def name(self) -> str:
        """The full name, as the CLI, records and reports write it: ``compile+bf16+remat``."""
        return "+".join((self.base, *self.modifiers))

    def with_name(self, name: str) -> StrategySpec:
        """The same options under another full name (its base and modifiers)."""
        base, modifiers = split_name(name)
        return replace(self, base=base, modifiers=modifiers)  # its options kept, its modifiers parsed again


def split_name(full: str) -> tuple[str, tuple[str, ...]]:
    """``"compile+bf16+remat"`` -> ``("compile", ("bf16", "remat"))``: a strategy name's base and modifiers."""
    base, *mods = full.split("+")
    return base, tuple(mods)


#: the fields of StrategySpec that make its name (a flat spec writes them as one ``strategy`` string)
NAME_PARTS = ("base", "modifiers")


@dataclass(frozen=True)
class HostConfig:
    """The host a run executes on: its threads, allocator, XLA:CPU flags and compilation cache."""

    threads: int = option(0, "override the preset's threads: CPU threads of each run (0: all cores of the machine, "
                          "the same for both frameworks)", identity=Identity.CONDITION)
    xla_cpu_flags: str = option(
        "tuned", "JAX on CPU: 'tuned' adds twinbench's measured XLA flags (YNNPACK element-wise fusions off) to "
        "XLA_FLAGS, 'xla-default' keeps XLA's own; flags you set in XLA_FLAGS always win",
        choices=XLA_CPU_FLAG_CHOICES, identity=Identity.CONDITION)
    host_malloc: str = option(
        "tuned", "the host allocator of every run (both frameworks): 'tuned' sets twinbench's measured glibc malloc "
        "tunables in GLIBC_TUNABLES (huge pages, or on a CPU without them freed memory kept: XLA:CPU's per-step "
        "buffers are then not faulted in 4 KiB at a time every step), 'system' keeps glibc's own; tunables you set "
        "in GLIBC_TUNABLES always win", choices=HOST_MALLOC_CHOICES, identity=Identity.CONDITION)
    compile_cache: str = option("cold", "the compilation cache state the run measures: cold or warm (--cache)",
                                flag=False, choices=COMPILE_CACHE_STATES, identity=Identity.CONDITION)
    cache_dir: str = option("", "the compilation cache directory the worker uses (set by the runner; '': fresh)",
                            flag=False, identity=Identity.NONE)


@dataclass(frozen=True)
class LaunchConfig:
    """Where a run spans: its devices and, over many hosts, its processes (one twinbench per host; distributed/)."""

    devices: int = option(1, "override the preset's devices: the devices the run spans, over all its processes")
    num_processes: int = option(1, "override the preset's num_processes: hosts (processes) the run spans: "
                                "jax.distributed / torchrun --nnodes")
    process_id: int = option(-1, "override the preset's process_id: this host's index (-1: from JAX_PROCESS_ID, "
                             "NODE_RANK or the cluster)", identity=Identity.CONDITION)
    coordinator: str = option("", "override the preset's coordinator: HOST:PORT of process 0 (JAX's coordinator, "
                              "torchrun's master; '': from the environment or the cluster)", identity=Identity.CONDITION)


@dataclass(frozen=True)
class UserModel:
    """The user's own model (twinbench/byo): ``FILE.py:build`` paths (absolute) and the prepared folder."""

    user_model: str = option("", "the user's torch model, FILE.py:build (--model; family 'user')", flag=False)
    user_jax_model: str = option("", "the user's own JAX port of it, FILE.py:build (--jax-model; strategy jax/port)",
                                 flag=False)
    user_dir: str = option("", "initial weights and metadata written by the preparation process (set by compare)",
                           flag=False, identity=Identity.NONE)


@dataclass(frozen=True)
class OutputConfig:
    """What a run writes besides its record, after the measured steps (the measurement stays unaffected)."""

    trace_dir: str = option("", "profile a few steps after the measured ones into this directory ('': off; --trace)",
                            flag=False, identity=Identity.NONE)
    save_weights: str = option("", "write each run's trained canonical weights (safetensors) into this directory "
                               "(for twinbench export --from RESULTS)", identity=Identity.NONE)
    explain: bool = option(False, "after the measured steps (and the trace): time the step's phases "
                           "(twinbench/explain)", flag=False, identity=Identity.NONE)


def flat_spec(d: Any) -> dict[str, Any]:
    """The flat form (version 1) of a record's ``spec`` of any version: ``model`` and ``train`` as dicts, every
    other section's fields beside them, the strategy as its full name. Readers of a record's spec as plain data
    (report, diff, explain) read it through here, so records of earlier versions and new ones read alike. ``{}``
    for anything that is no spec dict."""
    if not isinstance(d, dict):
        return {}
    if "version" not in d:
        return d
    out: dict[str, Any] = {}
    for key, value in d.items():
        if key == "version":
            continue
        if key in ("model", "train") or not isinstance(value, dict):
            out[key] = value
            continue
        if key == "strategy":
            out["strategy"] = "+".join((str(value.get("base", "")), *map(str, value.get("modifiers") or ())))
        out |= {k: v for k, v in value.items() if k not in NAME_PARTS}
    return out
