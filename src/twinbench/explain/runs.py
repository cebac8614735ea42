"""Which runs ``twinbench explain A B`` means, and which of them must (re-)run with ``--explain``.

A run is ``framework:strategy`` (run now, with the command's spec flags) or ``RESULTS_DIR:framework/strategy``
(a record of an earlier results directory; re-run with the same spec when it lacks the trace or the timing).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from twinbench.folder_io import terminal
from twinbench.record import Record, as_record, read_records
from twinbench.spec import RunSpec, SpecError, validate
from twinbench.spec_sections import flat_spec

RESULTS = "results.jsonl"


def needs_run(r: Record | None) -> bool:
    """A record explain cannot read as it is: none, failed, no trace, no timing, or a JAX profile without the
    compiled HLO text that names its ops."""
    from twinbench.explain.gap import needs_hlo

    if r is None:
        return True
    r = as_record(r)
    return (not r.ok or not r.trace.path or not r.explain.timing or not Path(r.trace.path).exists()
            or (not r.explain.hlo_path and needs_hlo(r.trace.path)))


#: What a re-run takes from a record: what defines the measurement (the model and training config as a whole:
#: its shape, data and checkpoint are read, never written; the framework, strategy and their settings) and the
#: user's model, which :func:`check_code` lets run only when the user names it too (its initial weights are then
#: written anew from it: the record's ``user_dir`` is a path, never taken). Nothing else: where to write
#: (``save_weights``, ``cache_dir``, ``trace_dir``), what to connect to or how many processes to start
#: (``num_processes``, ``process_id``, ``coordinator``) come from the command line, or stay off.
FROM_RECORD = frozenset({
    "model", "train", "framework", "strategy", "preset", "devices", "threads", "compile_cache", "scan_k",
    "remat_policy", "scan_unroll", "xla_cpu_flags", "host_malloc", "attention_impl", "splash_layout", "repeat",
    "no_preflight",
    "user_model", "user_jax_model",
})
#: fields a re-run never takes from a record but takes from explain's command line when the user gives them
FROM_COMMAND_LINE = ("save_weights", "num_processes", "process_id", "coordinator")
#: the files a record's train section names (read by the run): a record never picks a path, so a re-run takes
#: each from the command line, and is refused (one line naming the flag) when the record names one you did not
RECORD_PATHS = ("data", "init_from")


def _paths(d: Any, named: Mapping[str, object] | None) -> tuple[dict[str, str], list[str]]:
    """The train section's paths a re-run uses (the command line's) and the flags the record needs but the
    command line does not give (``named``: the command line's spec flags as given, whichever flags)."""
    train = d.get("train") if isinstance(d, dict) else None
    train = train if isinstance(train, dict) else {}
    use, missing = {}, []
    for k in RECORD_PATHS:
        given = (named or {}).get(k)
        if given:
            use[k] = str(Path(str(given)).resolve())
        elif train.get(k):
            use[k] = ""
            missing.append(f"--{k.replace('_', '-')}")
    return use, missing


def spec_from_record(arg: str, d: Any, named: Mapping[str, object] | None = None) -> tuple[RunSpec, list[str]]:
    """The spec a re-run of a record's ``spec`` dict may have (:data:`FROM_RECORD`, plus the fields of
    :data:`FROM_COMMAND_LINE` the user gave in ``named``) and the lines naming what of the record was left out.
    Raises SpecError on a spec that is not one; :func:`runnable` validates it before a re-run."""
    if not isinstance(d, dict):
        raise SpecError(f"{arg}: its record carries no readable spec")
    d, default = flat_spec(d), RunSpec().flat()  # a record's spec of any version, in the flat form
    kept = {k: v for k, v in d.items() if k in FROM_RECORD}
    paths, _ = _paths(kept, named)
    if paths and isinstance(kept.get("train"), dict):  # data, init_from: the command line's, never the record's
        kept["train"] = {**kept["train"], **paths}
    left = [k for k, v in d.items() if k not in FROM_RECORD and v != default.get(k)
            and k not in ("explain", "trace_dir")]  # explain sets these two itself
    for k in FROM_COMMAND_LINE:
        if (named or {}).get(k) is not None:
            kept[k] = named[k]  # type: ignore[index]
            if k in left:
                left.remove(k)
    try:
        spec = RunSpec.from_dict(kept)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise SpecError(f"{arg}: its record carries no readable spec ({type(e).__name__})") from None
    notes = []
    if left:
        notes.append(f"  {arg}: not taken from the record: {', '.join(sorted(left))} (a record is data: a "
                     "re-run writes, listens and starts processes only where the command line says)")
    return spec, notes


def runnable(arg: str, spec: RunSpec) -> RunSpec:
    """``spec`` validated before it runs again (a record's values are checked as a flag's would be)."""
    from twinbench.plan import check_inputs

    try:
        spec = validate(spec)
        check_inputs(spec)  # the files the command line named for it, checked here, not in the worker
        return spec
    except SpecError as e:
        raise SpecError(f"{arg}: its record's spec is not runnable: {e}") from None
    except (TypeError, ValueError, AttributeError) as e:  # a field of the wrong type
        raise SpecError(f"{arg}: its record's spec is not runnable ({type(e).__name__}: {e})") from None


def from_results(arg: str, named: Mapping[str, object] | None = None) -> tuple[RunSpec, Record, list[str]]:
    """``DIR:framework/strategy`` -> (the spec a re-run of it may have: :func:`spec_from_record`, its record,
    lines saying what of the record's spec is not used)."""
    where, _, name = arg.rpartition(":")
    path = Path(where) / RESULTS if Path(where).is_dir() else Path(where)
    if not path.exists():
        raise SpecError(f"{arg}: no {RESULTS} in {where}")
    problems: list[str] = []
    try:
        every, bad = read_records(path, problems)
    except OSError as e:
        raise SpecError(f"{arg}: cannot read {path} ({e})") from None
    records = [r for r in every if r.label() == name]
    if not records:  # a record of it may have been rejected (a step_ms of 1e300): say why, not only "no run"
        skipped = f" ({bad} line(s) are not records; first: {problems[0]})" if problems else ""
        raise SpecError(f"{arg}: {where} has no run {terminal(name, 80)}{skipped}")
    r = records[-1]
    if needs_run(r):  # its spec will run again: the files it reads come from the command line alone
        _, missing = _paths(flat_spec(r.spec) if isinstance(r.spec, dict) else None, named)
        if missing:
            flags = " and ".join(f"{f} FILE" for f in missing)
            raise SpecError(f"{arg}: its record trains on a file it names ({', '.join(missing)}); a record never "
                            f"picks a file twinbench reads: give {flags} on the command line to re-run it")
    spec, notes = spec_from_record(arg, r.spec, named)
    return spec, r, notes


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
    for flag, named, given, default in (("--model", spec.user.user_model, model, "build"),
                                        ("--jax-model", spec.user.user_jax_model, jax_model, "build_jax")):
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
    return spec.evolve(trace_dir=str(trace_dir.resolve()), explain=True)
