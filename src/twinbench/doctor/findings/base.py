"""What every finding shares: the :class:`Finding` record, the observations type, per-step rates and units."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

SEVERITIES = ("error", "warning", "info")  # "warning or worse" decides the exit code
MIN_STEADY_STEPS = 2  # per-step findings need at least this many steady steps to say anything

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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


Obs = dict[str, Any]


def _per_step(obs: Obs, key: str) -> float | None:
    """The per-steady-step rate of a counter, or None when there were too few steady steps."""
    if obs.get("steady_steps", 0) < MIN_STEADY_STEPS:
        return None
    return float(obs.get("per_step", {}).get(key, 0.0))


def _steady_notes(obs: Obs, kind: str) -> list[dict[str, Any]]:
    t0 = obs.get("steady_from_t")
    notes = obs.get("notes", {}).get(kind, [])
    return [] if t0 is None else [n for n in notes if n["t"] >= t0]


def _sites(sites: dict[str, int], n: int = 3) -> str:
    return "; ".join(f"{s} x{c}" for s, c in list(sites.items())[:n])


def _mib(b: float) -> str:
    return f"{b / 2**20:.2f} MiB" if b >= 2**20 else f"{b / 2**10:.1f} KiB"


def _iter_ms(obs: Obs) -> float:
    """The one step definition every percentage uses: the mean steady iteration, from one step's start to
    the next (per-step figures are means over the same iterations, so a share can never pass 100%)."""
    return float(obs.get("iter_ms") or obs.get("step_ms") or 0.0)


def _step_location(obs: Obs) -> str:
    """The step function's definition (``file:line name``) from the doctor's key for it."""
    key = obs.get("info", {}).get("step_def") or ""
    parts = key.split(":")
    if len(parts) >= 4 and parts[-2].isdigit():
        return f"{':'.join(parts[1:-2])}:{parts[-2]} (def {parts[-1]})"
    return ""
