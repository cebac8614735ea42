"""The claims registry: one :class:`Claim` per id of ``shared/claims.md``, with its experiment and verdict rule.

A claim names the runs it needs (``runs(setup) -> {name: RunSpec}``, built from the registered strategies),
the probes it needs (small experiments of ``claims/probes.py`` run in their own process), the rule it
follows (plain text, printed and written with the verdict) and ``judge(evidence) -> Verdict``, the code of
that rule. The claim-group modules (compilation, speed, multidevice, input, dynamic) register them; the
suite (``claims/suite.py``) runs the union of their runs once, so two claims sharing a run share its
process and record.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from twinbench.spec import PRESETS, RunSpec, SpecError, from_preset, validate, with_precision

SUPPORTED, CONTRADICTED, DEPENDS, NOT_MEASURABLE = "supported", "contradicted", "depends", "not measurable"
VERDICTS = (SUPPORTED, CONTRADICTED, DEPENDS, NOT_MEASURABLE)
#: GPT presets from small to large: the "bigger" point of a claim that compares sizes is the next one.
GPT_LADDER = ("tiny", "small", "gpt2-124m", "gpt-350m")


@dataclass
class Verdict:
    """What a rule concluded: the verdict word, one sentence saying why (with the threshold where it
    flips for ``depends``), the numbers it used, and what the measurement cannot show here."""

    verdict: str
    finding: str
    numbers: dict[str, Any] = field(default_factory=dict)
    caveat: str = ""


@dataclass(frozen=True)
class Setup:
    """Where and how big the suite measures: presets, run lengths, the planned training run."""

    quick: bool = True
    gpt: str = "tiny"  # the GPT preset of most runs
    bert: str = "bert-tiny"  # the BERT fine-tuning preset (C1, C3, C17, C18)
    plan_steps: int = 20000  # a full training run, for compile shares and break-even verdicts
    top: dict[str, Any] = field(default_factory=dict)  # RunSpec fields for every run (--trace)

    @property
    def big(self) -> str:
        """The next larger GPT preset (the gpt preset itself at the top of the ladder)."""
        i = GPT_LADDER.index(self.gpt) if self.gpt in GPT_LADDER else len(GPT_LADDER) - 1
        return GPT_LADDER[min(i + 1, len(GPT_LADDER) - 1)]

    def lengths(self, preset: str) -> dict[str, Any]:
        """Run length of a preset in this mode: the preset's own for the smallest, shorter for larger."""
        steps, warmup = PRESETS[preset][1].steps, PRESETS[preset][1].warmup
        if preset != "tiny":  # larger presets: enough steps for a steady median, no more
            steps, warmup = (min(steps, 12), min(warmup, 3)) if self.quick else (min(steps, 20), min(warmup, 5))
        return {"steps": steps, "warmup": warmup}

    def spec(self, framework: str, strategy: str, preset: str | None = None, **over: Any) -> RunSpec:
        """A validated RunSpec of a registered strategy (the same checks as ``twinbench compare``)."""
        from twinbench.strategies import registry

        preset = preset or self.gpt
        over = {**self.lengths(preset), **over}
        s = validate(with_precision(from_preset(preset, over, framework=framework, strategy=strategy, **self.top)))
        registry.get(s.framework, s.strategy)
        registry.check_devices(s)
        return s


@dataclass
class Evidence:
    """What a claim's judge sees: its runs' records by name, its probes' results by name."""

    setup: Setup
    records: dict[str, dict[str, Any]]
    probes: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __getitem__(self, name: str) -> dict[str, Any]:
        return self.records[name]

    def problems(self) -> list[str]:
        """One line per failed run or probe (a judge never sees partial evidence unless it asks)."""
        out = [f"{n} ({r.get('framework')}/{r.get('strategy')}) failed: {r.get('error')}"
               for n, r in self.records.items() if r.get("status") != "ok"]
        out += [f"probe {n} failed: {p.get('error')}" for n, p in self.probes.items() if p.get("status") != "ok"]
        return out


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


CLAIMS: dict[str, Claim] = {}
#: The claim-group modules of this package, in the order of ``shared/claims.md``.
GROUPS = ("compilation", "speed", "multidevice", "input", "dynamic")


def register(claim: Claim) -> Claim:
    CLAIMS[claim.id] = claim
    return claim


def no_runs(setup: Setup) -> dict[str, RunSpec]:
    return {}


def load_all() -> dict[str, Claim]:
    """Every registered claim, C1..C21 in order (importing the group modules registers them)."""
    import importlib

    for group in GROUPS:
        importlib.import_module(f"twinbench.claims.{group}")
    return dict(sorted(CLAIMS.items(), key=lambda kv: int(kv[0][1:])))


def select(only: str | None) -> list[Claim]:
    """The claims of ``--only C1,C7`` (all when None); an unknown id is a one-line SpecError."""
    claims = load_all()
    if not only:
        return list(claims.values())
    ids = [x.strip().upper() for x in only.split(",") if x.strip()]
    unknown = [x for x in ids if x not in claims]
    if unknown or not ids:
        raise SpecError(f"--only: unknown claim {', '.join(unknown) or repr(only)}; allowed: {', '.join(claims)}")
    return [claims[x] for x in dict.fromkeys(ids)]


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


def label(r: dict[str, Any]) -> str:
    return f"{r.get('framework')}/{r.get('strategy')}"


def describe(spec: RunSpec) -> str:
    """One short line saying what a run is: strategy, preset, and the shape fields that matter."""
    m, t = spec.model, spec.train
    parts = [f"{spec.framework}/{spec.strategy}", spec.preset, f"L{m.layers} d{m.d_model}", f"b{t.batch}",
             f"seq {t.seq}", f"{t.steps} steps"]
    if spec.devices > 1:
        parts.append(f"{spec.devices} devices")
    if t.slow_input:
        parts.append(f"slow-input {t.slow_input:g} ms")
    if m.mask_impl != "where":
        parts.append(f"mask {m.mask_impl}")
    return ", ".join(parts)
