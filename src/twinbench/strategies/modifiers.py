"""Every strategy modifier, declared once, as one unit: its name, the frameworks and bases it applies to (and why
not where it does not), whether the model family must support it, whether it is data-side, the spec options it
owns (:class:`ModifierOptions`), what it does to the torch trainer's step and to the JAX step (``torch_step``,
``jax_step``: hooks the shared steps apply), and its time and memory terms (:class:`Costs`: the claims budget and
the preflight read them). A name's modifiers are parsed once into a typed value: ``compile+bf16+remat`` ->
``Modifiers(bf16=True, remat=True)``; code asks ``spec.strategy.mods.remat``, never a name in a string. The registry
(``strategies/registry.py``) reads :data:`DECLARED` to check a strategy name and a matrix cell. It imports only the
leaf ``config``, so ``spec.py`` and the measurements can use it. docs/extending.md has the recipe.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from twinbench.config import FRAMEWORKS, REMAT_POLICIES, option

BOTH = FRAMEWORKS
#: the bases that run a user's model under a mesh (strategies/registry.py): they take no modifier
USER_MESH = ("torchax-mesh-dp", "torchax-mesh-fsdp", "port-mesh-dp", "port-mesh-fsdp")
_MESH_WHY = "a user's model under a mesh takes no modifier (its step is the mesh's, unwrapped)"


@dataclass(frozen=True)
class Costs:
    """What a modifier does to a run's time and memory, for the estimates made before it runs: ``claims --plan``'s
    budget (claims/budget.py) and the preflight's advice and bounds (measure/memory.py). Factors on the base's."""

    flops: float = 1.0  # the step's model FLOPs
    compile: float = 1.0  # a jit step's cold compile
    programs: int = 1  # programs a short run compiles (a length policy: one per padded shape it meets)
    calibrated: bool = True  # the base's measured points (predict/calibration.jsonl) hold for it
    saves_memory: bool = False  # suggested to a run that does not fit (the preflight's advice)
    #: the share of a step's batch whose activations are alive at once (of the spec), None: all of it
    activations: Callable[[Any], float] | None = None


@dataclass(frozen=True)
class Modifier:
    """What one modifier is: the frameworks and bases it applies to (``bases`` None: every base of its frameworks;
    ``not_on``: a base it skips, with why; ``single_device``: why it skips the multi-device bases, '' if it does
    not), a one-line summary, whether the family must support it (``Family.supports``), whether it is data-side
    (padding, input pipeline: it leaves the step as the base builds it), the spec options it owns, its hooks on
    the shared steps and its costs."""

    name: str
    frameworks: tuple[str, ...]
    summary: str
    bases: tuple[str, ...] | None = None
    not_on: dict[str, str] = field(default_factory=dict)
    single_device: str = ""
    family_option: bool = False
    data: bool = False
    length: bool = False  # a padding policy of classify batches: at most one per name
    options: tuple[str, ...] = ()  # the fields of ModifierOptions it reads
    #: "module:function" (trainer, forward_backward) -> forward_backward: wraps the torch trainer's
    #: forward-and-backward half (strategies/torch_eager.py applies it, under every torch base)
    torch_step: str = ""
    #: "module:function" (spec, value_and_grad) -> value_and_grad: wraps the gradient of the JAX step
    #: (strategies/jax_jit.py's make_train_step applies it, under every base but naive)
    jax_step: str = ""
    #: a one-line refusal of a spec it cannot run (spec.validate calls it), else None
    check: Callable[[Any], str | None] | None = None
    costs: Costs = Costs()

    def reason(self, framework: str, base: str, multi_device: bool = False) -> str | None:
        """None if the modifier applies to ``framework``'s ``base``; else why not, in one line."""
        if framework not in self.frameworks:
            return f"+{self.name} is {'/'.join(self.frameworks)} only"
        if self.bases is not None and base not in self.bases:
            return f"+{self.name} applies to {', '.join(self.bases)} only"
        if multi_device and self.single_device:
            return self.single_device
        return self.not_on.get(base)


def hook(target: str) -> Callable[..., Any]:
    """A modifier's step hook, ``"module:function"``, imported when a trainer applies it (listing the modifiers, or
    the parent process of a compare, imports no framework)."""
    module, func = target.split(":")
    return getattr(importlib.import_module(module), func)


@dataclass(frozen=True)
class ModifierOptions:
    """The spec options a modifier owns (``StrategySpec`` inherits them): declared here, beside their modifier."""

    remat_policy: str = option("full", "override the preset's remat_policy: what +remat keeps (jax.checkpoint_"
                               "policies): full, dots-saveable or nothing-saveable", choices=REMAT_POLICIES)
    accum_steps: int = option(2, "override the preset's accum_steps: the microbatches +accum splits each step's "
                              "batch into (their gradients summed, one optimizer step)", later=True)


def _accum_refusal(spec: Any) -> str | None:
    """+accum's microbatches must split each device's batch evenly."""
    k, per_device = spec.strategy.accum_steps, spec.train.batch // spec.launch.devices
    if not isinstance(k, int) or k < 2 or per_device % k:
        return (f"--accum-steps {k}: +accum splits each device's batch of {per_device} into that many microbatches; "
                f"allowed: {', '.join(str(d) for d in range(2, per_device + 1) if per_device % d == 0) or 'none'}")
    return None


#: why a data-side modifier skips a base whose trainer takes the batches as they come
_NOT_WIRED = "torchax and port take no data-side modifier (none is wired to their steps)"
_NOT_WIRED_ALL = {**dict.fromkeys(("torchax", "port"), _NOT_WIRED), **dict.fromkeys(USER_MESH, _MESH_WHY)}


def _mod(frameworks: tuple[str, ...], summary: str, **what: Any) -> Any:
    """A flag of :class:`Modifiers` declared with its :class:`Modifier` facts (the name is the field's, dashed)."""
    return field(default=False, metadata={"modifier": (frameworks, summary, what)})


@dataclass(frozen=True)
class Modifiers:
    """Each modifier a name can carry, as a flag (``length``: the padding policy named, or None). The fields are
    the declaration: their metadata says where each applies (read into :data:`DECLARED`)."""

    bf16: bool = _mod(BOTH, "bf16 compute (torch.autocast / bf16 Linear+attention), fp32 master weights and "
                      "optimizer state; same as --precision bf16", family_option=True,
                      not_on={"port": "the user's port runs fp32 only: it has no bf16 form",
                              **dict.fromkeys(USER_MESH, _MESH_WHY)})
    #: remat recomputes the forward pass in the backward: about 4/3 of the step's FLOPs; its compile grows by the
    #: recomputation (stated); predict's measured points are of steps without it
    remat: bool = _mod(BOTH, "activation checkpointing per block (torch.utils.checkpoint, use_reentrant=False / "
                       "nnx.remat with --remat-policy: full, dots-saveable, nothing-saveable)", family_option=True,
                       options=("remat_policy",), not_on={"port": "the user's port runs as written: it has no remat form",
                                                          **dict.fromkeys(USER_MESH, _MESH_WHY)},
                       costs=Costs(flops=4 / 3, compile=1.1, calibrated=False, saves_memory=True))
    nodonate: bool = _mod(("jax",), "do not donate params and optimizer state to the step (shows what donation "
                          "buys)", bases=("jit", "scan-steps", "scan-layers", "torchax", "port"))
    fused_qkv: bool = _mod(("jax",), "the JAX twin's q, k, v as one full-width product laid out for the attention by "
                           "one transpose of the three (a layout choice; ModelOptions.fused_qkv)", bases=("jit",),
                           family_option=True)
    optc: bool = _mod(("torch",), "also torch.compile the optimizer half of the step (grad clipping + AdamW)",
                      bases=("compile", "compile-regional"))
    symbolic: bool = _mod(("torch",), "torch.compile(dynamic=True): symbolic shapes from the first call (use with "
                          "+dynamic)", bases=("compile",), data=True)
    prefetch: bool = _mod(BOTH, "input pipeline with background workers (DataLoader / Grain) and device prefetch "
                          "(pinned non_blocking copies / grain.experimental.device_put)", family_option=True,
                          data=True, single_device="+prefetch puts whole batches on one device; the multi-device "
                          "strategies place their own slices", not_on=dict.fromkeys(("torchax", "port"), _NOT_WIRED))
    replicate_batch: bool = _mod(("jax",), "anti-pattern (claim C10): the batch replicated on every device instead "
                                 "of split; flagged in the record's warnings", bases=("mesh-dp",))
    nosync: bool = _mod(("jax",), "anti-pattern (claim C13): no lax.pmean of the gradients, each device trains its "
                        "own model; flagged in the record's warnings", bases=("pmap",))
    fused_loss: bool = _mod(("jax",), "torchax: F.cross_entropy lowered as the JAX twins' loss (log-sum-exp and the "
                            "target's logit, fused reductions in fp32) instead of torchax's own log_softmax + "
                            "nll_loss (an fp32 copy of the logits)", bases=("torchax",))
    #: one optimizer step over microbatches (their activations alive one at a time); both shared steps wrap it
    accum: bool = _mod(BOTH, "gradient accumulation: each step's batch as --accum-steps microbatches, their "
                       "gradients averaged before the one clip and AdamW update (the same maths as the whole batch)",
                       options=("accum_steps",), torch_step="twinbench.strategies.accumulate:torch_step",
                       jax_step="twinbench.strategies.accumulate:jax_step", check=_accum_refusal,
                       single_device="+accum is parity-tested on one device only (the multi-device steps split the "
                       "batch first)", not_on=dict.fromkeys(USER_MESH, _MESH_WHY),
                       costs=Costs(calibrated=False, activations=lambda spec: 1 / spec.strategy.accum_steps))
    length: str | None = None

    @classmethod
    def parse(cls, names: tuple[str, ...] | list[str]) -> Modifiers:
        """The flags of ``names`` (``("bf16", "replicate-batch")``); names this value does not know, and a
        second length policy, are left to the registry and ``spec.validate`` to refuse with their reasons."""
        flags = {f.name for f in fields(cls)} - {"length"}
        known = {n.replace("-", "_") for n in names} & flags
        length = next((n for n in names if n in LENGTH_POLICIES), None)
        return cls(**{n: True for n in known}, length=length)

    @property
    def lengths(self) -> tuple[str, ...]:
        return (self.length,) if self.length else ()

    def declared(self) -> tuple[Modifier, ...]:
        """The declarations of the modifiers set (each :class:`Modifier`: its reach, hooks and costs)."""
        on = {f.name.replace("_", "-") for f in fields(self) if f.name != "length" and getattr(self, f.name)}
        return tuple(m for n, m in DECLARED.items() if n in on or n == self.length)

    def flops(self) -> float:
        """The factor the modifiers set put on a step's model FLOPs (:class:`Costs`)."""
        return math.prod(m.costs.flops for m in self.declared())

    def compile(self) -> float:
        """The factor they put on a jit step's cold compile."""
        return math.prod(m.costs.compile for m in self.declared())

    def programs(self) -> int:
        """The programs a short run of them compiles (a length policy's padded shapes), at least one."""
        return max((m.costs.programs for m in self.declared()), default=1)

    def calibrated(self) -> bool:
        """Whether the base's measured points hold for a run with them."""
        return all(m.costs.calibrated for m in self.declared())

    def activations(self, spec: Any) -> float:
        """The share of a step's batch whose activations are alive at once."""
        return math.prod(m.costs.activations(spec) for m in self.declared() if m.costs.activations)

    def torch_steps(self) -> tuple[str, ...]:
        """The hooks on the torch trainer's forward-and-backward, in declaration order."""
        return tuple(m.torch_step for m in self.declared() if m.torch_step)

    def jax_steps(self) -> tuple[str, ...]:
        """The hooks on the JAX step's gradient, in declaration order."""
        return tuple(m.jax_step for m in self.declared() if m.jax_step)

    def refusal(self, spec: Any) -> str | None:
        """The first one-line refusal of ``spec`` by a modifier set (their ``check``), else None."""
        return next((why for m in self.declared() if m.check and (why := m.check(spec))), None)


#: How classify batches are padded (at most one per name): the modifiers that are a length policy.
#: A short run's programs (stated): +dynamic one per new length it meets, +bucket one per bucket it meets.
_ONE_SHAPE = {"scan-steps": "scan-steps stacks K batches per call, which needs one shape (+pad-max)"}
_LENGTHS = (
    Modifier("pad-max", BOTH, "classify: pad every batch to --seq (the default): one shape, one compiled program",
             data=True, length=True, not_on=_NOT_WIRED_ALL),
    Modifier("bucket", BOTH, "classify: pad each batch to the smallest bucket (seq/8, seq/4, seq/2, seq) that fits: "
             "one program per bucket (torch.compile: dynamic=False)", data=True, length=True,
             not_on=_NOT_WIRED_ALL | _ONE_SHAPE, costs=Costs(programs=2)),
    Modifier("dynamic", BOTH, "classify: pad each batch only to its longest example: JAX compiles per new length; "
             "torch.compile default (dynamic=None: marks dynamic on recompile)", data=True, length=True,
             not_on=_NOT_WIRED_ALL | _ONE_SHAPE, costs=Costs(programs=8)),
)
LENGTH_POLICIES = tuple(m.name for m in _LENGTHS)


def _declared() -> dict[str, Modifier]:
    """The flags' modifiers, the length policies after the last one of the step's (``optc``)."""
    flags = []
    for f in fields(Modifiers):
        if "modifier" in f.metadata:
            frameworks, summary, what = f.metadata["modifier"]
            if set(frameworks) - set(FRAMEWORKS):  # a misspelled framework fails at import
                raise ValueError(f"modifier {f.name}: no framework {sorted(set(frameworks) - set(FRAMEWORKS))}")
            flags.append(Modifier(f.name.replace("_", "-"), frameworks, summary, **what))
    cut = [m.name for m in flags].index("optc") + 1
    return {m.name: m for m in (*flags[:cut], *_LENGTHS, *flags[cut:])}


#: Every modifier by its name in a strategy name (``fused-qkv``), in the order ``twinbench strategies`` lists them.
DECLARED: dict[str, Modifier] = _declared()
#: Modifiers that are data-side (padding policy, input pipeline): they do not touch the step.
DATA_MODIFIERS = tuple(n for n, m in DECLARED.items() if m.data)
