"""What every finding shares: the :class:`Finding` record, the observations type, per-step rates and units."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twinbench.doctor.observations import Note, Observations, typed
from twinbench.doctor.summary import MIN_STEADY_STEPS  # per-step findings need this many steady steps

SEVERITIES = ("error", "warning", "info")  # "warning or worse" decides the exit code
#: what a finding is about, in the order findings of one severity are listed: speed first (the user's question),
#: the machine's load next, memory alone last
ABOUT = ("script", "speed", "machine", "memory")
def rank(about: str) -> int:
    """The order of findings of one severity: what they are about, the script's failures and speed together."""
    return max(ABOUT.index(about) - 1, 0)


ID = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)+")

JAX_DOCS = "https://docs.jax.dev/en/latest"
TORCH_DOCS = "https://docs.pytorch.org/docs/stable"


@dataclass
class Finding:
    id: str
    severity: str  # error | warning | info
    title: str  # one line
    evidence: str  # the numbers behind it
    fix: str  # a concrete code change
    doc: str = ""  # where the frameworks document it
    location: str = ""  # the first frame in the user's own files (-> the library frame that did the work)
    caused_by: str = ""  # the id of the finding that causes this one (its fix comes first), "" when none

    def __post_init__(self) -> None:  # a misspelled id or severity fails where the finding is made
        if self.id not in REGISTRY:
            raise ValueError(f"finding id {self.id!r} is not registered (findings.base.finding); "
                             f"registered: {', '.join(REGISTRY)}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"finding {self.id}: severity {self.severity!r} is not one of {SEVERITIES}")
        if self.caused_by and self.caused_by not in REGISTRY:
            raise ValueError(f"finding {self.id}: caused_by {self.caused_by!r} is not registered")


@dataclass(frozen=True)
class Kind:
    """One finding, declared once where its check is defined (:func:`finding`): the ids, the check list, the docs
    table (docs/doctor-findings.md) and the examples test are all read from these."""
    id: str
    check: Callable[[Any], Finding | None]
    severity: str  # the severities it can have, as the docs table says them
    about: str  # one of ABOUT
    threshold: str  # the docs row: when it fires
    fix: str  # the docs row: the fix in short
    example: str = ""  # examples/doctor/<example>.py must get it (tests/doctor/test_doctor_examples.py)
    tested_by: str = ""  # where it is tested instead, when no example script can show it
    locate: bool = True  # a finding with no line of its own points at the step's definition


#: every finding, by id, in the order their modules register them (findings/__init__.py imports them all)
REGISTRY: dict[str, Kind] = {}


def finding(id: str, *, severity: str, about: str, threshold: str, fix: str, example: str = "",
            tested_by: str = "", locate: bool = True) -> Callable[[Callable[[Any], Finding | None]],
                                                                  Callable[[Any], Finding | None]]:
    """Register the decorated check as finding ``id``: its one declaration. The check may only make findings of
    that id (checked on every call); an id registered twice, misspelled (not lower-case words joined by ``-``),
    with no example nor the place it is tested, fails at import."""
    if not ID.fullmatch(id) or id in REGISTRY:
        raise ValueError(f"finding {id!r}: " + ("registered twice" if id in REGISTRY else "not a valid id"))
    if about not in ABOUT or re.match(r"[a-z]*", severity).group() not in SEVERITIES:
        raise ValueError(f"finding {id!r}: about {about!r} / severity {severity!r}")
    if not (example or tested_by):
        raise ValueError(f"finding {id!r}: name its example script or where it is tested")

    def register(check: Callable[[Any], Finding | None]) -> Callable[[Any], Finding | None]:
        @functools.wraps(check)
        def checked(obs: Any) -> Finding | None:
            f = check(typed(obs))  # a dict (JSON, a test's) read as the declared observations
            if f is not None and f.id != id:
                raise ValueError(f"{check.__name__} is registered as {id!r} but made a {f.id!r} finding")
            return f

        REGISTRY[id] = Kind(id, checked, severity, about, threshold, fix, example, tested_by, locate)
        return checked

    return register


def docs_table() -> str:
    """The findings table of docs/doctor-findings.md, from the registry (a test keeps the page equal to it)."""
    rows = ["| id | severity | about | threshold | fix (in short) |", "|----|----------|-------|-----------|----------------|"]
    kinds = sorted(REGISTRY.values(), key=lambda k: ABOUT.index(k.about))
    rows += [f"| `{k.id}` | {k.severity} | {k.about} | {k.threshold} | {k.fix} |" for k in kinds]
    return "\n".join(rows)


#: what a check reads: the typed observations (a dict from JSON is converted where a check is called)
Obs = Observations


def _per_step(obs: Obs, key: str) -> float | None:
    """The per-steady-step rate of a counter (a misspelled name raises), or None when there were too few steady
    steps."""
    if obs.steady_steps < MIN_STEADY_STEPS:
        return None
    return obs.per(key)


def _steady_notes(obs: Obs, kind: str) -> list[Note]:
    t0 = obs.steady_from_t
    notes = obs.noted(kind)
    return [] if t0 is None else [n for n in notes if n.t >= t0]


def _sites(sites: dict[str, int], n: int = 3) -> str:
    return "; ".join(f"{s} x{c}" for s, c in list(sites.items())[:n])


def _mib(b: float) -> str:
    return f"{b / 2**20:.2f} MiB" if b >= 2**20 else f"{b / 2**10:.1f} KiB"


def _iter_ms(obs: Obs) -> float:
    """The one step definition every percentage uses: the mean steady iteration, from one step's start to
    the next (per-step figures are means over the same iterations, so a share can never pass 100%)."""
    return float(obs.iter_ms or obs.step_ms or 0.0)


def _step_location(obs: Obs) -> str:
    """The step function's definition (``file:line name``) from the doctor's key for it."""
    key = obs.info.step_def or ""
    parts = key.split(":")
    if len(parts) >= 4 and parts[-2].isdigit():
        return f"{':'.join(parts[1:-2])}:{parts[-2]} (def {parts[-1]})"
    return ""
