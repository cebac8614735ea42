"""The step time ``twinbench doctor --trace DIR`` measured without the profiler, read from ``DIR/trace.json``.

A profiler slows the step it records (``torch.profiler`` with shapes costs per op, so rows with many small ops
grow most): a trace's own step is not the script's step. The doctor times the script's steady steps with the
traced ones left out, and writes that beside the trace (``untraced_step_ms``, with ``traced_step_ms``, the
traced steps' own wall time). explain shows it as the run's measured step, says how much the profiler added,
and, for a pair, the gap without the profiler.

Beside the timing, the doctor records what decides whether the trace may name a cause (read by
:func:`conditions`): the load other processes put on the machine (``load``: ``others_cores``, ``cores``,
``busy``), how the step ran (``step_kind``), the JAX primitives it dispatched one by one a step
(``eager_ops_per_step``) and what compiled after step 1 (``compiles``: :func:`compile_log`). A JAX trace folder holds the step's compiled HLO as ``step.hlo.txt``
(:func:`step_hlo`), which explain reads without ``--hlo``.

The file is data: read with :mod:`json` (never executed), only when small (a Chrome trace that happens to be
named ``trace.json`` is not the doctor's, and is left alone), each field a positive number or absent. A
malformed one is one note; the trace itself is read all the same.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

NAME = "trace.json"
MAX_BYTES = 1 << 16  # the doctor's trace.json is a few hundred bytes; anything larger is someone else's file
PROFILER_NOTE = 0.10  # the profiler's share of the traced step above which each run says so
FIELDS = ("untraced_step_ms", "traced_step_ms", "untraced_steps", "traced_steps", "untraced_spread")


def candidates(arg: str, trace: Path) -> list[Path]:
    """Where the doctor's ``trace.json`` of a trace would be: in the folder given, in the trace file's folder,
    and, for a JAX profile under ``DIR/plugins/profile/RUN/``, in ``DIR``."""
    out = [Path(arg) / NAME] if Path(arg).is_dir() else []
    folder = trace.parent
    out.append(folder / NAME)
    if folder.parent.name == "profile" and folder.parent.parent.name == "plugins":
        out.append(folder.parent.parent.parent / NAME)
    unique: dict[Path, Path] = {}  # each place once (a folder given and the trace's own folder may be one)
    for p in out:
        if p.resolve() != trace.resolve():
            unique.setdefault(p.resolve(), p)
    return list(unique.values())


def load(path: Path) -> dict[str, Any] | None:
    """``path``'s content when it is a doctor ``trace.json`` (a small JSON object naming the ``framework``, not
    a Chrome trace), else None; :class:`OSError` / :class:`ValueError` when a small file cannot be read or is
    not JSON."""
    if path.name != NAME or path.stat().st_size > MAX_BYTES:
        return None  # a Chrome trace named trace.json is larger than this: not the doctor's
    data = json.loads(path.read_bytes())
    return data if isinstance(data, dict) and "framework" in data and "traceEvents" not in data else None


def is_doctor_file(path: Path) -> bool:
    """Whether ``path`` is the doctor's ``trace.json`` (not a trace: a folder's search passes over it)."""
    try:
        return load(path) is not None
    except (OSError, ValueError):
        return False


def read(arg: str, trace: Path) -> tuple[dict[str, float] | None, str | None]:
    """(the doctor's timing of this trace, a note): the timing when a doctor ``trace.json`` beside the trace
    has an ``untraced_step_ms``; the note when one is there but malformed, or says the step could not be
    timed without the profiler. (None, None) when there is none."""
    for path in candidates(arg, trace):
        if not path.is_file():
            continue
        try:
            data = load(path)
        except (OSError, ValueError) as e:
            return None, f"{path}: not the JSON twinbench doctor writes ({type(e).__name__}); its step time unused"
        if data is not None:  # else someone else's JSON
            return validate(path, data)
    return None, None


def validate(path: Path, data: dict[str, Any]) -> tuple[dict[str, float] | None, str | None]:
    """The timing fields of a doctor ``trace.json``, each a positive finite number or absent."""
    out: dict[str, float] = {}
    for k in FIELDS:
        v = data.get(k)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            return None, f"{path}: {k} is {json.dumps(v)[:40]}, not a number of ms or steps; its step time unused"
        out[k] = float(v)
    if not out.get("untraced_step_ms"):
        if out.get("traced_step_ms"):
            return None, (f"{path}: twinbench doctor could not time the step without the profiler (too few steps "
                          "ran outside the trace: --steps N larger); the traced step is the only one")
        return None, None
    return out, None


def notes(e: dict[str, Any]) -> list[str]:
    """One run's line when the profiler added more than ``PROFILER_NOTE`` to its step."""
    m = e.get("measured")
    if not m:
        return []
    traced, untraced = m.get("traced_step_ms") or e["traced_step_ms"], m["untraced_step_ms"]
    if traced <= untraced * (1 + PROFILER_NOTE):
        return []
    return [f"the profiler added {traced / untraced - 1:.0%} to this run's step (traced {traced:.1f} ms, untraced "
            f"{untraced:.1f} ms, measured by twinbench doctor); rows with many small ops grow most"]


def gap_line(a: dict[str, Any], b: dict[str, Any]) -> str:
    """The gap without the profiler when both traces have the doctor's untraced step ('' otherwise)."""
    ma, mb = a.get("measured"), b.get("measured")
    if not ma or not mb:
        return ""
    traced = b["traced_step_ms"] - a["traced_step_ms"]
    return (f"measured without the profiler the gap is {mb['untraced_step_ms'] - ma['untraced_step_ms']:+.1f} ms "
            f"(traced: {traced:+.1f} ms)")


STEP_HLO = "step.hlo.txt"


def step_hlo(arg: str) -> str | None:
    """The doctor's ``step.hlo.txt`` for a trace argument: in the folder given, or beside the trace file, or
    (a JAX profile under ``DIR/plugins/profile/RUN/``) in ``DIR``; None when there is none."""
    p = Path(arg)
    places = [p] if p.is_dir() else [p.parent]
    if p.parent.parent.name == "profile" and p.parent.parent.parent.name == "plugins":
        places.append(p.parent.parent.parent.parent)
    for d in places:
        if (d / STEP_HLO).is_file():
            return str(d / STEP_HLO)
    return None


def conditions(arg: str, trace: Path) -> dict[str, Any]:
    """What twinbench doctor recorded of the run beside its trace (see the module): ``load`` (a dict of
    ``others_cores``, ``cores``, ``busy``), ``step_kind``, ``eager_ops_per_step``; a field of the wrong type is
    left out, {} when there is no doctor ``trace.json``."""
    for path in candidates(arg, trace):
        if not path.is_file():
            continue
        try:
            data = load(path)
        except (OSError, ValueError):
            return {}
        if data is None:
            continue
        out: dict[str, Any] = {}
        ld = data.get("load")
        if isinstance(ld, dict) and _count(ld.get("cores")) and _number(ld.get("others_cores")) \
                and isinstance(ld.get("busy"), bool):
            out["load"] = {"others_cores": float(ld["others_cores"]), "cores": int(ld["cores"]), "busy": ld["busy"]}
        if isinstance(data.get("step_kind"), str):
            out["step_kind"] = data["step_kind"][:40]
        if _number(data.get("eager_ops_per_step")):
            out["eager_ops_per_step"] = float(data["eager_ops_per_step"])
        log = compile_log(data.get("compiles"))
        if log:
            out["compiles"] = log
        return out
    return {}


def compile_log(v: Any) -> dict[str, Any]:
    """The doctor's log of what compiled after step 1 (``compiles`` in its ``trace.json``: ``steps``,
    ``compiles``, ``compile_s``, ``retraces``, ``causes``, ``shapes``, ``finding``), each field of the right type
    or left out; {} when there is none."""
    if not isinstance(v, dict):
        return {}
    out: dict[str, Any] = {k: int(v[k]) for k in ("steps", "compiles", "retraces")
                           if _number(v.get(k)) and float(v[k]).is_integer()}
    if _number(v.get("compile_s")):
        out["compile_s"] = float(v["compile_s"])
    causes = v.get("causes")
    if isinstance(causes, dict):
        out["causes"] = {str(k)[:40]: int(n) for k, n in list(causes.items())[:8]
                         if _number(n) and float(n).is_integer()}
    shapes = v.get("shapes")
    if isinstance(shapes, list):
        out["shapes"] = [s[:200] for s in shapes[:3] if isinstance(s, str)]
    if isinstance(v.get("finding"), str) and re.fullmatch(r"[a-z][a-z0-9-]{0,40}", v["finding"]):
        out["finding"] = v["finding"]
    return out if out.get("compiles") or out.get("retraces") else {}


def _number(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and v >= 0


def _count(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, int) and v > 0
