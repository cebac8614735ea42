"""The time budget of ``twinbench claims --quick``: the wall time of each configuration's fresh process against
the cost model of ``claims/suite.py`` (RUN_S, EXTRA_S, PROBE_S), which the CLI uses for its estimate and
docs/claims.md for its arithmetic.

Runs every configuration of the plan ONCE (no repeats), each through ``runner.run_one`` as the suite does,
timing the whole process (start, imports, compile, steps), then the probes, and prints a Markdown table:
configuration, the model's estimate, the measured seconds, plus the totals for 1 and for N repeats. Measure
on an idle machine; on a shared one the figures are upper bounds.

    .venv/bin/python benchmarks/claims_budget.py --repeats 3 [--only C1,C9] [--preset tiny]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from twinbench import runner
from twinbench.claims import suite
from twinbench.claims.core import describe, select, setup_for
from twinbench.measure import platforms


def model_table(claims: list, per_claim: dict, specs: list, rounds: list, repeated: set) -> None:
    """The cost model's arithmetic, one row per configuration, with the claims that share it."""
    print("| configuration | claims | runs | s each | s |")
    print("|---|---|---:|---:|---:|")
    total = n = 0.0
    for spec in specs:
        users = [c.id for c in claims if any(x.run_id() == spec.run_id() for x in per_claim[c.id].values())]
        k = len(rounds) if spec.config_id() in repeated else 1
        cost = suite.cost_s(spec)
        total, n = total + k * cost, n + k
        what = describe(spec).replace(", 30 steps", "").replace(", 12 steps", "")
        print(f"| {what} | {' '.join(users)} | {k} | {cost:.0f} | {k * cost:.0f} |")
    probes = list(dict.fromkeys(p for c in claims for p in c.probes))
    users = " ".join(c.id for c in claims if c.probes)
    print(f"| probes: {', '.join(probes)} | {users} | {len(probes)} | {suite.PROBE_S:.0f} | "
          f"{len(probes) * suite.PROBE_S:.0f} |")
    total += len(probes) * suite.PROBE_S
    idle = " ".join(c.id for c in claims if not per_claim[c.id] and not c.probes)
    print(f"| **total** ({idle or 'every claim runs something'}: no runs) | {len(claims)} claims | "
          f"**{n + len(probes):.0f}** | | **{total:.0f} s = {total / 60:.1f} min** |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=None, help="claim ids (default: all)")
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--model-only", action="store_true", help="run nothing: print the cost model's table "
                    "(the budget table of docs/claims.md)")
    args = ap.parse_args()

    claims = select(args.only)
    setup = setup_for(platforms.here(), True, preset=args.preset, repeats=args.repeats)
    per_claim, specs = suite.plan(claims, setup)
    rounds = suite.schedule(claims, per_claim, specs, args.repeats)
    repeated = {s.config_id() for s in (rounds[1] if len(rounds) > 1 else [])}
    if args.model_only:
        model_table(claims, per_claim, specs, rounds, repeated)
        return
    rows, measured = [], {}
    for spec in specs:
        t = time.perf_counter()
        rec = runner.run_one(spec, args.timeout)
        measured[spec.run_id()] = dt = time.perf_counter() - t
        status = "ok" if rec.status == "ok" else f"failed: {rec.error}"
        times = args.repeats if spec.config_id() in repeated else 1
        rows.append(f"| {describe(spec)} | {times} | {suite.cost_s(spec):.0f} | {dt:.1f} | {status} |")
        print(rows[-1], flush=True)
    probe_names = list(dict.fromkeys(p for c in claims for p in c.probes))
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        suite.run_probes(claims, Path(tmp), args.timeout)
        probe_s = time.perf_counter() - t
    total_1 = sum(measured.values()) + probe_s
    total_n = sum(measured[s.run_id()] for r in rounds for s in r) + probe_s
    print()
    print("| configuration | runs | model s | measured s | status |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    print(f"| {len(probe_names)} probes | 1 | {len(probe_names) * suite.PROBE_S:.0f} | {probe_s:.1f} | |")
    print()
    print(f"one repeat: {total_1:.0f} s; {len(rounds)} repeat(s) of the timed runs ({sum(map(len, rounds))} runs): "
          f"{total_n:.0f} s measured, {suite.estimate_s(rounds, len(probe_names)):.0f} s by the model")


if __name__ == "__main__":
    main()
