"""``twinbench explain A B --try 'B:FLAG'``: run one side again with one named option, measured as any run is
(fresh process, same steps, then traced and timed by parts), and show which rows of its breakdown moved.

A FLAG is one of

- an XLA flag, ``--xla_...=VALUE`` (JAX runs): added to the worker's ``XLA_FLAGS``;
- a spec field, ``NAME=VALUE`` or ``--name=VALUE`` (any flag of ``compare``: ``threads=1``,
  ``attention-impl=chunked``, ``xla-cpu-flags=xla-default``...);
- an environment variable, ``env:NAME=VALUE`` (``env:OMP_NUM_THREADS=1``...), set for the worker.

The side is run again first, then the variant, one after the other in fresh processes (the two steps are
measured in the same conditions, not against a record of another time), both into their own results
directory ``OUT/try-N`` (the variant's spec may have the same run id as the side: an XLA flag or an
environment variable is not part of the spec).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from twinbench.explain import gap, why
from twinbench.explain.result import Explained, Tried
from twinbench.record import Record

MOVED = 0.02  # a row moved when it changed by more than this share of the side's step (and 0.2 ms)


class TryError(ValueError):
    """A --try that cannot be understood: one line, exit 2."""


def parse(arg: str) -> tuple[int, str, str, str]:
    """``'B:--xla_x=1'`` -> (side index, kind: xla|spec|env, name, value)."""
    side, sep, flag = arg.partition(":")
    if not sep or side.upper() not in ("A", "B") or not flag:
        raise TryError(f"--try {arg!r}: write A:FLAG or B:FLAG (an XLA flag, NAME=VALUE of the spec, or env:NAME=VALUE)")
    idx = 0 if side.upper() == "A" else 1
    if flag.startswith("env:"):
        name, eq, value = flag[4:].partition("=")
        if not eq or not name:
            raise TryError(f"--try {arg!r}: env:NAME=VALUE")
        return idx, "env", name, value
    if flag.startswith("--xla_"):
        return idx, "xla", flag.split("=", 1)[0], flag
    name, eq, value = flag.lstrip("-").partition("=")
    if not eq:
        raise TryError(f"--try {arg!r}: a spec option needs a value (NAME=VALUE)")
    return idx, "spec", name.replace("-", "_"), value


#: spec options a --try never varies, and why: where a run writes and what it connects to come from explain's
#: own command line; a checkpoint sets the model's whole shape (compare --init-from measures it)
NOT_VARIED = {
    "save_weights": "where a run writes comes from the command line (compare --save-weights)",
    "num_processes": "a re-run starts no other processes", "process_id": "a re-run starts no other processes",
    "coordinator": "a re-run connects to nothing",
    "init_from": "a checkpoint sets the model's whole shape: measure it with compare --init-from",
}


def check(arg: str) -> None:
    """A ``--try`` understood before any run: its syntax, and for a spec option its name and the type of its
    value (:class:`TryError` otherwise). :func:`preflight` checks the variant itself once the sides are known."""
    from twinbench.spec import SpecError, option_value

    _, kind, name, value = parse(arg)
    if kind != "spec":
        return
    if name in NOT_VARIED:
        raise TryError(f"--try {arg!r}: {name} is not varied by --try ({NOT_VARIED[name]})")
    try:
        option_value(name, value)
    except SpecError as e:
        raise TryError(f"--try {arg!r}: {e}") from None


def preflight(arg: str, sides: list[Any]) -> Any:
    """The variant ``arg`` makes of its side (one of ``sides``, the explained pair's RunSpecs), through the same
    checks as a run of ``compare`` before any run starts: validation, the strategy's registry, the files it
    reads (plan.check_inputs), the memory its shape needs (limits.check_host). An XLA flag on a torch side is
    refused (it would change nothing it measures). Returns the variant's spec; :class:`TryError` otherwise."""
    from twinbench import backends
    from twinbench.limits import check_host
    from twinbench.plan import check_inputs
    from twinbench.spec import SpecError
    from twinbench.strategies import registry

    idx, kind, name, value = parse(arg)
    side = sides[idx]
    if kind == "xla" and not backends.get(side.framework).READS_XLA_FLAGS:
        raise TryError(f"--try {arg!r}: an XLA flag changes JAX runs only; side {'AB'[idx]} is "
                       f"{side.framework}/{side.strategy.name}")
    spec = variant(side.to_dict(), kind, name, value)
    try:
        registry.get(spec.framework, spec.strategy.name)
        registry.check_devices(spec)
        check_inputs(spec)
        check_host([spec])
    except SpecError as e:
        raise TryError(f"--try {arg}: {e}") from None
    return spec


def variant(spec_dict: dict[str, Any], kind: str, name: str, value: str) -> Any:
    """The spec of the variant run (spec options applied; XLA flags and env leave it as it is); ``spec_dict``:
    ``RunSpec.to_dict``'s form, which ``flat_spec`` reads whatever its version."""
    from twinbench.spec import RunSpec, SpecError, option_value, validate
    from twinbench.spec_sections import flat_spec

    d = {k: (dict(v) if isinstance(v, dict) else v) for k, v in flat_spec(spec_dict).items()}
    if kind == "spec":
        try:
            val = option_value(name, value)
        except SpecError as e:
            raise TryError(f"--try: {e}") from e
        where = next((part for part in ("model", "train") if isinstance(d[part], dict) and name in d[part]), None)
        (d[where] if where else d)[name] = val
    try:
        return validate(RunSpec.from_dict(d))
    except (SpecError, TypeError) as e:
        raise TryError(f"--try: {e}") from e


def env_of(kind: str, name: str, value: str) -> dict[str, str]:
    if kind == "env":
        return {name: value}
    if kind == "xla":
        return {"XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} {value}".strip()}
    return {}


def run(result: Explained, arg: str, out_dir: Path, timeout: float, say: Callable[[str], None]) -> Tried:
    """Run the variant of one side of an explained pair and compare it with that side."""
    from twinbench import runner
    from twinbench.explain import runs

    idx, kind, name, value = parse(arg)
    base = result.a if idx == 0 else result.b
    spec_dict = result.specs[idx] if len(result.specs) > idx else None
    if not spec_dict or base is None:
        raise TryError("--try: this explanation carries no spec of its runs")
    spec = variant(spec_dict, kind, name, value)
    base_spec = variant(spec_dict, "env", "", "")  # the side as it was, run again in the same sitting
    from twinbench.folder_io import make_dir, write_file

    target = make_dir(out_dir, f"try-{len(list(out_dir.glob('try-*')))}")  # inside --out, never through a link
    env = env_of(kind, name, value)
    label = f"{base.run} with {value if kind == 'xla' else f'{name}={value}'}"
    say(f"  --try {arg}: running {base.run} again, then {label} (fresh processes, measured, then traced)")
    recs = [runner.run_one(runs.for_explain(base_spec, make_dir(target, "base")), timeout),  # through no link
            runner.run_one(runs.for_explain(spec, make_dir(target, "try")), timeout, env)]
    write_file(target, runs.RESULTS, "".join(json.dumps(r.to_dict()) + "\n" for r in recs))
    for r in recs:
        if not r.ok:
            raise TryError(f"--try {arg}: the run failed: {r.error}")
    again = gap.explain_run(recs[0])
    var = msgspec.structs.replace(gap.explain_run(recs[1]), run=label)
    table = gap.rows(again, var)
    extras = why.pair_extras(again, var, table)
    step = max(again.step_ms, 1e-9)
    moved = [r for r in table if r.level == 1 and abs(r.diff_ms) > max(MOVED * step, 0.2)]
    return Tried(tried=arg, label=label, base=base.run, base_step_ms=again.step_ms, step_ms=var.step_ms,
                 base_p10_p90=_spread(recs[0]), p10_p90=_spread(recs[1]), rows=table, moved=moved,
                 shapes=extras.shapes, results=str(target), warnings=sorted({w for r in recs for w in r.warnings}),
                 load_avg_1m=[r.conditions.load_avg_1m for r in recs])


def _spread(rec: Record) -> list[float] | None:
    lo, hi = rec.timing.step_ms_p10, rec.timing.step_ms_p90
    return [lo, hi] if lo is not None and hi is not None else None


def _p(sp: list[float] | None) -> str:
    return f" (p10-p90 {sp[0]:.1f}-{sp[1]:.1f})" if sp else ""


def print_try(t: Tried, out: Any) -> None:
    d = t.step_ms - t.base_step_ms
    out.print(f"  try {t.tried}: {t.base} measured step {t.base_step_ms:.1f} ms{_p(t.base_p10_p90)} "
              f"-> {t.step_ms:.1f} ms{_p(t.p10_p90)} ({d:+.1f} ms, {d / max(t.base_step_ms, 1e-9):+.1%}), same sitting",
              highlight=False)
    for w in t.warnings:
        out.print(f"    warning: {w}", highlight=False)
    if not t.moved:
        out.print(f"    no row moved by more than {MOVED:.0%} of the step", highlight=False)
    for r in sorted(t.moved, key=lambda r: -abs(r.diff_ms)):
        out.print(f"    {r.row}: {r.a_ms:.2f} -> {r.b_ms:.2f} ms ({r.diff_ms:+.2f})", highlight=False)
    out.print(f"    results: {t.results}", highlight=False)
