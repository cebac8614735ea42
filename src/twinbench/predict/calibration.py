"""Measured steps the predictions are checked against, and the factor a user's own measurements fit.

``calibration.jsonl`` (shipped beside this file) holds one measured step per line::

    {"device": "tpu-v5e", "framework": "jax", "strategy": "jit+bf16", "preset": "gpt2-124m", "batch": 8,
     "seq": 1024, "step_ms": 108.1, "source": "...", "date": "YYYY-MM-DD"}

plus optional ``attention_impl``, ``predicted_ms`` (what this model predicted for it, written by
``benchmarks/predict_validate.py --write``: the error bar of a prediction is how far the predictions of
its kind, platform x framework, were from their measured steps), ``memory_bytes`` (the step's measured peak:
on a TPU the compiled program's, arguments + temporaries + code, as XLA assigns them) and
``predicted_memory_bytes`` (this model's estimate of it). Adding a point is adding a line.

``--calibrate results.jsonl`` turns a user's twinbench records into points of the same shape (their
``device`` names the datasheet, :func:`points_from_records`); the factor fitted to them (the geometric mean of
measured / predicted, per platform x framework) scales the predictions of that kind.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from twinbench.predict.datasheets import DATASHEETS, for_label

if TYPE_CHECKING:
    from twinbench.record import Record


@dataclass
class Point:
    """One measured step."""

    device: str
    framework: str
    strategy: str
    preset: str
    batch: int
    seq: int
    step_ms: float
    source: str = ""
    date: str = ""
    attention_impl: str = "default"
    predicted_ms: float | None = None
    memory_bytes: float | None = None
    predicted_memory_bytes: float | None = None
    compiled_ms: float | None = None  #: what ``predict --compile`` predicted (a TPU point of a JAX strategy)

    def overrides(self) -> dict[str, int]:
        """The flags its run set beyond its preset: batch and seq, and the context raised to the sequence where
        the preset's is shorter (a run of a longer sequence had to raise it)."""
        from twinbench.models.family import presets

        out = {"batch": self.batch, "seq": self.seq}
        model = presets().get(self.preset, (None,))[0]
        if model is not None and self.seq > model.context:
            out["context"] = self.seq
        return out

    @property
    def platform(self) -> str:
        return DATASHEETS[self.device].platform if self.device in DATASHEETS else "cpu"

    @property
    def kind(self) -> tuple[str, str]:
        """What the error bar groups by: (platform, framework)."""
        return self.platform, self.framework

    @property
    def error(self) -> float | None:
        """predicted / measured - 1 (positive: predicted slower than measured)."""
        return None if self.predicted_ms is None else self.predicted_ms / self.step_ms - 1.0

    @property
    def compiled_error(self) -> float | None:
        """``compiled_ms`` / measured - 1."""
        return None if self.compiled_ms is None else self.compiled_ms / self.step_ms - 1.0

    @property
    def memory_error(self) -> float | None:
        """predicted / measured peak memory - 1 (positive: predicted more than the step held)."""
        if not self.memory_bytes or self.predicted_memory_bytes is None:
            return None
        return self.predicted_memory_bytes / self.memory_bytes - 1.0

    def to_json(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if v not in (None, "")})


class CalibrationError(ValueError):
    """A calibration file that cannot be read."""


def parse_points(text: str, where: str) -> list[Point]:
    """The points of a calibration JSONL text; a bad line is a one-line error naming it."""
    points = []
    fields = set(Point.__dataclass_fields__)
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            points.append(Point(**{k: v for k, v in row.items() if k in fields}))
        except (ValueError, TypeError) as e:
            raise CalibrationError(f"{where} line {n}: not a calibration point ({e})") from None
    return points


def shipped() -> list[Point]:
    """The measured points shipped in the package."""
    text = resources.files("twinbench.predict").joinpath("calibration.jsonl").read_text()
    return parse_points(text, "calibration.jsonl")


def points_from_records(path: Path, here_label: str | None = None) -> tuple[list[Point], list[str]]:
    """The ``ok`` records of a twinbench results file as points, and one line per record left out (a device
    without a datasheet, a run its record marks as measured on a busy machine). A CPU record is a point of
    ``here`` when its device is this machine's CPU. Each point's ``source`` ends with ``line N`` of ``path``;
    a record whose batch or seq is not a positive integer, or whose step time is not a positive finite number,
    is a :class:`CalibrationError` naming the file and the line."""
    from twinbench.record import read_records

    lines: list[int] = []
    problems: list[str] = []
    records, _ = read_records(path, problems, line_numbers=lines)
    points, skipped = [], [f"{path} {p} (not a record)" for p in problems]
    for r, n in zip(records, lines, strict=True):
        if not r.ok or not r.timing.step_ms:
            continue
        label = str(r.run.device or "")
        if any(str(w).startswith("machine busy") for w in r.warnings):
            skipped.append(f"{label} {r.label()}: measured on a busy machine "
                           "(its record says its timings are not reliable)")
            continue
        name = for_label(label) or ("here" if r.conditions.platform == "cpu" and
                                    (here_label is None or label == here_label) else None)
        if name is None:
            skipped.append(f"{label}: no datasheet")
            continue
        batch, seq, step = r.run.batch, r.run.seq, r.timing.step_ms
        for field_, value in (("batch", batch), ("seq", seq)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise CalibrationError(f"--calibrate {path} line {n}: {field_} {value!r} is not a positive integer")
        if isinstance(step, bool) or not isinstance(step, int | float) or not 0 < step < math.inf:
            raise CalibrationError(f"--calibrate {path} line {n}: step_ms {step!r} is not a positive number")
        points.append(Point(name, r.run.framework, r.run.strategy, r.run.preset or "", batch,
                            seq, round(float(step), 2), source=f"{record_source(r, path)} line {n}",
                            date=(r.speed.peak_measured_at or "")[:10],
                            attention_impl=r.run.attention_impl or "default",
                            memory_bytes=program_peak(r)))
    return points, skipped


def record_source(r: Record, path: Path) -> str:
    """Where a measured point comes from, in words: the machine, the versions, the steps, the file."""
    v = r.conditions.versions
    libs = ", ".join(f"{k} {v[k]}" for k in ("jax", "torch", "torchax") if v.get(k))
    return (f"twinbench compare on {r.run.device} ({r.conditions.platform}), {libs}, "
            f"{r.run.steps} steps ({Path(path).parent.name}/{Path(path).name})")


def program_peak(record: Record) -> float | None:
    """The step's peak memory as its compiled program assigns it (arguments + outputs not aliased + temporaries
    + code, from the record's ``memory_breakdown``), or None. A TPU's allocator peak leaves the temporaries out,
    so the record's ``peak_mem_bytes`` is this figure only when its source says so."""
    try:
        c = msgspec.convert(record.memory.breakdown, _Breakdown).compiled
    except msgspec.ValidationError:  # a breakdown of another shape (a hand-made record): no figure
        return None
    if c is None:
        return None
    return float(c.argument + c.output - c.alias + c.temp + (c.generated_code or 0))


class _Sizes(msgspec.Struct):
    """The compiled program's sizes a record's ``memory_breakdown`` keeps (measure/memory.py: ``compiled``)."""

    argument: int | float
    output: int | float
    alias: int | float
    temp: int | float
    generated_code: int | float | None = None


class _Breakdown(msgspec.Struct):
    """The part of a record's ``memory_breakdown`` read here (its other parts are left out when decoded)."""

    compiled: _Sizes | None = None


def fit(points: list[Point]) -> dict[tuple[str, str], float]:
    """Per (platform, framework): the factor measured / predicted (geometric mean) of the predicted points."""
    logs: dict[tuple[str, str], list[float]] = {}
    for p in points:
        if p.predicted_ms:
            logs.setdefault(p.kind, []).append(math.log(p.step_ms / p.predicted_ms))
    return {k: math.exp(sum(v) / len(v)) for k, v in logs.items()}


@dataclass(frozen=True)
class ErrorBar:
    """How far the predictions of a kind were from what was measured: how many, each error (a share, signed),
    the largest in size."""

    n: int
    errors: list[float]
    max_abs: float


def error_bar(points: list[Point], kind: tuple[str, str], memory: bool = False,
              compiled: bool = False) -> ErrorBar | None:
    """How far the predictions of ``kind`` were from their measured steps (``memory``: from their measured peak
    memory; ``compiled``: those of ``predict --compile``): n, the errors, the largest."""
    errors = [e for p in points if p.kind == kind and (
        e := p.memory_error if memory else p.compiled_error if compiled else p.error) is not None]
    if not errors:
        return None
    return ErrorBar(n=len(errors), errors=[round(e, 3) for e in errors], max_abs=max(abs(e) for e in errors))
