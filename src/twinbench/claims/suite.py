"""Runs a selection of claims: the union of their runs once (each in its own process, shared by run_id),
their probes once (each in its own process), then every claim's rule on its evidence.

The CLI (``twinbench claims``) runs the specs of :func:`plan` through ``runner.run_many`` (via
``cli.run_and_report``), then calls :func:`run_probes` and :func:`verdicts`, prints :func:`render` and
writes :func:`write` (``claims.json``, read by the report page).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from twinbench import runner
from twinbench.claims.core import NOT_MEASURABLE, Claim, Evidence, Setup, describe
from twinbench.spec import RunSpec

CLAIMS_JSON = "claims.json"
PROBES_DIR = "probes"


def plan(claims: list[Claim], setup: Setup) -> tuple[dict[str, dict[str, RunSpec]], list[RunSpec]]:
    """Each claim's named runs, and the distinct specs to run (one per run_id, in first-use order)."""
    per_claim = {c.id: c.runs(setup) for c in claims}
    unique: dict[str, RunSpec] = {}
    for runs in per_claim.values():
        for spec in runs.values():
            unique.setdefault(spec.run_id(), spec)
    return per_claim, list(unique.values())


def run_probes(claims: list[Claim], out_dir: Path, timeout: float,
               on_start: Any = lambda name: None) -> dict[str, dict[str, Any]]:
    """Every probe the claims name, once, each in a fresh process (``python -m twinbench.claims.probes``).

    A probe already finished in ``out_dir/probes`` is reused (like ``--resume`` for runs).
    """
    results: dict[str, dict[str, Any]] = {}
    (out_dir / PROBES_DIR).mkdir(parents=True, exist_ok=True)
    for name in dict.fromkeys(p for c in claims for p in c.probes):
        path = out_dir / PROBES_DIR / f"{name}.json"
        if path.exists():
            previous = json.loads(path.read_text())
            if previous.get("status") == "ok":
                results[name] = previous
                continue
        on_start(name)
        code, reason = runner.run_module("twinbench.claims.probes", [name, str(path)], timeout)
        if path.exists():
            results[name] = json.loads(path.read_text())
        else:
            results[name] = {"status": "failed", "error": reason or f"probe exited with code {code}"}
            path.write_text(json.dumps(results[name]))
    return results


def verdicts(claims: list[Claim], setup: Setup, per_claim: dict[str, dict[str, RunSpec]],
             records: list[dict[str, Any]], probes: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Apply every claim's rule to its evidence. A failed run or probe gives ``not measurable`` with why."""
    by_id = {r.get("run_id"): r for r in records}
    out = []
    for c in claims:
        runs = per_claim[c.id]
        missing = {"status": "failed", "error": "no record (the run did not happen)"}
        ev = Evidence(setup, {n: by_id.get(s.run_id(), {**missing, "framework": s.framework,
                                                       "strategy": s.strategy}) for n, s in runs.items()},
                      {p: probes.get(p, {"status": "failed", "error": "probe not run"}) for p in c.probes})
        problems = ev.problems()
        if problems:
            v_word, finding, numbers, caveat = NOT_MEASURABLE, "not measurable here: " + "; ".join(problems), {}, ""
        else:
            try:
                v = c.judge(ev)
                v_word, finding, numbers, caveat = v.verdict, v.finding, v.numbers, v.caveat
            except Exception as e:  # a rule that cannot read its evidence must not lose the other claims
                v_word, finding, numbers, caveat = (NOT_MEASURABLE, f"not measurable here: the rule could not be "
                                                    f"applied ({type(e).__name__}: {e})", {}, "")
        out.append({
            "claim": c.id, "group": c.group, "statement": c.statement, "verdict": v_word, "finding": finding,
            "rule": c.rule, "numbers": numbers, "runs": [s.run_id() for s in runs.values()],
            "ran": [f"{n}: {describe(s)}" for n, s in runs.items()] + [f"probe {p}" for p in c.probes],
            "caveat": " ".join(x for x in (caveat, c.caveat) if x),
        })
    return out


def write(results: list[dict[str, Any]], out_dir: Path, json_path: Path | None) -> Path:
    """``claims.json`` in the results directory (the report reads it), and ``--json FILE`` when given."""
    text = json.dumps(results, indent=1)
    path = out_dir / CLAIMS_JSON
    path.write_text(text)
    if json_path:
        json_path.write_text(text)
    return path


COLOURS = {"supported": "green", "contradicted": "red", "depends": "yellow", NOT_MEASURABLE: "magenta"}


def render(console: Any, results: list[dict[str, Any]]) -> None:
    """Per claim: the statement, what ran, the numbers, the verdict with its finding, the rule, the caveat."""
    from rich.markup import escape

    for r in results:
        colour = COLOURS.get(r["verdict"], "white")
        console.print()
        console.print(f"[bold]{r['claim']}[/] {escape(r['statement'])}", soft_wrap=True)
        console.print(f"  [dim]ran:[/] {escape('; '.join(r['ran']))}", soft_wrap=True)
        if r["numbers"]:
            nums = ", ".join(f"{k} = {v}" for k, v in r["numbers"].items())
            console.print(f"  [dim]numbers:[/] {escape(nums)}", soft_wrap=True)
        console.print(f"  [bold {colour}]{r['verdict']}[/]: {escape(r['finding'])}", soft_wrap=True)
        console.print(f"  [dim]rule:[/] {escape(r['rule'])}", soft_wrap=True)
        if r.get("caveat"):
            console.print(f"  [dim]caveat:[/] {escape(r['caveat'])}", soft_wrap=True)
    counts: dict[str, int] = {}
    for r in results:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    console.print()
    console.print("claims: " + ", ".join(f"{n} {v}" for v, n in counts.items()) + "  ("
                  + " ".join(f"{r['claim']}={r['verdict']}" for r in results) + ")", soft_wrap=True)
