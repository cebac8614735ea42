"""Where a run's memory goes, and whether a run fits before it spends minutes compiling and stepping.

A breakdown splits the measured peak (the accelerator allocator's peak, or the process's peak RSS on CPU)
into parts both frameworks share:

- ``runtime``: what the process held once the trainer was built, less its parameters and optimizer state
  (Python, the framework's libraries, host copies of the initial weights); CPU only, where the peak is the
  whole process's RSS.
- ``params``, ``optimizer_state``: the bytes of the live arrays/tensors.
- ``gradients``: JAX: one gradient per parameter (alive together at the end of the backward pass); torch:
  the gradients alive at the peak of one profiled step (torch's memory profiler, ``profile_memory=True``).
- ``activations``: what the forward pass keeps for the backward pass. JAX: the residuals of the loss's VJP
  (``saved_residuals``, grouped by the source line that made them); torch: what autograd keeps at the peak
  of the profiled step, listed by module from the tensors autograd saves in that step
  (``torch.autograd.graph.saved_tensors_hooks``).
- ``temporaries``: JAX: the compiled step's temp buffer (``memory_analysis().temp_size_in_bytes``) less the
  gradients and activations that live in it; torch: what torch's memory profiler counts as temporary (or
  cannot place) at the peak of one profiled step.
- ``inputs``: the batch.

What the parts do not explain of the peak is ``unaccounted`` (host copies of the initial weights, allocator
slack, the framework's caches); ``accounted`` says which share of the peak the parts explain.

This module is how memory is accounted and reported: the parts, the record's peak, the one-line summary and
the preflight's verdict with its advice. What it is measured from (RSS, array bytes, ``memory_analysis()``,
VJP residuals, torch's memory profiler) is ``memory_readings.py``, whose names are importable from here too.
Neither module imports the models: they read arrays, compiled programs and trainers they are given.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import msgspec

from twinbench import backends
from twinbench.config import USER_FAMILY
from twinbench.measure import platforms
from twinbench.measure.memory_readings import (  # what is measured; re-exported: callers import them from here
    TORCH_CATEGORIES,
    batch_bytes,
    compiled_sizes,
    host_available_bytes,
    jax_available,
    jax_compiled_sizes,
    jax_residuals,
    jax_run_sizes,
    jax_sizes,
    jax_step_estimate,
    nbytes,
    resident_bytes,
    rss_bytes,
    runtime_bytes,
    torch_profiled_step,
    torch_saved_activations,
    torch_step_at_peak,
)
from twinbench.strategies.base import JaxStepTrainer, TorchModuleTrainer, lacks
from twinbench.strategies.modifiers import DECLARED as MODIFIERS

__all__ = [
    "EXACT_ABOVE", "PARTS", "PREFLIGHT_MARGIN", "PROGRAM_PEAK", "TOP", "TORCH_CATEGORIES", "USER_BOUND_FACTOR",
    "Breakdown", "DevicePeak", "Folded", "Preflight", "PreflightCompile", "advice", "batch_bytes", "breakdown", "compile_refusal", "compiled_sizes",
    "device_peak", "fits", "fitting_batch", "host_available_bytes", "jax_available", "jax_breakdown",
    "jax_compiled_sizes", "jax_refusal", "jax_residuals", "jax_run_sizes", "jax_sizes", "jax_step_estimate",
    "jax_upper_bound", "nbytes", "preflight", "record_peak", "resident_bytes", "rss_bytes", "runtime_bytes",
    "skip_reason", "summary", "torch_breakdown", "torch_estimate", "torch_profiled_step", "torch_saved_activations",
    "torch_step_at_peak",
]

PARTS = ("runtime", "params", "optimizer_state", "gradients", "activations", "temporaries", "inputs")
#: how many of the largest activation groups a breakdown lists
TOP = 8
#: a preflight estimate is compared against the free memory less this margin (fragmentation, late caches)
PREFLIGHT_MARGIN = 0.9
#: a JAX twin is compiled for its preflight only when its upper bound from the shapes is above this share
#: of the available memory (below it, the bound alone says it fits)
EXACT_ABOVE = 0.25
GiB = 2**30


@dataclass
class Breakdown:
    peak_bytes: int
    peak_source: str
    method: str
    parts: dict[str, int] = field(default_factory=dict)
    #: the largest groups of activations kept for the backward pass: [where, bytes]
    activations_by_source: list[tuple[str, int]] = field(default_factory=list)
    #: JAX: the compiled step's memory_analysis() sizes (argument, output, alias, temp)
    compiled: dict[str, int] = field(default_factory=dict)
    #: JAX: both figures :func:`device_peak` chose from (None: not a JAX run, or no compiled sizes)
    allocator_peak_bytes: int | None = None
    program_peak_bytes: int | None = None

    @property
    def unaccounted_bytes(self) -> int:
        return self.peak_bytes - sum(self.parts.values())

    def to_dict(self) -> dict[str, Any]:
        """The record's ``memory_breakdown`` (its JSON form: read back by explain and the report as a dict)."""
        d = asdict(self)
        if self.allocator_peak_bytes is None and self.program_peak_bytes is None:  # a torch run records neither
            del d["allocator_peak_bytes"], d["program_peak_bytes"]
        d["unaccounted_bytes"] = self.unaccounted_bytes
        d["accounted"] = round(sum(self.parts.values()) / self.peak_bytes, 4) if self.peak_bytes else None
        return d


def fits(estimate: int, available: int, margin: float = PREFLIGHT_MARGIN) -> bool:
    """The preflight's decision: the estimate must fit in ``margin`` of the available memory."""
    return estimate <= margin * available


def skip_reason(estimate: int, available: int, where: str, how: str, advice: list[str] | None = None) -> str:
    """The one line a skipped record carries: what the run needs, what there is, and what to try."""
    would = f"; to fit, try: {', '.join(advice)}" if advice else ""
    return (f"preflight: needs ~{estimate / GiB:.1f} GiB ({how}), {where} has {available / GiB:.1f} GiB "
            f"available{would}; --no-preflight runs it anyway")


def fitting_batch(batch: int, need: int, fixed: int, available: int, margin: float = PREFLIGHT_MARGIN) -> int:
    """The largest batch whose step would fit, if what the step needs beyond ``fixed`` (the parameters and
    optimizer state, which do not grow with the batch) grows in proportion to the batch; 0 when none would."""
    per_sample = max(need - fixed, 1) / max(batch, 1)
    return max(int((margin * available - fixed) // per_sample), 0)


def advice(spec: Any, need: int, fixed: int, available: int, platform: str) -> list[str]:
    """What would make a run that does not fit fit, most effective first: recomputing activations (+remat),
    a fused attention that keeps no seq x seq probabilities (the platform's: splash on a TPU, cuDNN on a GPU,
    blocks of queries elsewhere), a smaller batch."""
    out = [f"+{m.name} ({spec.framework}/{spec.strategy.name}+{m.name})" for m in MODIFIERS.values()
           if m.costs.saves_memory and m not in spec.strategy.mods.declared()
           and m.reason(spec.framework, spec.strategy.base) is None]  # a modifier's memory term (Costs)
    impl = backends.get(spec.framework).lean_attention(platform)
    if impl and spec.strategy.attention_impl == "default":
        out.append(f"--attention-impl {impl}")
    batch = spec.train.batch
    smaller = fitting_batch(batch, need, fixed, available)
    if 0 < smaller < batch:
        out.append(f"--batch {smaller} (estimated)")
    elif smaller == 0 and batch > 1:
        out.append("a smaller --batch (even 1 does not fit as it is)")
    return out


#: what an out-of-memory refusal by the compiler says (XLA:TPU: "RESOURCE_EXHAUSTED: Ran out of memory on HBM,
#: the total memory required for HLO temporaries (16.52G) exceeds available HBM (15.75G)")
OOM_WORDS = ("RESOURCE_EXHAUSTED", "Ran out of memory", "out of memory", "exceeds available HBM")


def compile_refusal(error: BaseException) -> tuple[int, int] | None:
    """(bytes the compiler said the program needs, bytes it said there are) of a compile that ran out of
    memory; (0, 0) when it said no sizes; None for any other error."""
    import re

    text = str(error)
    if not any(w in text for w in OOM_WORDS):
        return None
    m = re.search(r"temporaries \(([\d.]+)([KMGT]?)\) exceeds available HBM \(([\d.]+)([KMGT]?)\)", text)
    if not m:
        return 0, 0
    unit = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    return int(float(m.group(1)) * unit[m.group(2)]), int(float(m.group(3)) * unit[m.group(4)])


# JAX ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DevicePeak:
    """A JAX run's peak memory on its device (:func:`device_peak`)."""

    peak_bytes: int
    peak_source: str  # which of the two figures it is
    allocator_peak_bytes: int
    program_peak_bytes: int | None  # what the compiled step needs (None: no compiled sizes)


def device_peak(platform: str, allocator_bytes: int, allocator_source: str, sizes: dict[str, int]) -> DevicePeak:
    """The run's peak memory on its device, from the allocator's peak and the compiled step's sizes.

    Where the allocator sees the compiled program's temporaries (the CPU's RSS, XLA's GPU allocator, torch's
    caching allocator) its peak is the peak. On a TPU ``memory_stats()['peak_bytes_in_use']`` holds the
    arrays and the program's code but not its temporaries, which the runtime reserves apart (its peak can be a
    fraction of the step's temporaries: benchmarks/RESULTS.md, "Where does memory go"), so the
    peak is the larger of the allocator's and what the compiled step needs (:func:`jax_step_estimate`:
    arguments + outputs not aliased to them + temporaries + code). Returns ``peak_bytes``, ``peak_source``
    (which was used) and both figures (``allocator_peak_bytes``, ``program_peak_bytes``, None without sizes)."""
    program = jax_step_estimate(sizes) if sizes else None
    if program is not None and not platforms.get(platform).allocator_sees_temporaries and program > allocator_bytes:
        return DevicePeak(program, PROGRAM_PEAK, allocator_bytes, program)
    return DevicePeak(allocator_bytes, allocator_source, allocator_bytes, program)


#: ``peak_mem_source`` when the compiled step's sizes gave the peak (a TPU's allocator leaves temporaries out)
PROGRAM_PEAK = ("compiled step memory_analysis() (arguments + outputs not aliased + temporaries + code; "
                "the device allocator's peak leaves temporaries out)")


#: how much more generous the bound is for a user's model, whose insides (MLP width, extra buffers) are not known
USER_BOUND_FACTOR = 8


def jax_upper_bound(spec: Any, n_params: int) -> int:
    """A generous upper bound, from the shapes, on the bytes a JAX step needs: :func:`torch_estimate` at
    4-byte activations plus the attention scores XLA may keep (scores, probabilities and their gradients:
    4 x heads x T x T per sequence and layer), doubled for temporaries; for a user's model (shaped by the
    preset, its insides unknown) ``USER_BOUND_FACTOR`` times more."""
    m, t = spec.model, spec.train
    batch = t.batch * spec.strategy.mods.activations(spec)  # the sequences whose activations are alive at once
    tokens = int(batch * t.seq)  # scan-steps keeps one step's activations at a time (its stacked inputs are small)
    attention = int(m.layers * batch * m.heads * t.seq * t.seq * 4 * 4)
    bound = 2 * (torch_estimate(n_params * 4, m.layers, tokens, m.d_model, m.vocab, 4) + attention)
    return USER_BOUND_FACTOR * bound if m.family == USER_FAMILY else bound  # a twin: its shapes are known


def jax_breakdown(peak_bytes: int, peak_source: str, runtime_bytes: int, params: Any, opt_state: Any,
                  batch_bytes: int, sizes: dict[str, int], residuals: list[tuple[str, int]],
                  on_cpu: bool) -> Breakdown:
    """The parts of a JAX run's peak: the arguments split into params, optimizer state and batch; the
    compiled temp buffer split into gradients (one per parameter), the activations the residuals name, and
    the rest (temporaries)."""
    import jax

    p, o = nbytes(jax.tree.leaves(params)), nbytes(jax.tree.leaves(opt_state))
    acts = sum(b for _, b in residuals)
    temp = sizes["temp"] if sizes else 0  # memory_analysis()'s four sizes, or none
    grads = min(p, temp)
    acts = min(acts, temp - grads)
    parts = {"runtime": runtime_bytes if on_cpu else 0, "params": p, "optimizer_state": o, "gradients": grads,
             "activations": acts, "temporaries": temp - grads - acts, "inputs": batch_bytes}
    return Breakdown(peak_bytes, peak_source, "jax: compiled step memory_analysis() + VJP residuals", parts,
                     residuals[:TOP], sizes)


# torch -------------------------------------------------------------------------------------------------


def torch_breakdown(peak_bytes: int, peak_source: str, runtime_bytes: int, at_peak: dict[str, int],
                    saved: list[tuple[str, int]], on_cpu: bool) -> Breakdown:
    """The parts of a torch run's peak: the tensors alive at the peak of a profiled step, by part
    (:func:`torch_step_at_peak`), plus, on CPU, the process's runtime; the activations listed by the module
    that saved them (:func:`torch_saved_activations`)."""
    parts = {"runtime": runtime_bytes if on_cpu else 0, **{p: at_peak.get(p, 0) for p in PARTS if p != "runtime"}}
    return Breakdown(peak_bytes, peak_source, "torch: the profiler's memory events at the peak of one step", parts,
                     saved[:TOP])


def torch_estimate(n_params_bytes: int, layers: int, tokens: int, d_model: int, vocab: int,
                   itemsize: int = 4) -> int:
    """Bytes a torch step of a twin needs, from its shapes: params + gradients + AdamW's two moments; per
    layer ~34 d_model bytes per token at 2-byte activations kept for the backward pass (Korthikanti et al.
    2022, "Reducing Activation Recomputation", without the attention-probability term: the twins call SDPA,
    which keeps none); the logits with their softmax and gradient (3 x vocab per token)."""
    per_layer = tokens * 34 * d_model * itemsize // 2
    return 4 * n_params_bytes + layers * per_layer + 3 * tokens * vocab * itemsize


class _Recorded(msgspec.Struct, frozen=True):
    """What :func:`summary` reads of a record's ``memory_breakdown`` (:meth:`Breakdown.to_dict`'s form)."""

    peak_bytes: int = 0
    peak_source: str | None = None
    parts: dict[str, int] = {}
    accounted: float | None = None
    unaccounted_bytes: int = 0
    allocator_peak_bytes: int | None = None


def summary(recorded: dict[str, object]) -> str:
    """One line of a record's ``memory_breakdown`` (a record is data: read through its known fields):
    ``peak 12.9 GiB = params 0.5 + ... (98% accounted)``."""
    try:
        d = msgspec.convert(recorded, _Recorded)
    except msgspec.ValidationError:
        return "no breakdown"
    parts = ", ".join(f"{k} {v / GiB:.2f}" for k, v in d.parts.items() if v)
    acc = d.accounted
    tail = f"{acc:.0%} accounted" if acc is not None else "no peak"
    if acc is not None and abs(1 - acc) > 0.10:
        tail += f"; {d.unaccounted_bytes / GiB:+.2f} GiB unaccounted"
    if d.peak_source == PROGRAM_PEAK and d.allocator_peak_bytes is not None:
        tail += f"; the compiled step's peak, the allocator's was {d.allocator_peak_bytes / GiB:.2f} GiB"
    return f"peak {d.peak_bytes / GiB:.2f} GiB = {parts} GiB ({tail})"


# the worker's entry points: the preflight before the first step, the breakdown after the measured ones -----


@dataclass(frozen=True)
class PreflightCompile:
    """The step compiled for a preflight's estimate, as the worker measured it around :func:`preflight`."""

    compiles: int  # programs (the framework's own events)
    compile_s: float
    cache_hits: int  # of those, loaded from the persistent compilation cache
    wall_s: float


@dataclass(frozen=True)
class Folded:
    """What a preflight's compile adds to the run's compile figures (:meth:`Preflight.fold`)."""

    compile_s: float = 0.0
    first_step_s: float = 0.0
    compiles_in_loop: int = 0
    compiles_total: int = 0
    compile_cache_hits: int = 0


@dataclass
class Preflight:
    estimate_bytes: int
    available_bytes: int
    where: str  # "the host" | "the GPU" | "the TPU" | "the device"
    how: str  # how the estimate was made
    sizes: dict[str, int] = field(default_factory=dict)  # JAX: the compiled step's memory_analysis()
    #: JAX, when the step was compiled for the estimate: that compile, set by the worker around :func:`preflight`
    compile: PreflightCompile | None = None
    reused: bool | None = None  # whether the first step reused that compile (set by :meth:`fold`)
    #: what would make a run that does not fit fit (:func:`advice`): "+remat (...)", "--batch 4", ...
    advice: list[str] = field(default_factory=list)
    #: the compiler refused the step for want of memory (a TPU's compile checks its temporaries against HBM)
    refused_by_compiler: bool = False

    def fold(self, first_step_compiles: int) -> Folded:
        """What to add to the run's compile figures for the compile done here: when the first step compiled
        nothing, it ran this executable, so this compile IS the run's (its seconds go to ``compile_s`` and,
        with its wall time, to ``first_step_s``; its programs to the loop's compiles). Otherwise the first step
        compiled again: this one was an extra, left out of the run's programs (``compiles_total`` -= n) and of
        their loads from the persistent cache (``compile_cache_hits``)."""
        c = self.compile
        if c is None:
            return Folded()
        self.reused = first_step_compiles == 0
        if self.reused:
            return Folded(compile_s=c.compile_s, first_step_s=c.wall_s, compiles_in_loop=c.compiles)
        return Folded(compiles_total=-c.compiles, compile_cache_hits=-c.cache_hits)

    @property
    def fits(self) -> bool:
        return not self.refused_by_compiler and fits(self.estimate_bytes, self.available_bytes)

    def reason(self) -> str:
        return skip_reason(self.estimate_bytes, self.available_bytes, self.where, self.how, self.advice)

    def to_dict(self) -> dict[str, Any]:
        out = {"estimate_bytes": self.estimate_bytes, "available_bytes": self.available_bytes,
               "where": self.where, "how": self.how, "compiled": self.sizes}
        if self.advice:
            out["advice"] = list(self.advice)
        if self.refused_by_compiler:
            out["refused_by_compiler"] = True
        if self.compile:  # the step compiled for the estimate, and whether the run's first step reused it
            out |= {"compile": asdict(self.compile), "compile_reused_by_the_run": self.reused}
        return out


def jax_refusal(spec: Any, refused: tuple[int, int], resident: int, available: int, where: str,
                platform: str) -> Preflight:
    """The preflight of a step the compiler refused for want of memory: its temporaries (as the compiler gave
    them) and the state already resident against the memory the compiler said there is, with what would fit."""
    temporaries, limit = refused
    need = temporaries + resident if temporaries else 0
    have = limit or available
    how = (f"the compiler refused the step: its temporaries alone are {temporaries / GiB:.2f} GiB" if temporaries
           else "the compiler refused the step: out of memory")
    flight = Preflight(need, have, where, how, refused_by_compiler=True)
    flight.advice = advice(spec, temporaries or 2 * have, 0, max(have - resident, 0), platform)
    return flight


def preflight(spec: Any, trainer: Any, batch: tuple[Any, Any], platform: str, n_params: int) -> Preflight | None:
    """Whether the run fits, before its first (compiling) step: JAX from the compiled step's memory
    analysis, torch twins from their shapes; None where no estimate can be made (a user's torch model).
    A JAX run whose upper bound from the shapes is below ``EXACT_ABOVE`` of the available memory is not
    compiled for the estimate; above it, the step is compiled here once, and that compile is the run's own
    (:func:`jax_sizes`). What the trainer holds already (parameters, optimizer state) is in use, so it is
    taken off the estimate, as it is off what is available: counted once, not twice."""
    read = _PREFLIGHTS[backends.get(spec.framework).MEMORY_PROTOCOL]
    return read(spec, trainer, batch, platform, n_params, resident_bytes(trainer))


def _jax_preflight(spec: Any, trainer: Any, batch: tuple[Any, Any], platform: str, n_params: int,
                   resident: int) -> Preflight | None:
    """A JAX step's: its upper bound from the shapes, else the compiled step's memory analysis."""
    if lacks(trainer, JaxStepTrainer, "preflight"):
        return None
    avail, where = jax_available(platform)
    bound = max(jax_upper_bound(spec, n_params) - resident, 0)
    if bound <= EXACT_ABOVE * avail:
        return Preflight(bound, avail, where, "upper bound from the shapes, far below what is available")
    try:
        sizes = jax_sizes(trainer, batch)
    except Exception as e:  # a TPU's compiler refuses a program whose temporaries exceed its HBM
        refused = compile_refusal(e)
        if refused is None:
            raise
        return jax_refusal(spec, refused, resident, avail, where, platform)
    if not sizes:
        return None
    # the arguments are the resident state and the batch: on the host all of it is resident already
    need = jax_step_estimate(sizes) - (sizes["argument"] if where == "the host" else resident)
    flight = Preflight(max(need, 0), avail, where, "compiled step memory_analysis()", sizes)
    if not flight.fits:  # what would fit: the step's needs beyond the state grow with the batch
        flight.advice = advice(spec, flight.estimate_bytes, 0, avail, platform)
    return flight


def _torch_preflight(spec: Any, trainer: Any, batch: tuple[Any, Any], platform: str, n_params: int,
                     resident: int) -> Preflight | None:
    """A torch twin's: an estimate from its shapes (None for a user's model: its insides are unknown)."""
    if spec.model.family == USER_FAMILY:
        return None
    import torch

    m, t = spec.model, spec.train
    itemsize = 2 if t.precision == "bf16" else 4
    tokens = int(t.batch * spec.strategy.mods.activations(spec) * t.seq)  # alive at once (a modifier's term)
    est = torch_estimate(n_params * 4, m.layers, tokens, m.d_model, m.vocab, itemsize)
    est = max(est - (resident or n_params * 4), 0)  # the parameters are resident already, on either side
    if torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info()
        return Preflight(est, int(free), "the device", "estimate from the shapes")
    return Preflight(est, host_available_bytes(), "the host", "estimate from the shapes")


#: how a run's preflight is estimated, by the trainer protocol its framework's backend names
_PREFLIGHTS = {JaxStepTrainer: _jax_preflight, TorchModuleTrainer: _torch_preflight}


def record_peak(mem: Breakdown | str, peak_bytes: int, peak_source: str) -> tuple[int, str]:
    """The record's ``peak_mem_bytes`` and ``peak_mem_source``: the breakdown's peak when it made one (on a TPU
    the compiled step's), else (``mem`` why it made none) the allocator's or the process's as measured."""
    if isinstance(mem, Breakdown) and mem.peak_source:
        return mem.peak_bytes, mem.peak_source
    return peak_bytes, peak_source


def breakdown(spec: Any, trainer: Any, batch: tuple[Any, Any], peak_bytes: int, peak_source: str,
              runtime_bytes: int, platform: str, sizes: dict[str, int] | None) -> Breakdown | str:
    """The run's memory breakdown (after the measured steps: the record's ``memory_breakdown``); why not, in
    one line, if it cannot be made.
    A JAX run's ``peak_bytes``/``peak_source`` are :func:`device_peak`'s (on a TPU, the compiled step's when
    the allocator's peak is below it), with both figures beside them; the record's ``peak_mem_bytes`` and
    ``peak_mem_source`` follow them (:func:`record_peak`)."""
    on_cpu = not platforms.get(platform).accelerator
    protocol = backends.get(spec.framework).MEMORY_PROTOCOL
    why = lacks(trainer, protocol, "memory breakdown")
    if why:
        return why
    try:
        if protocol is JaxStepTrainer:
            sizes = sizes or jax_run_sizes(trainer, batch)
            peak = device_peak(platform, peak_bytes, peak_source, sizes)  # a TPU's allocator misses temporaries
            loss_of = trainer.make_loss()
            residuals = jax_residuals(loss_of, trainer.params, *batch)
            b = jax_breakdown(peak.peak_bytes, peak.peak_source, runtime_bytes, trainer.params,
                              trainer.opt_state, batch_bytes(batch), sizes, residuals, on_cpu)
            b.allocator_peak_bytes, b.program_peak_bytes = peak.allocator_peak_bytes, peak.program_peak_bytes
            return b
        at_peak: dict[str, int] = {}  # one profiled step gives both the parts and the activations by module
        saved = torch_saved_activations(
            trainer.model, lambda: at_peak.update(torch_profiled_step(trainer, batch, "cpu" if on_cpu else "cuda:0")))
        return torch_breakdown(peak_bytes, peak_source, runtime_bytes, at_peak, saved, on_cpu)
    except Exception as e:  # a breakdown must never cost the measured run
        return f"{type(e).__name__}: {e}"[:300]
