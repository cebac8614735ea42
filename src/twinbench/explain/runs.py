"""Which runs ``twinbench explain A B`` means, and which of them must (re-)run with ``--explain``.

A run is ``framework:strategy`` (run now, with the command's spec flags) or ``RESULTS_DIR:framework/strategy``
(a record of an earlier results directory; re-run with the same spec when it lacks the trace or the timing).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from twinbench.record import read_records
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
    try:
        every, _ = read_records(path)
    except OSError as e:
        raise SpecError(f"{arg}: cannot read {path} ({e})") from None
    records = [r for r in every if f"{r.get('framework')}/{r.get('strategy')}" == name]
    if not records:
        raise SpecError(f"{arg}: {where} has no run {name}")
    r = records[-1]
    try:
        return RunSpec.from_dict(r["spec"]), r
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise SpecError(f"{arg}: its record carries no readable spec") from e


def _same_code(given: str, named: str, default: str, flag: str) -> bool:
    """Whether the user's ``given`` FILE.py[:NAME] is the file and function a record ``named``."""
    from twinbench.byo import UserModelError, split_ref

    try:
        path, fn = split_ref(given, default, flag)
    except UserModelError:
        return False
    where, _, name = named.rpartition(":")
    try:
        return Path(path).resolve() == Path(where or named).resolve() and fn == (name or default)
    except OSError:
        return False


def check_code(arg: str, spec: RunSpec, model: str | None, jax_model: str | None) -> list[str]:
    """Before a record's spec is run again: the user's own code it names (``--model``/``--jax-model``) runs only
    when the user named the same file on the command line (a results folder from someone else must never run
    their Python). Returns the lines saying what will run; raises SpecError otherwise."""
    said = []
    for flag, named, given, default in (("--model", spec.user_model, model, "build"),
                                        ("--jax-model", spec.user_jax_model, jax_model, "build_jax")):
        if not named:
            continue
        if not given or not _same_code(given, named, default, flag):
            raise SpecError(f"{arg}: re-running this record would run {named}, code named by the record and not "
                            f"by you; explain runs no code a results folder names: give {flag} {named} on the "
                            "command line to allow it" + (f" (you gave {flag} {given})" if given else ""))
        said.append(f"  running your {flag} {given} (named on the command line, the same file as the record's)")
    return said


def is_results_arg(arg: str) -> bool:
    where, sep, name = arg.rpartition(":")
    return bool(sep and where and "/" in name)


def for_explain(spec: RunSpec, trace_dir: Path) -> RunSpec:
    """The same measured run (same run_id) with a trace and explain's timing after the measured steps."""
    return dataclasses.replace(spec, trace_dir=str(trace_dir.resolve()), explain=True)
