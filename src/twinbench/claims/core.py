"""The claims registry: one :class:`Claim` per id of ``docs/claims.md``, with its experiment and verdict rule.

A claim names the runs it needs (``runs(setup) -> {name: RunSpec}``, built from the registered strategies),
the probes it needs (small experiments of ``claims/probes.py`` run in their own process), the rule it
follows (plain text, printed and written with the verdict) and ``judge(evidence) -> Verdict``, the code of
that rule. The claim-group modules (compilation, speed, multidevice, input, dynamic) register them; the
suite (``claims/suite.py``) runs the union of their runs once, so two claims sharing a run share its
process and record. A claim whose rule reads timings is ``timed``: its runs are repeated, interleaved, and
:func:`judge_repeats` applies the rule to every repeat, answers from the median one with the range shown,
and says ``inconclusive`` when the repeats fall on different sides of a threshold.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from twinbench import backends
from twinbench.claims.probes import P, Probe
from twinbench.claims.probes import read as read_probe
from twinbench.claims.result import Numbers
from twinbench.claims.sizes import ATTENTION, PLATFORMS, REPEATS, left_out, sizes_for
from twinbench.measure import platforms
from twinbench.plan import Overrides, RunFields
from twinbench.record import Record, as_record
from twinbench.spec import PRESETS, RunSpec, SpecError

SUPPORTED, CONTRADICTED, DEPENDS, NOT_MEASURABLE = "supported", "contradicted", "depends", "not measurable"
#: A timed claim whose repeats fall on different sides of its threshold: the noise is larger than the effect.
INCONCLUSIVE = "inconclusive"
#: A claim that states a size, measured going its way but far past it (many times the size it states): the
#: direction holds, the size does not, and "supported" would tell the reader the size held too.
FAR_BEYOND = "far beyond"
VERDICTS = (SUPPORTED, FAR_BEYOND, CONTRADICTED, DEPENDS, INCONCLUSIVE, NOT_MEASURABLE)
#: A measured effect more than this many times the top of the claim's stated range is "far beyond" it.
FAR = 3.0
#: A record taken at a 1-minute load average above this many runnable tasks per core: timings disturbed.
LOAD_PER_CORE = 0.5
#: GPT presets from small to large: the "bigger" point of a claim that compares sizes is the next one.
GPT_LADDER = ("tiny", "small", "gpt2-124m", "gpt-350m")


@dataclass
class Verdict:
    """What a rule concluded: the verdict word, one sentence saying why (with the threshold where it
    flips for ``depends``), the numbers it used, and what the measurement cannot show here."""

    verdict: str
    finding: str
    numbers: Numbers = field(default_factory=dict)
    caveat: str = ""
    judged: str = ""  # the key(s) of ``numbers`` the rule's thresholds apply to, comma-separated: a timed
    # claim shows their spread over the repeats, and its median repeat is the median of the first


@dataclass(frozen=True)
class Setup:
    """Where and how big the suite measures: platform, presets, run lengths, the planned training run.

    :func:`setup_for` fills it for a platform from ``claims/sizes.py``: a CPU keeps the small
    presets, a GPU or TPU the seeds' sizes in bf16 with the platform's fused attention. :meth:`spec` is how a claim
    asks for a run: on a TPU a torch run becomes the torch twin through torchax on the chip (:meth:`path`)."""

    quick: bool = True
    gpt: str = "tiny"  # the GPT preset of most runs
    bert: str = "bert-tiny"  # the BERT fine-tuning preset (C1, C3, C15-C18)
    plan_steps: int = 20000  # a full training run, for compile shares and break-even verdicts
    top: RunFields = field(default_factory=RunFields)  # RunSpec fields for every run (--trace, --model, --threads)
    repeats: int = REPEATS  # runs of every timed configuration, interleaved (--repeats)
    platform: str = "cpu"  # where the runs go: cpu, gpu or tpu (claims/sizes.py)
    devices: int = 1  # accelerators on this machine: the multi-device claims need two
    device: str = ""  # the ``predict --device`` name of the accelerator, when known (predictions of C10-C13)
    large: str = ""  # the larger model of the size claims; "" -> the next GPT preset of GPT_LADDER
    bert_shape: Overrides = field(default_factory=dict)  # BERT fine-tuning runs: batch, seq, steps
    #: where the runs of a claim that names explain's reason (``Claim.traced``) profile a few steps after their
    #: measured ones, when no --trace is given ("" : not traced); the CLI sets it on an accelerator
    reason_traces: str = ""

    @property
    def accelerator(self) -> bool:
        """A GPU or TPU: device-memory claims run, sizes are the seeds'."""
        return self.platform != "cpu"

    @property
    def big(self) -> str:
        """The larger model of the size claims: the accelerator's ``large`` preset, else the next GPT preset
        (the gpt preset itself at the top of the ladder)."""
        if self.large:
            return self.large
        i = GPT_LADDER.index(self.gpt) if self.gpt in GPT_LADDER else len(GPT_LADDER) - 1
        return GPT_LADDER[min(i + 1, len(GPT_LADDER) - 1)]

    def lengths(self, preset: str) -> Overrides:
        """Run length of a preset in this mode: the preset's own for the smallest, shorter for larger."""
        steps, warmup = PRESETS[preset][1].steps, PRESETS[preset][1].warmup
        if preset == "tiny":  # milliseconds a step: 30 steps cost nothing next to the process start
            steps, warmup = max(steps, 30), max(warmup, 5)
        else:  # larger presets: enough steps for a steady median, no more
            steps, warmup = (min(steps, 12), min(warmup, 3)) if self.quick else (min(steps, 20), min(warmup, 5))
        return {"steps": steps, "warmup": warmup}

    def path(self, framework: str, strategy: str) -> tuple[str, str]:
        """The (framework, strategy) that runs ``framework``'s ``strategy`` on this platform: on a TPU a torch
        strategy is the torch twin through torchax on the chip (``torch:eager+remat`` -> ``jax:torchax+remat``),
        and one torchax cannot run (torch.compile, +dynamic, +prefetch) is a SpecError; elsewhere unchanged."""
        if framework not in platforms.get(self.platform).routes:  # it has a build here
            return framework, strategy
        base, *mods = strategy.split("+")
        bad = [m for m in mods if m not in TORCHAX_MODS]
        if base != "eager" or bad:
            raise SpecError(f"torch:{strategy} has no path to a TPU: torch reaches the chip through torchax "
                            f"(jax:torchax, with {', '.join('+' + m for m in TORCHAX_MODS)})")
        return "jax", "+".join(["torchax", *mods])

    def attention(self, framework: str, strategy: str, bf16: bool, plain: Callable[[], RunSpec]) -> str:
        """The platform's fused attention for this run where it applies (JAX side, torchax included; torch's
        SDPA picks its own kernel on a GPU), else the default; ``plain()`` is the run with the default attention,
        built only where its sequence length and mask decide."""
        impl = ATTENTION.get(self.platform, "default")
        if backends.get(framework).attention_impl(impl) == "default" or not bf16 or self.top.user_model:
            return "default"  # torch's twins take none (SDPA picks), or the platform has no fused one
        if any(m in ("dynamic", "bucket") for m in strategy.split("+")[1:]):
            return "default"  # lengths that change per batch: the fused kernels want fixed blocks (splash: 128)
        if impl == "splash":
            spec = plain()
            if spec.train.seq % 128 or spec.model.mask_impl == "mul":
                return "default"  # the kernel works in blocks of 128 and takes the padding mask as a mask
        return impl

    def spec(self, framework: str, strategy: str, preset: str | None = None, precision: str | None = None,
             **over: Any) -> RunSpec:
        """A RunSpec of a registered strategy, with this setup's run lengths (see :func:`build_spec`). On an
        accelerator: bf16 unless ``precision="fp32"`` (how people train there), the platform's fused attention,
        and on a TPU torch through torchax (:meth:`path`)."""
        preset = preset or self.gpt
        framework, strategy = self.path(framework, strategy)
        if self.accelerator:
            bf16 = (precision or "bf16") == "bf16"
            if self.top.user_jax_model:  # a user's port has no bf16 form: both sides in fp32
                bf16 = precision == "bf16"
            if bf16 and "bf16" not in strategy.split("+")[1:]:
                strategy += "+bf16"
            if "attention_impl" not in over:
                name, settings = strategy, {**self.lengths(preset), **over}
                over["attention_impl"] = self.attention(
                    framework, strategy, bf16, lambda: build_spec(framework, name, preset, settings, self.top))
        elif precision == "bf16" and "bf16" not in strategy.split("+")[1:]:
            strategy += "+bf16"
        return build_spec(framework, strategy, preset, {**self.lengths(preset), **over}, self.top)


def setup_for(platform: str, quick: bool, *, preset: str | None = None, devices: int = 1, device: str = "",
              plan_steps: int = 20000, top: RunFields | None = None, repeats: int | None = None) -> Setup:
    """The suite's Setup on ``platform`` (``cpu``, ``gpu``, ``tpu``): its sizes (``sizes.sizes_for``), the
    devices it has, the datasheet name of its device (for predictions), and ``repeats`` when given."""
    if platform not in PLATFORMS:
        raise ValueError(f"platform {platform!r}; allowed: {', '.join(PLATFORMS)}")
    sizes = sizes_for(platform, quick, preset)
    return Setup(quick=quick, plan_steps=plan_steps, top=top or RunFields(), platform=platform, devices=devices,
                 device=device, gpt=sizes.gpt, large=sizes.large, bert=sizes.bert, bert_shape=dict(sizes.bert_shape),
                 repeats=sizes.repeats if repeats is None else repeats)


#: The modifiers the torch twin keeps through torchax (strategies/registry.py: jax:torchax honours them).
TORCHAX_MODS = ("bf16", "remat")


def build_spec(framework: str, strategy: str, preset: str, over: Overrides, top: RunFields) -> RunSpec:
    """A claim's (framework, strategy, preset, overrides) as a validated RunSpec: the recipe ``twinbench
    compare`` follows (``plan.run_spec``), so a claim can only run what a user can."""
    if top.user_model:  # claims --model: the run on the user's own model (claims/user.py)
        from twinbench.claims.user import user_spec

        return user_spec(framework, strategy, preset, over, top)
    from twinbench.plan import run_spec

    return run_spec(preset, framework, strategy, over, **top.kwargs())


@dataclass
class Evidence:
    """What a claim's judge sees: its runs' records by name, its probes' results by name."""

    setup: Setup
    records: dict[str, Record]
    probes: dict[str, Probe] = field(default_factory=dict)
    #: the records of every repeat by name, the first being ``records``; a run not repeated keeps its one record
    repeats: list[dict[str, Record]] = field(default_factory=list)

    def __post_init__(self) -> None:
        """Records given as dicts (a placeholder for a run that did not happen, a hand-made one) are read as a
        results file's line is (``record.as_record``), probes given as dicts as their files are (``probes.read``)."""
        self.records = {n: as_record(r) for n, r in self.records.items()}
        self.probes = {n: read_probe(n, p) for n, p in self.probes.items()}
        self.repeats = [{n: as_record(r) for n, r in rep.items()} for rep in self.repeats]

    def __getitem__(self, name: str) -> Record:
        return self.records[name]

    def probe(self, name: str, kind: type[P]) -> P:
        """Probe ``name``'s result, of its type ``kind`` (``probes.read`` made it so); a KeyError when the claim's
        evidence has none (the suite then says the rule could not be applied)."""
        got = self.probes[name]
        if not isinstance(got, kind):
            raise TypeError(f"probe {name} is a {type(got).__name__}, not a {kind.__name__}")
        return got

    def views(self) -> list[Evidence]:
        """One Evidence per repeat (repeat k's record of every run repeated, the one record of the others)."""
        reps = self.repeats or [self.records]
        return [Evidence(self.setup, {n: rep.get(n, r) for n, r in self.records.items()}, self.probes)
                for rep in reps]

    def problems(self) -> list[str]:
        """One line per failed run or probe (a judge never sees partial evidence unless it asks)."""
        out = [f"{n} ({r.run.framework}/{r.run.strategy}) failed: {r.error}"
               for n, r in self.records.items() if r.status != "ok"]
        out += [f"{n} ({r.run.framework}/{r.run.strategy}) failed in a repeat: {r.error}"
                for rep in self.repeats[1:] for n, r in rep.items() if r.status != "ok"]
        out += [f"probe {n} failed: {p.error or None}" for n, p in self.probes.items() if p.status != "ok"]
        return list(dict.fromkeys(out))

    def loaded(self) -> str:
        """A caveat when any record was taken at a 1-minute load average above ``LOAD_PER_CORE`` per core."""
        rs = [r for rep in (self.repeats or [self.records]) for r in rep.values()]
        per_core = [r.conditions.load_avg_1m / r.conditions.cpu_count for r in rs
                    if r.conditions.load_avg_1m is not None and r.conditions.cpu_count]
        high = [x for x in per_core if x > LOAD_PER_CORE]
        if not high:
            return ""
        from twinbench.measure.interference import disturbed

        which = " ".join(disturbed(rs))  # which runs, and `--threads N` where their threads outnumber the cores left
        return (f"{len(high)} of {len(rs)} runs were measured at a load average above {LOAD_PER_CORE} per core "
                f"(up to {max(high):.2f}): other work shared the machine, so the timings are disturbed."
                + (f" {which}." if which else ""))


@dataclass(frozen=True)
class Magnitude:
    """The size a claim states, to set the measured one against: ``keys`` name the numbers of the verdict that
    measure it (``{plan}``: the planned run's steps), ``effect`` turns each into the claim's quantity (a fraction:
    0.3 for "30% slower"), ``low``-``high`` is the claimed range of it, ``words`` how the claim says it."""

    keys: tuple[str, ...]
    low: float
    high: float
    words: str
    effect: Callable[[float], float] = lambda x: x

    def rule(self) -> str:
        return (f"Size: the claim says {self.words}; a supported direction whose measured size is over {FAR:g}x the "
                f"top of that ({self.high:.0%}) is '{FAR_BEYOND}' (supported in direction only), not supported.")

    def measured(self, numbers: Numbers, plan_steps: int) -> list[float] | None:
        """The measured effect of every key, None when a number is missing (the rule then says nothing)."""
        vals = [numbers.get(k.format(plan=plan_steps)) for k in self.keys]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in vals):
            return None
        return [self.effect(float(v)) for v in vals]  # type: ignore[arg-type]


def size_text(effect: float) -> str:
    """An effect in the words a reader compares with the claim's: ``+45%``, or from +100% on ``14.1x``."""
    return f"{1 + effect:.1f}x" if effect >= 1 else f"{effect:+.0%}"


def against_claim(claim: Claim, v: Verdict, plan_steps: int) -> Verdict:
    """The verdict with the measured size set against the claimed one: a claim stating a size says both in its
    finding, and a supported direction over :data:`FAR` times the claimed size becomes :data:`FAR_BEYOND`."""
    m = claim.magnitude
    got = m.measured(v.numbers, plan_steps) if m and v.verdict in (SUPPORTED, CONTRADICTED, DEPENDS) else None
    if m is None or got is None:
        return v
    sizes = " and ".join(size_text(e) for e in got)
    if v.verdict == SUPPORTED and min(got) > FAR * m.high:
        return Verdict(FAR_BEYOND, f"supported in direction: {sizes}, not {m.words}; {v.finding}", v.numbers,
                       v.caveat, v.judged)
    return Verdict(v.verdict, f"{v.finding} (measured {sizes}; the claim: {m.words})", v.numbers, v.caveat, v.judged)


@dataclass(frozen=True)
class Claim:
    id: str
    group: str
    statement: str
    rule: str  # the verdict rule in words; judge() is the same rule in code
    runs: Callable[[Setup], dict[str, RunSpec]]
    judge: Callable[[Evidence], Verdict]
    probes: tuple[str, ...] = ()
    caveat: str = ""  # what this experiment cannot show, whatever the numbers (printed with every verdict)
    timed: bool = True  # its rule reads timings: its runs are repeated and judged by judge_repeats()
    once: tuple[str, ...] = ()  # runs of a timed claim its rule does not read (numbers shown only): not repeated
    #: why this claim cannot be measured with this setup ("" when it can): one line, given as its finding, and
    #: no runs planned (e.g. torch.compile on a TPU, several devices on one chip)
    why_not: Callable[[Setup], str] | None = None
    #: its finding names explain's reason for a gap: on an accelerator its runs profile a few steps after the
    #: measured ones (``Setup.reason_traces``), which explain reads without running anything again
    traced: bool = False
    #: the size the statement gives (a share slower or faster), set against the measured one (None: it states none)
    magnitude: Magnitude | None = None

    @property
    def full_rule(self) -> str:
        """The rule printed with the verdict: its own, and the size rule where the claim states a size."""
        return f"{self.rule} {self.magnitude.rule()}" if self.magnitude else self.rule

    def unmeasurable(self, setup: Setup) -> str:
        """The one line saying why this claim runs nothing here ("" when it runs): its own reason, or the quick
        suite leaving it out on an accelerator (claims/sizes.py)."""
        from twinbench.claims.user import tpu_reason

        return ((self.why_not(setup) if self.why_not else "") or left_out(self.id, setup.quick, setup.platform)
                or tpu_reason(self.id, setup))


CLAIMS: dict[str, Claim] = {}
#: The claim-group modules of this package, in the order of ``docs/claims.md``.
GROUPS = ("compilation", "speed", "multidevice", "input", "dynamic", "hardware")


def register(claim: Claim) -> Claim:
    CLAIMS[claim.id] = claim
    return claim


def no_runs(setup: Setup) -> dict[str, RunSpec]:
    return {}


def load_all() -> dict[str, Claim]:
    """Every registered claim, C1..C22 in order (importing the group modules registers them)."""
    import importlib

    for group in GROUPS:
        importlib.import_module(f"twinbench.claims.{group}")
    return dict(sorted(CLAIMS.items(), key=lambda kv: int(kv[0][1:])))


def select(only: str | None) -> list[Claim]:
    """The claims of ``--only C1,C7`` (all when None); an unknown id, or none named (``--only ''``), is a
    one-line SpecError."""
    claims = load_all()
    if only is None:
        return list(claims.values())
    ids = [x.strip().upper() for x in only.split(",") if x.strip()]
    unknown = [x for x in ids if x not in claims]
    if not ids:
        raise SpecError(f"--only {only!r} names no claim; give ids such as C1,C7 (allowed: {', '.join(claims)}), or "
                        "leave --only out for all of them")
    if unknown:
        raise SpecError(f"--only: unknown claim {', '.join(unknown)}; allowed: {', '.join(claims)}")
    return [claims[x] for x in dict.fromkeys(ids)]


def judge_repeats(claim: Claim, ev: Evidence) -> Verdict:
    """The claim's rule on the median of its repeats, with the spread shown; ``inconclusive`` when the repeats
    fall on different sides of a threshold of the rule.

    The rule is applied to every repeat (runs interleaved, so repeat k of each run saw the same conditions);
    the median repeat is the one whose judged number (``Verdict.judged``) is the median. All repeats agree:
    that verdict, with the median repeat's finding and numbers and the judged number's min-max range. They
    disagree: the spread straddles a threshold, and the answer is inconclusive (the median repeat's verdict
    is shown with it). An untimed claim, or a single repeat, is the rule on the first repeat. A claim that
    states a size has it set against the measured one in every repeat (:func:`against_claim`).
    """
    views = ev.views()
    if not claim.timed or len(views) <= 1:
        return against_claim(claim, claim.judge(ev), ev.setup.plan_steps)
    vs = [against_claim(claim, claim.judge(v), ev.setup.plan_steps) for v in views]
    keys = [k.strip() for k in next((v.judged for v in vs if v.judged), "").split(",") if k.strip()]

    def values(key: str) -> list[float] | None:
        vals = [v.numbers.get(key) for v in vs]
        ok = all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in vals)
        return vals if ok else None  # type: ignore[return-value]

    first = next((vals for k in keys if (vals := values(k))), None)  # the first judged number all repeats have
    order = sorted(range(len(vs)), key=lambda i: first[i]) if first else list(range(len(vs)))
    mid = vs[order[(len(vs) - 1) // 2]]
    numbers = {**mid.numbers, "repeats": len(vs)}
    spreads = []
    for key in keys:
        vals = values(key)
        if vals:
            numbers[f"{key}_range"] = [rnd(min(vals)), rnd(max(vals))]
            spreads.append(f"{key} {rnd(statistics.median(vals))}, range {rnd(min(vals))} to {rnd(max(vals))}")
    spread = "; ".join(spreads) + f" over {len(vs)} repeats" if spreads else f"{len(vs)} repeats"
    key = ",".join(keys)
    words = [v.verdict for v in vs]
    if len(set(words)) == 1:
        return Verdict(mid.verdict, f"{mid.finding} (median; {spread})", numbers, mid.caveat, key)
    counts = ", ".join(f"{words.count(w)} {w}" for w in dict.fromkeys(words))
    return Verdict(INCONCLUSIVE, f"the repeats disagree ({counts}): {spread}, a spread across the rule's "
                   f"threshold; the median repeat says {mid.verdict}: {mid.finding}", numbers, mid.caveat, key)


# ------------------------------------------------------------------------------------------------ helpers
def rnd(x: float | None, digits: int = 3) -> float | None:
    """A number fit for the JSON: rounded to ``digits`` significant digits; None and inf kept readable."""
    if x is None:
        return None
    if isinstance(x, float) and not math.isfinite(x):
        return x
    if x == 0:
        return 0.0
    return round(x, max(digits - 1 - math.floor(math.log10(abs(x))), 0))


def pct(x: float) -> str:
    return f"{x * 100:+.0f}%"


def describe(spec: RunSpec) -> str:
    """One short line saying what a run is: strategy, preset, and the shape fields that matter."""
    m, t = spec.model, spec.train
    parts = [f"{spec.framework}/{spec.strategy.name}", spec.preset, f"L{m.layers} d{m.d_model}", f"b{t.batch}",
             f"seq {t.seq}", f"{t.steps} steps"]
    if spec.launch.devices > 1:
        parts.append(f"{spec.launch.devices} devices")
    if t.slow_input:
        parts.append(f"slow-input {t.slow_input:g} ms")
    if m.mask_impl != "where":
        parts.append(f"mask {m.mask_impl}")
    return ", ".join(parts)
