"""Which runs ``twinbench explain A B`` means, and which of them must (re-)run with ``--explain``.

A run is ``framework:strategy`` (run now, with the command's spec flags) or ``RESULTS_DIR:framework/strategy``
(a record of an earlier results directory; re-run with the same spec when it lacks the trace or the timing).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from twinbench.record import read_jsonl
from twinbench.spec import RunSpec, SpecError

RESULTS = "results.jsonl"


def needs_run(r: dict[str, Any] | None) -> bool:
    """A record explain cannot read as it is: none, failed, no trace, or no timing."""
    return (r is None or r.get("status") != "ok" or not r.get("trace_path") or not r.get("explain_timing")
            or (r.get("framework") == "jax" and not r.get("explain_hlo_path"))
            or not Path(r["trace_path"]).exists())


def from_results(arg: str) -> tuple[RunSpec, dict[str, Any]]:
    """``DIR:framework/strategy`` -> (its spec, its record)."""
    where, _, name = arg.rpartition(":")
    path = Path(where) / RESULTS if Path(where).is_dir() else Path(where)
    if not path.exists():
        raise SpecError(f"{arg}: no {RESULTS} in {where}")
    records = [r for r in read_jsonl(path) if f"{r.get('framework')}/{r.get('strategy')}" == name]
    if not records:
        raise SpecError(f"{arg}: {where} has no run {name}")
    r = records[-1]
    try:
        return RunSpec.from_dict(r["spec"]), r
    except (KeyError, TypeError) as e:
        raise SpecError(f"{arg}: its record carries no readable spec") from e


def is_results_arg(arg: str) -> bool:
    where, sep, name = arg.rpartition(":")
    return bool(sep and where and "/" in name)


def for_explain(spec: RunSpec, trace_dir: Path) -> RunSpec:
    """The same measured run (same run_id) with a trace and explain's timing after the measured steps."""
    return dataclasses.replace(spec, trace_dir=str(trace_dir.resolve()), explain=True)
