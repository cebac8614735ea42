"""What a claims run costs on an accelerator, before anything runs: each run's device time (``claims --plan``).

A run on a GPU or TPU costs a fresh process (imports, device start-up), its compile (on a TPU about a minute at
the seeds' sizes: the largest part), and its steps. The steps come from ``twinbench predict``'s datasheets
(``predict/datasheets.py``) and its measured points (``predict/calibration.jsonl``): a configuration measured on
that device takes its measured step; another takes the model FLOPs of its step (the family's FLOPs per token)
at the datasheet peak times the fraction of it the same framework reached in the measured points of that
platform (its median MFU). Compile times are a stated model fitted to the TPU and GPU sittings of
``benchmarks/RESULTS.md`` (``COMPILE``); both are estimates for a plan, never evidence for a verdict. A CPU's
plan keeps the suite's own cost model (``suite.cost_s``, seconds on an idle 2-core CPU).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import msgspec

from twinbench.predict.datasheets import Datasheet
from twinbench.spec import PRESETS, RunSpec
from twinbench.tasks import TASKS

#: A fresh process on an accelerator machine: Python, torch/jax imports, the device's runtime start-up (fitted to
#: the TPU sittings of benchmarks/RESULTS.md, "How long does the claims suite take?").
START_S = {"gpu": 15.0, "tpu": 15.0}
#: A probe (one process, small arrays) on an accelerator machine.
PROBE_S = 12.0


@dataclass(frozen=True)
class CompileFit:
    """A platform's compile terms, in seconds: a jit step's (``base`` + ``per_layer`` x layers, plus a task's own
    term), torch eager's start-up, torch.compile's cold compile (base + per layer; 0: none on the platform)."""

    base: float
    per_layer: float
    torch_eager: float
    torch_compile_base: float = 0.0
    torch_compile_per_layer: float = 0.0
    tasks: dict[str, float] = field(default_factory=dict)  # a task's own term, by its name (fitted: classify's)


#: Cold compile, seconds, of a jax/jit step: ``base + per_layer * layers`` (+ ``classify`` for BERT's task),
#: fitted to the cold compiles of GPT-2 at two depths, Llama-300M and BERT-base in benchmarks/RESULTS.md ("On a
#: TPU", "On a GPU"), with torch.compile's and torch eager's first step beside them.
COMPILE = {"tpu": CompileFit(base=16.0, per_layer=2.4, torch_eager=0.0, tasks={"classify": 10.0}),
           "gpu": CompileFit(base=4.0, per_layer=1.5, torch_eager=2.5, torch_compile_base=8.0,
                             torch_compile_per_layer=2.0, tasks={"classify": 3.0})}
#: Factors on a jit step's compile: torchax traces the torch module first (the ratio of its compiles to the
#: twins' in the same sittings), scan-layers compiles one block whatever the depth, naive compiles only the
#: gradient function (stated). A modifier's own factors (remat's recomputation, a length policy's programs) are
#: declared with it (strategies/modifiers.py, Costs).
TORCHAX_COMPILE, NAIVE_COMPILE, SCAN_LAYERS_S = 1.12, 0.6, 13.0
#: A run that profiles a few steps after its measured ones (C22's, for explain): the profiler and the trace file.
TRACE_S = 8.0


def kind(spec: RunSpec) -> str:
    """The calibration kind of a run: ``torchax`` apart from the rest of JAX (its own measured efficiency)."""
    return "torchax" if spec.strategy.base.startswith("torchax") else spec.framework


def flops_per_step(spec: RunSpec) -> float:
    """The model FLOPs of one training step (the family's FLOPs per token x tokens; the modifiers' factors, as
    remat's recomputation)."""
    from twinbench.models.family import FAMILIES

    m, t = spec.model, spec.train
    fam = FAMILIES.get(m.family)
    per_token = fam.flops_per_token(m, t.seq) if fam else 6 * 100e6  # a user model: an assumed 100M parameters
    return per_token * t.batch * t.seq * spec.strategy.mods.flops()


def n_params(spec: RunSpec) -> float:
    """Parameters of the run's model, from its FLOPs per token (6 N + attention): for gradient bytes."""
    m, t = spec.model, spec.train
    attention = 12 * m.layers * m.d_model * t.seq
    return max(flops_per_step(spec) / (t.batch * t.seq) / spec.strategy.mods.flops() - attention,
               6.0) / 6


@cache
def efficiencies() -> dict[tuple[str, str], float]:
    """(platform, kind) -> the median fraction of the datasheet's bf16 peak the measured points reached (MFU)."""
    from twinbench.plan import run_spec
    from twinbench.predict.calibration import shipped
    from twinbench.predict.datasheets import DATASHEETS

    got: dict[tuple[str, str], list[float]] = {}
    for p in shipped():
        if p.device not in DATASHEETS or p.preset not in PRESETS:
            continue
        spec = run_spec(p.preset, p.framework, p.strategy, p.overrides())
        sheet = DATASHEETS[p.device]
        mfu = flops_per_step(spec) / (p.step_ms / 1e3) / sheet.peak("bf16" if spec.strategy.mods.bf16 else "fp32")
        got.setdefault((sheet.platform, kind(spec)), []).append(mfu)
    return {k: statistics.median(v) for k, v in got.items()}


def measured(spec: RunSpec, sheet: Datasheet) -> tuple[float, str] | None:
    """The measured step of this very configuration on this device, from predict's calibration points."""
    from twinbench.predict.calibration import shipped

    for p in shipped():
        if (p.device, p.framework, p.strategy, p.preset, p.batch, p.seq, p.attention_impl) == (
                sheet.name, spec.framework, spec.strategy.name, spec.preset, spec.train.batch, spec.train.seq,
                spec.strategy.attention_impl):
            return p.step_ms, f"measured on {sheet.name} ({p.date or 'calibration.jsonl'})"
    return None


def step_ms(spec: RunSpec, sheet: Datasheet) -> tuple[float, str]:
    """The step ``predict``'s datasheet and measured points expect of ``spec`` on ``sheet``, and how it was had."""
    hit = measured(spec, sheet)
    if hit and spec.strategy.mods.calibrated():
        return hit
    eff = efficiencies().get((sheet.platform, kind(spec))) or efficiencies().get((sheet.platform, "jax")) or 0.3
    dtype = "bf16" if spec.strategy.mods.bf16 or spec.train.precision == "bf16" else "fp32"
    ms = flops_per_step(spec) / (sheet.peak(dtype) * eff) * 1e3
    return ms, (f"model FLOPs at {eff:.0%} of {sheet.name}'s {dtype} datasheet peak (the median MFU of the measured "
                f"{kind(spec)} points on a {sheet.platform})")


def compile_s(spec: RunSpec, platform: str) -> float:
    """The cold compile the run pays on ``platform`` (``COMPILE``: a stated model of the sittings)."""
    c = COMPILE[platform]
    task = c.tasks.get(spec.train.task, 0.0)  # a task's own compile term, by its name (fitted: classify's)
    return COMPILE_MODELS[spec.framework](spec, platform, c, task)


def _torch_compile_s(spec: RunSpec, platform: str, c: CompileFit, task: float) -> float:
    """torch.compile's cold compile grows with the layers; eager compiles nothing but a start-up."""
    if spec.strategy.base.startswith("compile"):
        return c.torch_compile_base + c.torch_compile_per_layer * spec.model.layers + task
    return c.torch_eager


def _jax_compile_s(spec: RunSpec, platform: str, c: CompileFit, task: float) -> float:
    """One jit of the step (scan-layers: of one block), by the base's factors, once per program a length
    policy makes (a classify run's padding)."""
    base = spec.strategy.base
    if base == "scan-layers":
        return (SCAN_LAYERS_S if platform == "tpu" else c.base + c.per_layer * 2) + task
    one = c.base + c.per_layer * spec.model.layers + task
    if base.startswith("torchax"):
        one *= TORCHAX_COMPILE
    if base == "naive":
        one *= NAIVE_COMPILE
    one *= spec.strategy.mods.compile()
    programs = spec.strategy.mods.programs() if TASKS[spec.train.task].variable_length else 1
    return one * min(programs, spec.train.steps)


#: each framework's compile model, by the record's framework
COMPILE_MODELS = {"torch": _torch_compile_s, "jax": _jax_compile_s}


class RunCost(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """One run's expected seconds: its total and compile, and on a datasheet's device the parts of it (None on
    this CPU, whose cost model gives the total alone)."""

    total_s: float
    compile_s: float
    step_source: str  # where the step estimate comes from, in words
    start_s: float | None = None  # process start (and a profile of a few steps when traced)
    steps_s: float | None = None
    step_ms: float | None = None


class PlannedRun(RunCost, kw_only=True, frozen=True, omit_defaults=True):
    """A claim's run in the plan: what it is, how many times it runs, and its cost."""

    name: str
    framework: str
    strategy: str
    preset: str
    size: str  # size_of
    platform: str
    runs: int  # repeats of it in the plan


class PlannedClaim(msgspec.Struct, kw_only=True, frozen=True):
    claim: str
    runs: list[PlannedRun]
    probes: list[str]
    not_run: str | None = None  # why it runs nothing here


class ClaimsPlan(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """``claims --plan``: the claims' runs and the device time expected of them (written by ``--json``)."""

    device: str
    platform: str
    quick: bool
    repeats: int
    configurations: int
    runs: int
    probes: list[str]
    claims: list[PlannedClaim]
    predicted_compile_s: float
    predicted_runs_s: float
    predicted_probes_s: float
    predicted_total_s: float
    #: on this CPU: the load now in words, how much longer it makes the runs, and the total at that load
    load: str | None = None
    load_factor: float | None = None
    predicted_total_s_at_load: float | None = None


def run_cost(spec: RunSpec, sheet: Datasheet) -> RunCost:
    """One run's expected device time on ``sheet``: process start (and a profile of a few steps when traced),
    compile, steps (the synced steps and the unsynced pass after them; a --slow-input run waits for its host
    work), with the step estimate's source."""
    ms, source = step_ms(spec, sheet)
    per_step = max(ms, spec.train.slow_input)
    steps = 2 * spec.train.steps * per_step / 1e3
    comp = compile_s(spec, sheet.platform)
    start = START_S.get(sheet.platform, 15.0) + (TRACE_S if spec.output.trace_dir else 0.0)
    return RunCost(start_s=start, compile_s=round(comp, 1), steps_s=round(steps, 1),
                   total_s=round(start + comp + steps, 1), step_ms=round(ms, 2), step_source=source)


def size_of(spec: RunSpec) -> str:
    """A run's size in words: preset, depth and width, batch x sequence, precision, attention."""
    m, t = spec.model, spec.train
    text = f"{spec.preset} L{m.layers} d{m.d_model}, {t.batch} x {t.seq}, {t.precision}"
    return text + (f", {spec.strategy.attention_impl} attention" if spec.strategy.attention_impl != "default" else "")


def plan(claims: list[Any], setup: Any, per_claim: dict[str, dict[str, RunSpec]], rounds: list[list[RunSpec]],
         sheet: Datasheet | None) -> ClaimsPlan:
    """``claims --plan``: each claim's runs (framework, strategy, size, platform, how many times) and the device
    time expected of them, without running anything; ``predicted_total_s`` the whole suite's (every repeat, the
    probes). ``sheet`` None: this CPU, with the suite's CPU cost model."""
    from twinbench.claims.suite import PROBE_S as CPU_PROBE_S
    from twinbench.claims.suite import compile_s as cpu_compile_s
    from twinbench.claims.suite import cost_s

    def cost(spec: RunSpec) -> RunCost:
        if sheet is None:
            return RunCost(total_s=round(cost_s(spec), 1), compile_s=round(cpu_compile_s(spec), 1),
                           step_source="the suite's CPU cost model (suite.RUN_S)")
        return run_cost(spec, sheet)

    times: dict[str, int] = {}
    for r in rounds:
        for s in r:
            times[s.config_id()] = times.get(s.config_id(), 0) + 1
    costs = {cid: cost(s) for r in rounds[:1] for s in r for cid in [s.config_id()]}
    out_claims = []
    for c in claims:
        runs = [PlannedRun(name=n, framework=s.framework, strategy=s.strategy.name, preset=s.preset, size=size_of(s),
                           platform=setup.platform, runs=times.get(s.config_id(), 0),
                           **msgspec.structs.asdict(costs.get(s.config_id()) or cost(s)))
                for n, s in per_claim[c.id].items()]
        out_claims.append(PlannedClaim(claim=c.id, runs=runs, probes=list(c.probes),
                                       not_run=c.unmeasurable(setup) or None))
    probes = sorted({p for c in claims if not c.unmeasurable(setup) for p in c.probes})
    probe_s = CPU_PROBE_S if sheet is None else PROBE_S
    runs_s = sum(costs[s.config_id()].total_s for r in rounds for s in r)
    compile_total = sum(costs[s.config_id()].compile_s for r in rounds for s in r)
    total = round(runs_s + len(probes) * probe_s, 1)
    out = ClaimsPlan(device=sheet.name if sheet else "here", platform=setup.platform, quick=setup.quick,
                     repeats=setup.repeats, configurations=len(costs), runs=sum(map(len, rounds)), probes=probes,
                     claims=out_claims, predicted_compile_s=round(compile_total, 1), predicted_runs_s=round(runs_s, 1),
                     predicted_probes_s=round(len(probes) * probe_s, 1), predicted_total_s=total)
    if sheet is None:  # this CPU: its load now stretches every run (an accelerator's device time does not)
        from twinbench.claims.suite import load_factor

        factor, load = load_factor()
        out = msgspec.structs.replace(out, load=load, load_factor=round(factor, 2),
                                      predicted_total_s_at_load=round((runs_s + len(probes) * probe_s) * factor, 1))
    return out
