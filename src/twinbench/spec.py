"""One description of a run, shared by both frameworks: model, training, strategy, devices.

A :class:`RunSpec` is a frozen dataclass that round-trips through JSON, so the parent process can hand it
to the worker subprocess that executes it. Presets are plain code; every field can be overridden by a CLI
flag named after it (``--d-model`` for ``d_model``). :func:`validate` turns impossible values into a
:class:`SpecError` whose message names the flag and the allowed values.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from twinbench import backends
from twinbench.config import USER_FAMILY, ModelConfig, SpecError, TrainConfig, flag  # the leaf, re-exported
from twinbench.host_malloc import CHOICES as HOST_MALLOC_CHOICES
from twinbench.models.family import FAMILIES as BUILT_IN
from twinbench.models.family import presets as _family_presets
from twinbench.models.options import SPLASH_LAYOUTS
from twinbench.strategies.modifiers import LENGTH_POLICIES, Modifiers
from twinbench.xla_flags import CHOICES as XLA_CPU_FLAG_CHOICES

FRAMEWORKS = ("torch", "jax")
PRECISIONS = ("fp32", "bf16")
REMAT_POLICIES = ("full", "dots-saveable", "nothing-saveable")  # the names of models/options.py
ATTENTION_IMPLS = ("default", "chunked", "jax-nn", "cudnn", "splash")  # the names of models/options.py
USER = USER_FAMILY  # the family of --model FILE.py:build (twinbench/byo); the models read it from config
FAMILIES = (*BUILT_IN, USER)  # the built-in families (models/) and the user's
TASKS = ("lm", "classify", "custom")  # next-token LM | sequence classification | the user's model (custom)
MASK_IMPLS = ("where", "mul", "cond")  # how a masked family's attention applies its padding mask


@dataclass(frozen=True)
class RunSpec:
    """Everything one measured run needs. One spec drives either framework."""

    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    framework: str = "torch"
    strategy: str = "eager"
    preset: str = "small"
    devices: int = 1
    threads: int = 0  # 0: all cores of the machine, the same for both frameworks
    compile_cache: str = "cold"  # "cold" | "warm": the compilation cache state the run measures
    cache_dir: str = ""  # the compilation cache directory the worker uses (set by the runner; "" = fresh)
    scan_k: int = 0  # scan-steps: training steps per call (0: chosen from --steps, see strategies/jax_scan.py)
    remat_policy: str = "full"  # +remat: full | dots-saveable | nothing-saveable (jax.checkpoint_policies)
    scan_unroll: int = 1  # scan-layers: layers per loop trip of the layer scan (nnx.scan unroll)
    xla_cpu_flags: str = "tuned"  # JAX on CPU: twinbench's measured XLA flags, or "xla-default" (xla_flags.py)
    host_malloc: str = "tuned"  # glibc malloc: twinbench's measured GLIBC_TUNABLES, or "system" (host_malloc.py)
    attention_impl: str = "default"  # JAX attention: "default" (XLA) | "chunked" (memory) | "cudnn" (CUDA + bf16)
    splash_layout: str = "auto"  # how the splash kernel reads q, k, v (models/options.py: SPLASH_LAYOUTS)
    trace_dir: str = ""  # profile a few steps after the measured ones into this directory ("": off)
    save_weights: str = ""  # write the trained canonical weights (safetensors) into this directory ("": off)
    explain: bool = False  # after the measured steps (and the trace): phases by timing (twinbench/explain)
    # many hosts: `devices` counts all of them; one twinbench per host (see distributed/)
    num_processes: int = 1  # hosts (processes) the run spans: jax.distributed / torchrun --nnodes
    process_id: int = -1  # this host's index; -1: from JAX_PROCESS_ID / NODE_RANK / the cluster
    coordinator: str = ""  # HOST:PORT of process 0 (jax coordinator, torchrun master); "" = env / cluster
    # bring your own model (twinbench/byo): FILE.py:build (absolute path), its JAX port, the prepared dir
    user_model: str = ""  # --model: the user's torch model (family "user")
    user_jax_model: str = ""  # --jax-model: the user's own JAX port of it (strategy jax/port)
    user_dir: str = ""  # initial weights and metadata written by the preparation process (set by compare)
    repeat: int = 0  # which repeat of its configuration this run is (compare --repeats, claims): 0-based
    no_preflight: bool = False  # True: no memory preflight (measure/memory.py) before the timed steps

    @property
    def tokens_per_step(self) -> int:
        return self.train.batch * self.train.seq

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunSpec:
        d = dict(d)
        return cls(model=ModelConfig(**d.pop("model")), train=TrainConfig(**d.pop("train")), **d)

    def run_id(self) -> str:
        """A stable key of the measured configuration (used by ``--resume``)."""
        d = self.to_dict()
        d.pop("trace_dir", None)  # tracing runs after the measured steps: same measurement, same id
        d.pop("save_weights", None)  # so does saving the weights
        d.pop("explain", None)  # and explain's timing of the step's parts
        d.pop("cache_dir", None)  # where the compilation cache lives is not what is measured (its state is)
        d.pop("user_dir", None)  # likewise where the user model's initial weights were written
        for name, default in (("attention_impl", "default"), ("repeat", 0), ("splash_layout", "auto")):  # fields added later: records
            if d.get(name) == default:  # made before them keep their ids
                d.pop(name)
        d.pop("no_preflight", None)  # whether memory was estimated first does not change the measurement
        blob = json.dumps(d, sort_keys=True)
        return hashlib.sha1(blob.encode()).hexdigest()[:12]

    def config_id(self) -> str:
        """The run id of the configuration, whichever repeat this is: the repeats of one configuration share it."""
        return dataclasses.replace(self, repeat=0).run_id()

    @property
    def modifiers(self) -> tuple[str, ...]:
        """Modifiers of the strategy name: ``"compile+bf16+remat"`` -> ``("bf16", "remat")``."""
        return tuple(self.strategy.split("+")[1:])

    @property
    def mods(self) -> Modifiers:
        """The modifiers as one typed value (``spec.mods.remat``)."""
        return Modifiers.parse(self.modifiers)

    @property
    def base_strategy(self) -> str:
        return self.strategy.split("+")[0]

    def label(self) -> str:
        return f"{self.framework}/{self.strategy}"


#: Every built-in family's presets (``Family.presets``), in registration order.
PRESETS: dict[str, tuple[ModelConfig, TrainConfig]] = _family_presets()

#: Fields of ModelConfig/TrainConfig/RunSpec a user may override by a flag, with the type of the flag.
OVERRIDABLE: dict[str, type] = {
    "layers": int, "d_model": int, "heads": int, "d_ff": int, "vocab": int, "context": int,
    "batch": int, "seq": int, "steps": int, "warmup": int, "lr": float, "weight_decay": float,
    "seed": int, "precision": str, "data": str, "devices": int, "threads": int,
    "scan_k": int, "remat_policy": str, "scan_unroll": int, "xla_cpu_flags": str, "host_malloc": str,
    "attention_impl": str, "splash_layout": str,
    "init_from": str, "save_weights": str,
    "num_processes": int, "process_id": int, "coordinator": str,
    "task": str, "num_labels": int, "mask_impl": str, "slow_input": float,
    "no_preflight": bool,
}
#: --help text of flags that "override the preset's NAME" does not explain (used by the CLI).
FLAG_HELP: dict[str, str] = {
    "no_preflight": "do not estimate each run's memory before its timed steps (by default a run that cannot "
                    "fit in the free memory is skipped, with the estimate, instead of failing late)",
    "attention_impl": "JAX attention: 'default' (written out with einsums, fp32 softmax; keeps every layer's "
                      "seq x seq probabilities), 'jax-nn' (jax.nn.dot_product_attention as JAX chooses), 'chunked' "
                      "(GPT: blocks of queries rematerialised in the backward pass: no seq x seq probabilities "
                      "kept), 'cudnn' (cuDNN fused attention; CUDA and bf16 only) or 'splash' (the Pallas TPU splash-attention "
                      "kernel: fused, no seq x seq scores stored; TPU only, seq a multiple of 128); jax:torchax runs torch's SDPA "
                      "as the JAX attention named (torchax's own lowering for 'default'); torch's SDPA picks its own "
                      "(attention_kernel in the record says which ran)",
    "splash_layout": "how the splash kernel reads q, k and v (the same maths): 'head-dim-minor' (the kernel's "
                     "default), 'seq-minor' (the sequence in the lanes: a projection written heads first then "
                     "fills them, where a 64-wide head fills half), or 'auto': seq-minor where the twin's "
                     "projections write q, k, v heads first (BERT), head-dim-minor elsewhere; with "
                     "--attention-impl splash only",
    "xla_cpu_flags": "JAX on CPU: 'tuned' adds twinbench's measured XLA flags (YNNPACK element-wise fusions off) "
                     "to XLA_FLAGS, 'xla-default' keeps XLA's own; flags you set in XLA_FLAGS always win",
    "host_malloc": "the host allocator of every run (both frameworks): 'tuned' sets twinbench's measured glibc "
                   "malloc tunables in GLIBC_TUNABLES (huge pages, or on a CPU without them freed memory kept: "
                   "XLA:CPU's per-step buffers are then not faulted in 4 KiB at a time every step), 'system' keeps "
                   "glibc's own; tunables you set in GLIBC_TUNABLES always win",
    "init_from": "start from a local Hugging Face GPT-2/BERT checkpoint directory (config.json + "
                 "model.safetensors); its shape replaces the preset's",
    "save_weights": "write each run's trained canonical weights (safetensors) into this directory "
                    "(for twinbench export --from RESULTS)",
}


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


_MODEL_FIELDS = {f.name for f in fields(ModelConfig)}
_TRAIN_FIELDS = {f.name for f in fields(TrainConfig)}


def one_of(name: str, value: Any, allowed: tuple[str, ...] | list[str]) -> None:
    if value not in allowed:
        raise SpecError(f"{flag(name)}: unknown value {value!r}; allowed: {', '.join(allowed)}")


def from_preset(preset: str, overrides: dict[str, Any] | None = None, **top: Any) -> RunSpec:
    """The preset's spec with ``overrides`` (flag name -> value) applied. Not yet validated."""
    one_of("preset", preset, list(PRESETS))
    model, train = PRESETS[preset]
    m_over, t_over, s_over = {}, {}, {}
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key in _MODEL_FIELDS:
            m_over[key] = value
        elif key in _TRAIN_FIELDS:
            t_over[key] = value
        elif key in OVERRIDABLE:
            s_over[key] = value
        else:
            raise SpecError(f"unknown option {flag(key)}; allowed: {', '.join(flag(k) for k in OVERRIDABLE)}")
    # A preset's seq follows its context unless the user sets it: `--context 64` alone stays valid.
    if "context" in m_over and "seq" not in t_over:
        t_over["seq"] = min(train.seq, m_over["context"])
    spec = RunSpec(model=replace(model, **m_over), train=replace(train, **t_over), preset=preset,
                   **s_over, **top)
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


def validate(spec: RunSpec) -> RunSpec:
    """Raise :class:`SpecError` for impossible values; return the spec unchanged otherwise."""
    m, t = spec.model, spec.train
    one_of("framework", spec.framework, FRAMEWORKS)
    one_of("precision", t.precision, PRECISIONS)
    one_of("family", m.family, FAMILIES)
    positive = {"layers": m.layers, "d_model": m.d_model, "heads": m.heads, "vocab": m.vocab,
                "context": m.context, "batch": t.batch, "seq": t.seq, "steps": t.steps,
                "devices": spec.devices}
    for name, value in positive.items():
        if not isinstance(value, int) or value <= 0:
            raise SpecError(f"{flag(name)} must be a positive integer, got {value!r}")
    for name, value in {"d_ff": m.d_ff, "warmup": t.warmup, "threads": spec.threads}.items():
        if value < 0:
            raise SpecError(f"{flag(name)} must be >= 0, got {value}")
    if not 0 < t.lr < math.inf:  # NaN too
        raise SpecError(f"--lr must be > 0 and finite, got {t.lr}")
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
    if t.batch % spec.devices:
        raise SpecError(f"--batch {t.batch} is not divisible by --devices {spec.devices}")
    if spec.num_processes < 1 or spec.devices % spec.num_processes:
        raise SpecError(f"--num-processes {spec.num_processes} must be >= 1 and divide --devices {spec.devices} "
                        "(--devices counts the devices of all processes)")
    if spec.process_id >= spec.num_processes:
        raise SpecError(f"--process-id {spec.process_id}; allowed: 0..{spec.num_processes - 1} (or -1: from the environment)")
    one_of("compile_cache", spec.compile_cache, ("cold", "warm"))
    one_of("remat_policy", spec.remat_policy, REMAT_POLICIES)
    one_of("xla_cpu_flags", spec.xla_cpu_flags, XLA_CPU_FLAG_CHOICES)
    one_of("host_malloc", spec.host_malloc, HOST_MALLOC_CHOICES)
    one_of("attention_impl", spec.attention_impl, ATTENTION_IMPLS)
    one_of("splash_layout", spec.splash_layout, SPLASH_LAYOUTS)
    if spec.splash_layout != "auto" and spec.attention_impl != "splash":
        raise SpecError(f"--splash-layout {spec.splash_layout} is how the splash kernel reads q, k, v; it needs "
                        f"--attention-impl splash (this run has {spec.attention_impl})")
    if spec.attention_impl == "chunked" and m.family in BUILT_IN and not BUILT_IN[m.family].causal:
        raise SpecError(f"--attention-impl chunked: blocks of causal attention; the {m.family} twin takes default, "
                        "jax-nn or cudnn")
    runs = backends.get(spec.framework).attention_impl(spec.attention_impl)  # torch's twins: SDPA's own
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
    if spec.scan_unroll < 1:
        raise SpecError(f"--scan-unroll must be a positive integer, got {spec.scan_unroll}")
    if spec.mods.remat and (refused := backends.get(spec.framework).remat_refusal(spec.remat_policy)):
        raise SpecError(refused)
    if spec.scan_k < 0 or (spec.scan_k and t.steps % spec.scan_k):
        raise SpecError(f"--scan-k {spec.scan_k} must divide --steps {t.steps}; allowed: "
                        f"{', '.join(str(k) for k in _divisors(t.steps) if k < t.steps)}, or 0 (automatic)")
    if t.precision != "bf16" and spec.mods.bf16:
        raise SpecError(f"--precision {t.precision} contradicts strategy {spec.strategy!r} "
                        "(+bf16 and --precision bf16 are one setting: see with_precision)")
    _validate_task(spec)
    return spec


def _validate_task(spec: RunSpec) -> None:
    m, t = spec.model, spec.train
    one_of("task", t.task, TASKS)
    one_of("mask_impl", m.mask_impl, MASK_IMPLS)
    family = BUILT_IN.get(m.family)
    wanted = family.task if family else "custom"
    if t.task != wanted:
        raise SpecError(f"--task {t.task} does not fit the {m.family} family of --preset {spec.preset}; "
                        f"allowed: {wanted}")
    if not 0 <= t.slow_input < math.inf:  # NaN too
        raise SpecError(f"--slow-input must be a finite number >= 0 ms, got {t.slow_input}")
    if not (family and family.masked) and m.mask_impl != "where":
        raise SpecError(f"--mask-impl {m.mask_impl} applies to the BERT padding mask; the {m.family} family "
                        "has none; allowed: where")
    if family and family.task == "classify":
        if not isinstance(m.num_labels, int) or m.num_labels < 2:
            raise SpecError(f"--num-labels must be an integer >= 2, got {m.num_labels!r}")
        if m.vocab < family.min_vocab:
            raise SpecError(f"--vocab {m.vocab} is too small for the byte tokenizer; allowed: >= {family.min_vocab}")
        if t.seq < 16:
            raise SpecError(f"--seq {t.seq} is too short for classification; allowed: 16..{m.context}")
    lengths = [x for x in spec.modifiers if x in LENGTH_POLICIES]  # raw names: two policies are an error
    if len(lengths) > 1:
        raise SpecError(f"--strategies: {spec.strategy!r} combines {', '.join('+' + x for x in lengths)}; "
                        f"choose one of {', '.join(LENGTH_POLICIES)}")
    if lengths and t.task != "classify":
        raise SpecError(f"--strategies: +{lengths[0]} pads variable-length text, so it needs --task classify "
                        f"(the {t.task} task has fixed-length windows)")


def with_precision(spec: RunSpec) -> RunSpec:
    """The one rule tying ``--precision`` to the ``+bf16`` modifier: either one turns on the other.

    ``--precision bf16`` appends ``+bf16`` to the strategy name and ``compile+bf16`` sets precision bf16, so a
    record's ``precision`` and its ``strategy`` always say the same thing.
    """
    if spec.mods.bf16 and spec.train.precision != "bf16":
        return replace(spec, train=replace(spec.train, precision="bf16"))
    if spec.train.precision == "bf16" and not spec.mods.bf16:
        return replace(spec, strategy=spec.strategy + "+bf16")
    return spec


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]
