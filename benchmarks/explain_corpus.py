"""Is what ``twinbench explain`` names, and what ``twinbench doctor`` warns of, on the corpus of public script pairs
true of the scripts? For each pair of tests/explain/fixtures (README, "Public training scripts"): what explain
says on the pair's traces (the rows it names, or the check that stopped it naming any, with its fact), then an
A/B of each change that tests one of those statements, or one of the doctor's warnings on the pair's scripts
(its fix applied as printed), on the scripts themselves: the change made, the step timed again, rounds
interleaved.

    python benchmarks/explain_corpus.py --scripts DIR [--pairs a,b] [--rounds 3] [--steps 20] \\
        [--run-timeout 300] [--out results.json] [--table table.md]

The scripts are not in the repository (fetched code is never committed): put the adapted copies the README
describes in one folder, laid out as the README says (``nanogpt_torch/train.py``, ``vae/vae_flax.py``, ...), and
pass it as ``--scripts DIR``; a lever whose scripts are missing is skipped, said so. Each run is ``twinbench
doctor SCRIPT --steps N --json F -- ARGS --steps N`` in its own process, one thread (``OMP_NUM_THREADS=1``,
XLA's Eigen pool off) unless the lever sets otherwise, stopped after ``--run-timeout`` seconds. Its figures:
the doctor's end-to-end iteration time (``iter_ms``: one loop iteration start to the next over the steady
steps, compilation left out), the script's process CPU time (user+sys, all its threads) per iteration over the
same steady steps (the doctor's ``per_step["proc_cpu_s:s"]``: ``time.process_time()`` at each step call; the
iterations its own checks changed are left out, as from ``iter_ms``), the time the loop's thread waited for a
CPU per iteration (``runq_s:s``, from ``/proc/thread-self/schedstat``), and the cores other processes kept
busy meanwhile (the doctor's ``others_cores``). Rounds run A B, B A, ...; the table gives each side's median over rounds with
its range, and says where the rounds do not separate A from B, or where the machine was loaded (a wall-clock
difference read under load is no result: the CPU time per iteration is the figure to read then).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corpus_levers import PAIRS, Lever, Pair

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "explain" / "fixtures"
ONE_THREAD = {"OMP_NUM_THREADS": "1", "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}
#: cores other processes may keep busy for a run to count as taken on a quiet machine
QUIET_OTHERS = 0.25


@dataclass
class Run:
    wall_ms: float | None = None
    cpu_ms: float | None = None
    runq_ms: float | None = None
    others: float | None = None
    frameworks: list[str] = field(default_factory=list)
    error: str = ""
    findings: list[str] = field(default_factory=list)


def laid_out(tmp: Path, p: Pair) -> tuple[str, str, str | None]:
    """The pair's traces as they were left: a pair recorded by ``twinbench doctor --trace`` (``*.doctor.json``
    beside its fixtures) in the doctor's folders, its ``trace.json`` (the load it saw) beside each trace; the
    others as the profilers' files, with the HLO to give as ``--hlo``."""
    import gzip

    recs = [FIX / f.replace(".json.gz", ".doctor.json").replace(".xplane.pb.gz", ".doctor.json")
            for f in (p.torch, p.jax)]
    if not all(r.is_file() for r in recs):
        return str(FIX / p.torch), str(FIX / p.jax), str(FIX / p.hlo)
    t, j = tmp / "torch", tmp / "jax"
    run = j / "plugins" / "profile" / "run"
    t.mkdir(parents=True)
    run.mkdir(parents=True)
    (t / "doctor.pt.trace.json").write_bytes(gzip.decompress((FIX / p.torch).read_bytes()))
    (run / "vm.xplane.pb").write_bytes(gzip.decompress((FIX / p.jax).read_bytes()))
    (j / "step.hlo.txt").write_bytes(gzip.decompress((FIX / p.hlo).read_bytes()))
    for d, rec in ((t, recs[0]), (j, recs[1])):
        (d / "trace.json").write_bytes(rec.read_bytes())
    return str(t), str(j), None


def what_explain_says(p: Pair) -> dict[str, Any]:
    from twinbench.explain import command

    with tempfile.TemporaryDirectory() as tmp:
        t, j, hlo = laid_out(Path(tmp), p)
        r = command.explain_traces(t, j, hlo=hlo)
    return {"summary": r["summary"], "gates": r["gates"],
            "why": [w for w in r["why"] if w.startswith(("implementation:", "framework:"))]}


def timed(scripts: Path, argv: list[str], env: dict[str, str], steps: int, limit_s: int) -> Run:
    """One doctor run of a script: its end-to-end iteration time, its CPU time per iteration and the others'
    load over the steady steps; the error where it gave none."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "doctor.json"
        cmd = [sys.executable, "-m", "twinbench.cli", "doctor", str(scripts / argv[0]), "--steps", str(steps),
               "--timeout", str(limit_s), "--json", str(out), "--", *argv[1:], "--steps", str(steps)]
        run_env = {**os.environ, **ONE_THREAD, **env, "PYTHONPATH": str(ROOT / "src")}
        try:
            proc = subprocess.run(cmd, cwd=scripts, env=run_env, capture_output=True, text=True,
                                  timeout=limit_s + 60)
        except subprocess.TimeoutExpired:
            return Run(error=f"no result in {limit_s + 60} s")
        if not out.is_file():
            return Run(error=(proc.stderr or proc.stdout).strip().splitlines()[-1:][0][:200]
                       if (proc.stderr or proc.stdout).strip() else f"exit {proc.returncode}")
        d = json.loads(out.read_text())
        ms = d.get("iter_ms")
        machine = (d.get("observations") or {}).get("machine") or {}
        found = [f"{f['id']} ({f['severity']})" for f in d.get("findings", [])]
        if not isinstance(ms, (int, float)):
            return Run(error="no steady iteration", findings=found)
        per = (d.get("observations") or {}).get("per_step") or {}
        cpu, runq = per.get("proc_cpu_s:s"), per.get("runq_s:s")
        return Run(wall_ms=float(ms), cpu_ms=1e3 * cpu if isinstance(cpu, (int, float)) else None,
                   runq_ms=1e3 * runq if isinstance(runq, (int, float)) else None,
                   others=machine.get("others_cores"), frameworks=list(d.get("frameworks") or []), findings=found)


def ab(scripts: Path, lever: Lever, rounds: int, steps: int, limit_s: int) -> dict[str, Any]:
    load0 = os.getloadavg()[0]
    runs: dict[str, list[Run]] = {"a": [], "b": []}
    for i in range(rounds):  # A B, B A, ...: drift in the machine's speed falls on both sides alike
        order = [("a", lever.a, lever.env_a), ("b", lever.b, lever.env_b)]
        for side, argv, env in (order if i % 2 == 0 else order[::-1]):
            runs[side].append(timed(scripts, argv, env, steps, limit_s))
    out: dict[str, Any] = {"pair_statement": lever.tests, "source": lever.source, "expect": lever.expect,
                           "a": lever.a, "b": lever.b, "env_a": lever.env_a, "env_b": lever.env_b,
                           "load_1m": [load0, os.getloadavg()[0]]}
    for side in ("a", "b"):
        rs = runs[side]
        out[f"{side}_ms"] = [r.wall_ms for r in rs if r.wall_ms is not None]
        out[f"{side}_cpu_ms"] = [r.cpu_ms for r in rs if r.cpu_ms is not None]
        out[f"{side}_others"] = [r.others for r in rs if r.others is not None]
        out[f"{side}_runq_ms"] = [r.runq_ms for r in rs if r.runq_ms is not None]
        out[f"{side}_frameworks"] = sorted({f for r in rs for f in r.frameworks})
        out[f"{side}_errors"] = sorted({r.error for r in rs if r.error})
        out[f"{side}_findings"] = sorted({f for r in rs for f in r.findings})
    out["verdict"] = verdict(out)
    return out


def _sep(a: list[float], b: list[float]) -> str:
    """B against A over the interleaved rounds: 'faster'/'slower' where every round of one side lies beyond every
    round of the other; else, where each round's B beats (or trails) its own round's A, 'faster (slower) in
    every round, ranges overlapping'; else 'not separated'."""
    if len(a) < 2 or len(b) < 2:
        return "too few runs"
    if max(b) < min(a):
        return "faster"
    if min(b) > max(a):
        return "slower"
    paired = list(zip(a, b, strict=False))
    if all(y < x for x, y in paired):
        return f"faster in each of {len(paired)} rounds, ranges overlapping"
    if all(y > x for x, y in paired):
        return f"slower in each of {len(paired)} rounds, ranges overlapping"
    return "not separated"


def verdict(r: dict[str, Any]) -> str:
    parts = []
    if r["a_errors"] or r["b_errors"]:
        failed = "; ".join(f"{s.upper()}: {', '.join(r[f'{s}_errors'])}" for s in ("a", "b") if r[f"{s}_errors"])
        if not (r["a_ms"] and r["b_ms"]):
            return f"failed ({failed})"
        parts.append(f"some runs failed ({failed})")
    source = r.get("source", "")
    if source.startswith("doctor") or "doctor:" in source:  # the warning's own test: gone once its fix is applied
        wid = source.rsplit(":", 1)[-1].strip()
        a_has = any(f.startswith(wid + " ") for f in r["a_findings"])
        b_has = any(f.startswith(wid + " ") for f in r["b_findings"])
        parts.append(f"{wid}: {'raised' if a_has else 'not raised'} on A, {'still raised' if b_has else 'gone'} "
                     "on B, the printed fix ran")
    others = r["a_others"] + r["b_others"]
    loaded = bool(others) and statistics.median(others) > QUIET_OTHERS
    cpu, wall = _sep(r["a_cpu_ms"], r["b_cpu_ms"]), _sep(r["a_ms"], r["b_ms"])
    if loaded and _jax(r):
        parts.append(f"**not readable under this load** (a JAX loop's CPU per iteration is not its step's while it "
                     f"waits for a CPU; CPU: B {cpu}); wall not read")
    elif loaded:
        parts.append(f"CPU: B {cpu}; wall not read (loaded)")
    else:
        parts.append(f"wall clock: B {wall}; CPU time: B {cpu}")
    return "; ".join(parts)


def _jax(r: dict[str, Any]) -> bool:
    """Whether either side ran a JAX loop: by the doctor's frameworks, else (an older ``--out``) by the script's
    name (the adapted scripts' folders say which framework: ``*_jax``, ``*_flax.py``)."""
    named = [f for s in ("a", "b") for f in r.get(f"{s}_frameworks", [])]
    if named:
        return "jax" in named
    return any(k in str(r[s][0]) for s in ("a", "b") for k in ("jax", "flax"))


def _ms(xs: list[float]) -> str:
    return f"{statistics.median(xs):.1f} ({min(xs):.1f}-{max(xs):.1f})" if xs else "-"


def _ratio(a: list[float], b: list[float]) -> str:
    return f"{statistics.median(b) / statistics.median(a):.2f}" if a and b else "-"


def table(results: dict[str, Any], meta: dict[str, Any]) -> str:
    lines = [f"Run {meta['started']} - {meta['ended']} UTC on {meta['machine']}; {meta['rounds']} interleaved "
             f"rounds, --steps {meta['steps']}, one thread a run unless the lever says otherwise; 1-minute load "
             f"average {meta['load'][0]:.1f} at the start, {meta['load'][1]:.1f} at the end.", "",
             "| pair | source | statement tested (A -> B) | expected | A wall ms | B wall ms | B/A wall | A CPU ms/iter "
             "| B CPU ms/iter | B/A CPU | waited for a CPU, ms/iter (A; B) | others' cores | read |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for pair, res in results.items():
        for r in res["ab"]:
            others = r["a_others"] + r["b_others"]
            load = f"{min(others):.1f}-{max(others):.1f}" if others else "-"
            runq = "; ".join(f"{statistics.median(r.get(f'{s}_runq_ms') or [0]):.0f}" for s in ("a", "b"))
            lines.append(f"| {pair} | {r['source']} | {r['pair_statement']} | {r['expect']} | {_ms(r['a_ms'])} | "
                         f"{_ms(r['b_ms'])} | {_ratio(r['a_ms'], r['b_ms'])} | {_ms(r['a_cpu_ms'])} | "
                         f"{_ms(r['b_cpu_ms'])} | {_ratio(r['a_cpu_ms'], r['b_cpu_ms'])} | {runq} | {load} | "
                         f"{r['verdict']} |")
        for s in res["skipped"]:
            lines.append(f"| {pair} | - | {s} | - | - | - | - | - | - | - | - | - | skipped: scripts missing |")
    return "\n".join(lines) + "\n"


def retable(files: list[Path], out: Path | None) -> int:
    """The table of earlier sittings' ``--out`` files, each A/B read again (one table per file)."""
    parts = []
    for f in files:
        data = json.loads(f.read_text())
        meta = data.pop("meta", None)
        if meta is None:
            print(f"{f}: no sitting's metadata (a sitting stopped part-way); its A/Bs are tabled alone",
                  file=sys.stderr)
            meta = {"started": "?", "ended": "?", "machine": "?", "rounds": "?", "steps": "?", "load": [0.0, 0.0]}
        for res in data.values():
            res.setdefault("skipped", [])
            for r in res["ab"]:
                r["verdict"] = verdict(r)
        parts.append(table(data, meta))
    text = "\n".join(parts)
    if out:
        out.write_text(text)
    else:
        print(text)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scripts", type=Path, help="the folder of the adapted public scripts (see the README)")
    ap.add_argument("--pairs", default=",".join(PAIRS), help="comma-separated pairs (default: all)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--run-timeout", type=int, default=300, help="seconds one doctor run may take")
    ap.add_argument("--out", type=Path, help="every run's figures, JSON")
    ap.add_argument("--table", type=Path, help="the table, markdown")
    ap.add_argument("--from-json", type=Path, nargs="+", help="write --table from earlier --out files, run nothing")
    args = ap.parse_args()
    if args.from_json:
        return retable(args.from_json, args.table)
    names = args.pairs.split(",")
    unknown = [n for n in names if n not in PAIRS]
    if unknown:
        print(f"unknown pair {unknown[0]!r}; known: {', '.join(PAIRS)}", file=sys.stderr)
        return 2
    if args.scripts is not None and not args.scripts.is_dir():
        print(f"--scripts {args.scripts}: no such folder", file=sys.stderr)
        return 2
    meta: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "rounds": args.rounds,
                            "steps": args.steps, "machine": f"{os.cpu_count()} cores", "load": [os.getloadavg()[0]]}
    results: dict[str, Any] = {}
    for name in names:
        p = PAIRS[name]
        said = what_explain_says(p)
        print(f"\n## {name}\n  explain: {said['summary']}", flush=True)
        for w in said["why"]:
            print(f"  why: {w}")
        runs, skipped = [], []
        for lever in p.levers:
            missing = [s for s in {lever.a[0], lever.b[0]} if args.scripts is None or not (args.scripts / s).is_file()]
            if missing:
                print(f"  A/B skipped ({', '.join(missing)} not in --scripts): {lever.tests}")
                skipped.append(lever.tests)
                continue
            r = ab(args.scripts, lever, args.rounds, args.steps, args.run_timeout)
            runs.append(r)
            print(f"  A/B {lever.tests}: A {_ms(r['a_ms'])} ms (CPU {_ms(r['a_cpu_ms'])}), B {_ms(r['b_ms'])} ms "
                  f"(CPU {_ms(r['b_cpu_ms'])}): {r['verdict']}", flush=True)
            if args.out:  # kept as it goes: a long sitting stopped part-way still leaves its figures
                args.out.write_text(json.dumps({**results, name: {"explain": said, "ab": runs}}, indent=1))
        results[name] = {"explain": said, "ab": runs, "skipped": skipped}
    meta |= {"ended": time.strftime("%H:%M", time.gmtime()), "load": [*meta["load"], os.getloadavg()[0]]}
    if args.out:
        args.out.write_text(json.dumps({"meta": meta, **results}, indent=1))
    if args.table:
        args.table.write_text(table(results, meta))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
