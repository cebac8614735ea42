"""One description of a run, shared by both frameworks, in sections: model, train, strategy, host, launch, user
model, output (``config.py``, ``spec_sections.py``).

A :class:`RunSpec` is a frozen dataclass of frozen sections that round-trips through JSON (:meth:`RunSpec.to_dict`,
versioned), so the parent process can hand it to the worker subprocess that executes it; :meth:`RunSpec.from_dict`
also reads the flat form records of earlier versions hold. Presets are plain code; every field declared as a flag
can be overridden by a CLI flag named after it (``--d-model`` for ``d_model``): :data:`FLAGS` is read off the
sections' declarations. :func:`validate` turns impossible values into a :class:`SpecError` whose message names
the flag and the allowed values.

The sections are frozen standard-library dataclasses, not a validation library's models: ``config.py`` is the leaf
the models import (it may import nothing), a spec is hashable (``models.family.get`` keys the user's family by
it), every worker imports it before its framework, and the checks that matter cross sections and frameworks
(``validate``), beyond what a field's type can say.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import Field, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, get_type_hints

from twinbench import backends
from twinbench.config import (  # the leaf, re-exported
    FRAMEWORKS,
    MASK_IMPLS,
    MAX_LR,
    USER_FAMILY,
    Identity,
    ModelConfig,
    SpecError,
    TrainConfig,
    choices,
    doc,
    flag,
    identity,
    is_declared,
    is_flag,
    later,
    option,
)
from twinbench.models.family import FAMILIES as BUILT_IN
from twinbench.models.family import presets as _family_presets
from twinbench.models.options import ATTENTION_IMPLS
from twinbench.spec_sections import (
    NAME_PARTS,
    HostConfig,
    LaunchConfig,
    OutputConfig,
    StrategySpec,
    UserModel,
    split_name,
)
from twinbench.strategies.modifiers import LENGTH_POLICIES
from twinbench.tasks import TASKS, USER_TASK

__all__ = ["ATTENTION_IMPLS", "FRAMEWORKS", "MASK_IMPLS", "SpecError", "StrategySpec"]  # re-exported: read from here too

USER = USER_FAMILY  # the family of --model FILE.py:build (twinbench/byo); the models read it from config
FAMILIES = (*BUILT_IN, USER)  # the built-in families (models/) and the user's
#: the version of :meth:`RunSpec.to_dict`'s form: 2, in sections (a dict without ``version``: the flat form of 1)
SPEC_VERSION = 2


@dataclass(frozen=True)
class RunSpec:
    """Everything one measured run needs, in sections. One spec drives either framework."""

    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    strategy: StrategySpec = field(default_factory=StrategySpec)
    host: HostConfig = field(default_factory=HostConfig)
    launch: LaunchConfig = field(default_factory=LaunchConfig)
    user: UserModel = field(default_factory=UserModel)
    output: OutputConfig = field(default_factory=OutputConfig)
    framework: str = option("torch", "the framework the run trains in: torch or jax (--framework)", flag=False,
                            choices=FRAMEWORKS)
    preset: str = option("small", "the preset the model and training come from (--preset)", flag=False)
    repeat: int = option(0, "which repeat of its configuration this run is (compare --repeats, claims): 0-based",
                         flag=False, identity=Identity.REPEAT, later=True)
    no_preflight: bool = option(False, "do not estimate each run's memory before its timed steps (by default a run "
                                "that cannot fit in the free memory is skipped, with the estimate, instead of "
                                "failing late)", identity=Identity.NONE)

    @property
    def tokens_per_step(self) -> int:
        return self.train.batch * self.train.seq

    @classmethod
    def of(cls, **flat: Any) -> RunSpec:
        """The default spec with fields set by their flat names (``RunSpec.of(framework="jax", strategy="jit",
        devices=2)``): see :meth:`evolve`."""
        return cls().evolve(**flat)

    def evolve(self, **flat: Any) -> RunSpec:
        """This spec with fields set by their flat names, each routed to its section: ``strategy`` a full name
        (``"jit+remat"``) or a whole StrategySpec, ``model``, ``train`` (any section) whole, any other a field of a
        section (``devices``, ``compile_cache``) or of the spec itself. TypeError for a name no section has."""
        whole = [k for k, v in flat.items() if k in _TOP or (k in SECTIONS and not isinstance(v, str))]
        top = {k: flat.pop(k) for k in whole}
        spec = replace(self, **top)
        parts: dict[str, dict[str, Any]] = {}
        for name, value in flat.items():
            if name == "strategy":
                parts.setdefault("strategy", {}).update(zip(NAME_PARTS, split_name(value), strict=True))
            elif name in SECTION_OF:
                parts.setdefault(SECTION_OF[name], {})[name] = value
            else:
                raise TypeError(f"RunSpec has no field {name!r}")
        return replace(spec, **{sec: replace(getattr(spec, sec), **kw) for sec, kw in parts.items()})

    def to_dict(self) -> dict[str, Any]:
        """The spec in its sections, with its :data:`SPEC_VERSION` (what the worker and records read back)."""
        out: dict[str, Any] = {"version": SPEC_VERSION}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = _section_dict(value) if f.name in SECTIONS else value
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunSpec:
        """A spec from :meth:`to_dict`'s form, or from the flat form of earlier versions (a record's ``spec``:
        ``framework``, ``strategy`` as a full name, ``devices``... beside ``model`` and ``train``; fields missing
        from it take their defaults). TypeError for a field no section has."""
        d = dict(d)
        if "version" not in d:  # the flat form (version 1)
            model, train = d.pop("model", {}), d.pop("train", {})
            return cls(model=ModelConfig(**model), train=TrainConfig(**train)).evolve(**d)
        version = d.pop("version")
        if version != SPEC_VERSION:
            raise ValueError(f"spec version {version!r}: this twinbench reads versions 1 and {SPEC_VERSION}")
        sections = {name: SECTIONS[name](**d.pop(name)) for name in list(d) if name in SECTIONS}
        return cls(**sections, **d)

    def flat(self) -> dict[str, Any]:
        """The flat form of earlier versions (version 1): ``model`` and ``train`` as dicts, every other section's
        fields beside them, the strategy as its full name. Run ids are computed from it, so they never change."""
        out: dict[str, Any] = {"model": asdict(self.model), "train": asdict(self.train),
                               "framework": self.framework, "strategy": self.strategy.name}
        for name in SECTIONS:
            if name not in ("model", "train"):
                section = getattr(self, name)
                out |= {f.name: getattr(section, f.name) for f in _declared(section) if f.name not in NAME_PARTS}
        return out | {name: getattr(self, name) for name in _TOP}

    def run_id(self) -> str:
        """A stable key of the measured configuration (used by ``--resume``): the flat form's fields that identify
        a run (:class:`~twinbench.config.Identity`), a field declared ``later`` left out at its default."""
        blob = json.dumps(_identifying(self.flat()), sort_keys=True)
        return hashlib.sha1(blob.encode()).hexdigest()[:12]

    def config_id(self) -> str:
        """The run id of the configuration, whichever repeat this is: the repeats of one configuration share it."""
        return self.evolve(**{k: ID_FIELDS[k].default for k, kind in IDENTITY.items()
                              if kind is Identity.REPEAT}).run_id()

    def label(self) -> str:
        return f"{self.framework}/{self.strategy.name}"


def _declared(section: Any) -> list[Field[Any]]:
    """The fields of a section that are its data (a StrategySpec's parsed ``mods`` is not)."""
    return [f for f in fields(section) if f.init]


def _section_dict(section: Any) -> dict[str, Any]:
    out = {f.name: getattr(section, f.name) for f in _declared(section)}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}


#: the sections of a RunSpec by field name, each a frozen dataclass of declared fields
SECTIONS: dict[str, type] = {"model": ModelConfig, "train": TrainConfig, "strategy": StrategySpec,
                             "host": HostConfig, "launch": LaunchConfig, "user": UserModel, "output": OutputConfig}
#: the RunSpec's own fields that are not sections (framework, preset, repeat, no_preflight)
_TOP = tuple(f.name for f in fields(RunSpec) if f.name not in SECTIONS)
#: each section field's name -> its section (the names are unique across sections: they are the flags' names)
SECTION_OF: dict[str, str] = {f.name: sec for sec, cls in SECTIONS.items() for f in fields(cls)
                              if f.init and f.name not in NAME_PARTS}


def _field_table() -> dict[str, tuple[Field[Any], type]]:
    """Every declared field by its flat name, with its type: the sections' in their order, then the spec's own."""
    out: dict[str, tuple[Field[Any], type]] = {}
    for cls in (*SECTIONS.values(), RunSpec):
        hints = get_type_hints(cls)
        out |= {f.name: (f, hints[f.name]) for f in fields(cls) if is_declared(f)}
    return out


#: Every declared field (flat name -> (its dataclass field, its type)): its description, flag and choices.
FIELDS = _field_table()
#: Every declared field by its flat name as the flat form writes it (``strategy``: its base's declaration).
ID_FIELDS: dict[str, Field[Any]] = {("strategy" if name in NAME_PARTS else name): f for name, (f, _) in FIELDS.items()}
#: What each field of the flat form says of a run, read off its declaration: the run id, the records' labels
#: (``record_sections.NOT_LABELS``) and diff's matching (``diff.MATCH_FIELDS``) all read this.
IDENTITY: dict[str, Identity] = {name: identity(f) for name, f in ID_FIELDS.items()}


def _identifying(flat: dict[str, Any]) -> dict[str, Any]:
    """The fields of a flat spec that identify its run (model and train nested, as the flat form has them)."""
    out: dict[str, Any] = {}
    for name, value in flat.items():
        if name in SECTIONS and isinstance(value, dict):
            out[name] = _identifying(value)
            continue
        f = ID_FIELDS[name]
        if identity(f) is not Identity.NONE and not (later(f) and value == f.default):
            out[name] = value
    return out


#: Fields a user may override by a flag (``--d-model``), with the type of the flag: read off the declarations.
OVERRIDABLE: dict[str, type] = {name: typ for name, (f, typ) in FIELDS.items() if is_flag(f)}
#: The --help text of each flag: the field's description.
FLAG_HELP: dict[str, str] = {name: doc(FIELDS[name][0]) for name in OVERRIDABLE}
#: Every built-in family's presets (``Family.presets``), in registration order.
PRESETS: dict[str, tuple[ModelConfig, TrainConfig]] = _family_presets()


def option_value(name: str, text: str) -> Any:
    """The value of spec option ``name`` written as text (``NAME=VALUE`` of ``explain --try`` or of a benchmark
    side), by its type in :data:`OVERRIDABLE` (a bool: 1, true or yes). SpecError for an unknown option or a
    value that is not of its type."""
    if name not in OVERRIDABLE:
        raise SpecError(f"no spec option {name!r} (one of: {', '.join(sorted(OVERRIDABLE))})")
    typ = OVERRIDABLE[name]
    if typ is bool:
        return text.lower() in ("1", "true", "yes")
    try:
        return typ(text)
    except ValueError:
        raise SpecError(f"{name}={text!r} is not a {typ.__name__}") from None


def one_of(name: str, value: Any, allowed: tuple[str, ...] | list[str]) -> None:
    if value not in allowed:
        raise SpecError(f"{flag(name)}: unknown value {value!r}; allowed: {', '.join(allowed)}")


def from_preset(preset: str, overrides: dict[str, Any] | None = None, **top: Any) -> RunSpec:
    """The preset's spec with ``overrides`` (flag name -> value) and ``top`` (any field by its flat name:
    ``framework``, ``strategy``, ``trace_dir``...) applied. Not yet validated."""
    one_of("preset", preset, list(PRESETS))
    model, train = PRESETS[preset]
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    for key in given:
        if key not in OVERRIDABLE:
            raise SpecError(f"unknown option {flag(key)}; allowed: {', '.join(flag(k) for k in OVERRIDABLE)}")
    m_over = {k: v for k, v in given.items() if SECTION_OF.get(k) == "model"}
    t_over = {k: v for k, v in given.items() if SECTION_OF.get(k) == "train"}
    # A preset's seq follows its context unless the user sets it: `--context 64` alone stays valid.
    if "context" in m_over and "seq" not in t_over:
        given["seq"] = min(train.seq, m_over["context"])
    spec = RunSpec(model=model, train=train, preset=preset).evolve(**given, **top)
    if spec.train.init_from:  # the checkpoint decides the model's shape (models/hf.py reads it)
        spec = adopt_checkpoint(spec, m_over, t_over)
    return spec


def adopt_checkpoint(spec: RunSpec, model_overrides: dict[str, Any], train_overrides: dict[str, Any]) -> RunSpec:
    """``spec`` with the model shape of its ``init_from`` checkpoint (``spec.from_preset`` calls this).

    The checkpoint sets the fields it defines (family, layers, d_model, heads, d_ff, vocab, context, and
    num_labels for BERT); a flag that contradicts one is an error. ``seq`` follows the checkpoint's context
    and ``task`` its family unless the user set them.
    """
    from twinbench.models.hf import FLAG, checkpoint_fields, config_from_hf

    path = spec.train.init_from
    ckpt = checkpoint_fields(config_from_hf(path))
    for name, value in ckpt.items():  # the checkpoint's sizes, named as the checkpoint's, not as flags never given
        if isinstance(value, int) and not isinstance(value, bool) and (
                value < 0 or (value == 0 and name in ("layers", "d_model", "heads", "vocab", "context"))):
            raise SpecError(f"{FLAG} {path}: its config.json gives {name} {value}; a model's sizes are positive")
    spec = replace(spec, train=replace(spec.train, init_from=str(Path(path).resolve())))  # workers may run elsewhere
    for name, value in model_overrides.items():
        if name in ckpt and ckpt[name] != value:
            raise SpecError(f"{flag(name)} {value} contradicts {FLAG} {path} ({name} = {ckpt[name]} there); "
                            f"drop {flag(name)}")
    need = BUILT_IN[ckpt["family"]].min_vocab
    if ckpt["vocab"] < need:
        raise SpecError(f"{FLAG} {path}: vocab_size {ckpt['vocab']} cannot hold the {need} byte-level token ids of "
                        f"the training data; allowed: vocab_size >= {need}")
    train = spec.train
    if "seq" not in train_overrides:
        train = replace(train, seq=min(train.seq, ckpt["context"]))
    if "task" not in train_overrides and ckpt["family"] != spec.model.family:
        train = replace(train, task=BUILT_IN[ckpt["family"]].task)
    return replace(spec, model=replace(spec.model, **ckpt), train=train)


def check_choices(spec: RunSpec) -> None:
    """Every field declared with choices holds one of them (SpecError naming the flag otherwise)."""
    for name, (f, _) in FIELDS.items():
        if choices(f):
            section = spec if name in _TOP else getattr(spec, SECTION_OF[name])
            one_of(name, getattr(section, name), choices(f))


def validate(spec: RunSpec) -> RunSpec:
    """Raise :class:`SpecError` for impossible values; return the spec unchanged otherwise."""
    m, t, launch = spec.model, spec.train, spec.launch
    one_of("framework", spec.framework, FRAMEWORKS)
    one_of("family", m.family, FAMILIES)
    check_choices(spec)
    positive = {"layers": m.layers, "d_model": m.d_model, "heads": m.heads, "vocab": m.vocab,
                "context": m.context, "batch": t.batch, "seq": t.seq, "steps": t.steps,
                "devices": launch.devices}
    for name, value in positive.items():
        if not isinstance(value, int) or value <= 0:
            raise SpecError(f"{flag(name)} must be a positive integer, got {value!r}")
    for name, value in {"d_ff": m.d_ff, "warmup": t.warmup, "threads": spec.host.threads}.items():
        if value < 0:
            raise SpecError(f"{flag(name)} must be >= 0, got {value}")
    if not 0 < t.lr <= MAX_LR:  # NaN too; past fp32's largest, the optimizer's update is inf
        raise SpecError(f"--lr must be > 0 and at most fp32's largest number ({MAX_LR:.3g}), got {t.lr:g}")
    if not 0 <= t.weight_decay < math.inf:
        raise SpecError(f"--weight-decay must be a finite number >= 0, got {t.weight_decay}")
    if m.d_model % m.heads:
        raise SpecError(f"--heads {m.heads} does not divide --d-model {m.d_model}; "
                        f"allowed heads: {', '.join(str(h) for h in _divisors(m.d_model) if h <= 64)}")
    if t.seq > m.context:
        raise SpecError(f"--seq {t.seq} exceeds --context {m.context}; allowed: 1..{m.context}")
    if t.warmup >= t.steps:
        raise SpecError(f"--warmup {t.warmup} leaves no measured step of --steps {t.steps}; "
                        f"allowed: 0..{t.steps - 1}")
    if t.batch % launch.devices:
        raise SpecError(f"--batch {t.batch} is not divisible by --devices {launch.devices}")
    if launch.num_processes < 1 or launch.devices % launch.num_processes:
        raise SpecError(f"--num-processes {launch.num_processes} must be >= 1 and divide --devices "
                        f"{launch.devices} (--devices counts the devices of all processes)")
    if launch.process_id >= launch.num_processes:
        raise SpecError(f"--process-id {launch.process_id}; allowed: 0..{launch.num_processes - 1} (or -1: from "
                        "the environment)")
    _validate_strategy(spec)
    _validate_task(spec)
    return spec


def check_framework_options(spec: RunSpec) -> None:
    """Refuse (one line) an option the spec's framework does not read: the base spec is validated before its
    frameworks are chosen, so this runs on each (framework, strategy) spec."""
    st = spec.strategy
    if st.mlp_activation != "fused" and not backends.get(spec.framework).READS_XLA_FLAGS:
        raise SpecError(f"--mlp-activation {st.mlp_activation} is a choice of XLA's fusion in the JAX twins; the "
                        f"{spec.framework} twin does not run through XLA")
    if st.optimizer_state != "tree" and not backends.get(spec.framework).READS_XLA_FLAGS:
        raise SpecError(f"--optimizer-state {st.optimizer_state} is how the JAX side's Optax chain keeps its "
                        f"moments; the {spec.framework} side runs torch.optim")


def _validate_strategy(spec: RunSpec) -> None:
    m, t, st = spec.model, spec.train, spec.strategy
    if st.splash_layout != "auto" and st.attention_impl != "splash":
        raise SpecError(f"--splash-layout {st.splash_layout} is how the splash kernel reads q, k, v; it needs "
                        f"--attention-impl splash (this run has {st.attention_impl})")
    if st.attention_impl == "chunked" and m.family in BUILT_IN and not BUILT_IN[m.family].causal:
        raise SpecError(f"--attention-impl chunked: blocks of causal attention; the {m.family} twin takes default, "
                        "jax-nn or cudnn")
    runs = backends.get(spec.framework).attention_impl(st.attention_impl)  # torch's twins: SDPA's own
    if runs == "cudnn" and t.precision != "bf16":
        raise SpecError("--attention-impl cudnn: cuDNN's fused attention runs in bf16 or fp16 only; "
                        "add --precision bf16 (or +bf16)")
    if runs == "splash":
        if t.seq % 128:
            raise SpecError(f"--attention-impl splash: the TPU kernel works in blocks of 128 tokens; --seq {t.seq} "
                            "is not a multiple of 128")
        if m.mask_impl == "mul":
            raise SpecError("--attention-impl splash takes the padding mask as a mask, not an additive bias: "
                            "use --mask-impl where or cond")
    if st.scan_unroll < 1:
        raise SpecError(f"--scan-unroll must be a positive integer, got {st.scan_unroll}")
    if st.mods.remat and (refused := backends.get(spec.framework).remat_refusal(st.remat_policy)):
        raise SpecError(refused)
    if refused := st.mods.refusal(spec):  # a modifier's own check (strategies/modifiers.py)
        raise SpecError(refused)
    if st.scan_k < 0 or (st.scan_k and t.steps % st.scan_k):
        raise SpecError(f"--scan-k {st.scan_k} must divide --steps {t.steps}; allowed: "
                        f"{', '.join(str(k) for k in _divisors(t.steps) if k < t.steps)}, or 0 (automatic)")
    if t.precision != "bf16" and st.mods.bf16:
        raise SpecError(f"--precision {t.precision} contradicts strategy {st.name!r} "
                        "(+bf16 and --precision bf16 are one setting: see with_precision)")


def _validate_task(spec: RunSpec) -> None:
    m, t = spec.model, spec.train
    family = BUILT_IN.get(m.family)
    wanted = family.task if family else USER_TASK
    if t.task != wanted:
        raise SpecError(f"--task {t.task} does not fit the {m.family} family of --preset {spec.preset}; "
                        f"allowed: {wanted}")
    if not 0 <= t.slow_input < math.inf:  # NaN too
        raise SpecError(f"--slow-input must be a finite number >= 0 ms, got {t.slow_input}")
    if not (family and family.masked) and m.mask_impl != "where":
        raise SpecError(f"--mask-impl {m.mask_impl} applies to the BERT padding mask; the {m.family} family "
                        "has none; allowed: where")
    if family and (refused := TASKS[family.task].refusal(spec, family)):  # the task's own rules (tasks/)
        raise SpecError(refused)
    lengths = [x for x in spec.strategy.modifiers if x in LENGTH_POLICIES]  # raw names: two policies are an error
    if len(lengths) > 1:
        raise SpecError(f"--strategies: {spec.strategy.name!r} combines {', '.join('+' + x for x in lengths)}; "
                        f"choose one of {', '.join(LENGTH_POLICIES)}")
    if lengths and not TASKS[t.task].variable_length:
        raise SpecError(f"--strategies: +{lengths[0]} pads variable-length text, so it needs --task classify "
                        f"(the {t.task} task has fixed-length windows)")


def with_precision(spec: RunSpec) -> RunSpec:
    """The one rule tying ``--precision`` to the ``+bf16`` modifier: either one turns on the other.

    ``--precision bf16`` appends ``+bf16`` to the strategy name and ``compile+bf16`` sets precision bf16, so a
    record's ``precision`` and its ``strategy`` always say the same thing.
    """
    if spec.strategy.mods.bf16 and spec.train.precision != "bf16":
        return replace(spec, train=replace(spec.train, precision="bf16"))
    if spec.train.precision == "bf16" and not spec.strategy.mods.bf16:
        return spec.evolve(strategy=spec.strategy.name + "+bf16")
    return spec


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]
