"""Does explain's ranked answer name the known cause of a port's slowness, at the size fixing it gains?

For each pair of examples/ports/corpus.toml (a text classifier in PyTorch and its Flax linen port, the slower
side with one realistic known problem): the story the README tells, each side run under ``twinbench doctor
SCRIPT --trace DIR`` in its own process, then ``twinbench explain TORCH_DIR JAX_DIR --json``; then the A/B of
the known problem on the slower side's script alone (no doctor, no profiler): the script as broken against it
fixed, fresh processes, rounds interleaved (broken fixed, fixed broken, ...), each run's ``step_ms=`` line (its
own clock over the steps after the first 4). The table: the known cause, the answer's first cause, whether it
is the known one, its size against the A/B's gain (median over rounds, the rounds' range) and whether it is
within 25% of it; and, since on a shared machine the load scales the milliseconds of runs taken minutes apart
differently, the same check on the cause's share of the slower step put on the A/B's broken step.

    python benchmarks/port_corpus.py [--pairs recompile,no-jit] [--rounds 3] [--steps 12] [--out F.json]
        [--table F.md] [--work DIR] [--again EARLIER.json]

Every figure comes with its conditions: the CPU, its cores, the load average before and after, and the cores
other processes kept busy while each doctor run recorded its steps (its ``trace.json``). On the shared 2-core
machine this was written on, that is the loaded case: say so with any figure.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PORTS = ROOT / "examples" / "ports"
SCRIPTS = {"torch": PORTS / "classify_torch.py", "jax": PORTS / "classify_flax.py"}
STEP = re.compile(r"^step_ms=([0-9.]+)$", re.MULTILINE)
WITHIN = 0.25  # the answer's size of the known cause against the A/B's gain


def pairs(names: list[str] | None = None, path: Path = PORTS / "corpus.toml") -> list[dict[str, Any]]:
    """The corpus's pairs (``names``: those only, in the file's order; without names, a pair that ``needs`` an
    accelerator only where JAX has one: its problem costs nothing on a CPU backend)."""
    every = tomllib.loads(path.read_text())["pair"]
    if names:
        unknown = set(names) - {p["name"] for p in every}
        if unknown:
            sys.exit(f"--pairs: no pair {', '.join(sorted(unknown))} in {path}")
        return [p for p in every if p["name"] in names]
    return [p for p in every if p.get("needs") != "accelerator" or _accelerator()]


def _accelerator() -> bool:
    import jax

    return jax.default_backend() != "cpu"


def twinbench(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "twinbench.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def doctor_trace(side: str, args: list[str], folder: Path, steps: int, timeout: float) -> dict[str, Any]:
    """``twinbench doctor`` with ``--trace folder`` on one side; the trace.json it wrote (its load, its steps)."""
    proc = twinbench(["doctor", str(SCRIPTS[side]), "--trace", str(folder), "--timeout", str(timeout), "--",
                      *args, "--steps", str(steps)], timeout + 60)
    info = folder / "trace.json"
    if proc.returncode not in (0, 1) or not info.is_file() or not (folder / "doctor.json").is_file():
        raise RuntimeError(f"doctor {side} {' '.join(args)}: exit {proc.returncode}: {proc.stdout[-600:]}"
                           f"{proc.stderr[-600:]}")
    return json.loads(info.read_text())


def explain(torch_dir: Path, jax_dir: Path, out: Path, timeout: float) -> dict[str, Any]:
    proc = twinbench(["explain", str(torch_dir), str(jax_dir), "--json", str(out)], timeout)
    if proc.returncode != 0 or not out.is_file():
        raise RuntimeError(f"explain: exit {proc.returncode}: {proc.stderr[-600:]}")
    return json.loads(out.read_text())


def standalone(side: str, args: list[str], steps: int, timeout: float) -> float:
    """One run of a side's script alone: its own ``step_ms=`` (the mean step after its first 4)."""
    proc = subprocess.run([sys.executable, str(SCRIPTS[side]), *args, "--steps", str(steps)], capture_output=True,
                          text=True, timeout=timeout, cwd=PORTS)
    m = STEP.search(proc.stdout)
    if proc.returncode != 0 or not m:
        raise RuntimeError(f"{side} {' '.join(args)}: exit {proc.returncode}: {proc.stderr[-600:]}")
    return float(m.group(1))


def ab(side: str, broken: list[str], fixed: list[str], rounds: int, steps: int, timeout: float,
       once: dict[tuple[str, ...], float] | None = None) -> dict[str, Any]:
    """The A/B of the known problem: broken and fixed alternately, each in a fresh process (``once``: with one
    round, a fixed side already run for another pair is not run again: the tests' budget)."""
    runs: dict[str, list[float]] = {"broken": [], "fixed": []}
    for r in range(rounds):
        for kind in (("broken", "fixed") if r % 2 == 0 else ("fixed", "broken")):
            args = broken if kind == "broken" else fixed
            key = (side, *args)
            if rounds == 1 and once is not None and kind == "fixed" and key in once:
                runs[kind].append(once[key])
                continue
            runs[kind].append(standalone(side, args, steps, timeout))
            if once is not None and kind == "fixed":
                once[key] = runs[kind][-1]
    diffs = [b - f for b, f in zip(runs["broken"], runs["fixed"], strict=True)]
    return {**runs, "gain_ms": statistics.median(runs["broken"]) - statistics.median(runs["fixed"]),
            "gain_range_ms": [min(diffs), max(diffs)]}


def run_pair(p: dict[str, Any], work: Path, rounds: int, steps: int, timeout: float,
             torch_traces: dict[tuple[str, ...], Path] | None = None, earlier: dict[str, Any] | None = None,
             once: dict[tuple[str, ...], float] | None = None) -> dict[str, Any]:
    """One pair: both sides doctored and traced, explained, and the A/B of its known problem (``earlier``: a row
    of an earlier run whose traces are explained again and whose A/B is kept)."""
    work.mkdir(parents=True, exist_ok=True)
    steps = int(p.get("steps", steps))  # a pair whose doctor check needs more steps says so (corpus.toml)
    traces = torch_traces if torch_traces is not None else {}
    folders, loads = {}, {}
    for side in ("torch", "jax"):
        key = (side, *p[side])  # a side run alike in several pairs is traced once
        if earlier is not None:
            traces[key] = Path(earlier["folders"][side])
        if key not in traces:
            folder = Path(tempfile.mkdtemp(prefix=f"{side}-", dir=work))
            info = doctor_trace(side, p[side], folder, steps, timeout)
            traces[key] = folder
            loads[side] = (info.get("load") or {}).get("others_cores")
        folders[side] = traces[key]
        loads.setdefault(side, (json.loads((traces[key] / "trace.json").read_text()).get("load") or {})
                         .get("others_cores"))
    result = explain(folders["torch"], folders["jax"], work / f"{p['name']}.explain.json", timeout)
    ans = result.get("answer") or {}
    causes = ans.get("causes") or []
    known = next((c for c in causes if c.get("finding") == p["cause"]), None)
    first = causes[0] if causes else {}
    slow_run = result["b"]["run"] if p["slow"] == "jax" else result["a"]["run"]
    measured = earlier["ab"] if earlier is not None else ab(p["slow"], p[p["slow"]], p["fixed"], rounds, steps, timeout,
                                                            once)
    size = known["ms"] if known else 0.0
    gain = measured["gain_ms"]
    # the share of the slower step the answer gives the cause, put on the A/B's broken step: the load (which
    # differs between runs minutes apart on a shared machine) scales a step's milliseconds, not its shares
    share = size / ans["slow_step_ms"] if ans.get("slow_step_ms") else 0.0
    predicted = share * statistics.median(measured["broken"])
    return {
        "pair": p["name"], "problem": p["problem"], "cause": p["cause"], "slow": p["slow"],
        "tested": p.get("tested", False), "gap_ms": ans.get("gap_ms"), "clock": ans.get("clock"),
        "slower_is_known_side": ans.get("slower") == slow_run,
        "causes": [(c.get("finding") or c.get("what"), c["ms"], c["noise"]) for c in causes],
        "first": first.get("finding"), "ranked_first": first.get("finding") == p["cause"],
        "size_ms": size, "noise_ms": known["noise"] if known else None, "fix": known["fix"] if known else "",
        "unexplained_ms": ans.get("unexplained_ms"), "not_in_gap": ans.get("not_in_gap"),
        "ab": measured, "ratio": size / gain if gain > 0 else None,
        "within": gain > 0 and abs(size - gain) <= WITHIN * gain, "others_cores": loads,
        "share": share, "predicted_ms": predicted, "share_ratio": predicted / gain if gain > 0 else None,
        "within_share": gain > 0 and abs(predicted - gain) <= WITHIN * gain, "waits": ans.get("waits"),
        "folders": {k: str(v) for k, v in folders.items()},
    }


def conditions() -> dict[str, Any]:
    model = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                  if ln.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").is_file() else \
        platform.processor()
    return {"cpu": model, "cores": os.cpu_count(), "load_avg": os.getloadavg(), "python": platform.python_version()}


def table(rows: list[dict[str, Any]], before: dict[str, Any], after: dict[str, Any]) -> str:
    out = [f"CPU {before['cpu']}, {before['cores']} cores; load average (1, 5, 15 min) {before['load_avg']} before, "
           f"{after['load_avg']} after; {before.get('sitting') or 'no sitting named'} (the cores other processes kept "
           "busy while each doctor run recorded its steps are in the table)", "",
           "| pair | known cause | answer's first cause | ranked first? | its size ms (+-noise), share of the slower step "
           "| A/B ms a step: broken -> fixed (medians), gain (rounds' range) | size / gain | within 25%? "
           "| share x broken / gain | within 25%? | gap ms | others' cores (torch, jax) | tests |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        a = r["ab"]
        noise = f" (+-{r['noise_ms']:.1f})" if r["noise_ms"] is not None else ""
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"
        oc = ", ".join("-" if v is None else f"{v:.2f}" for v in (r["others_cores"].get("torch"),
                                                                  r["others_cores"].get("jax")))
        sr = f"{r['share_ratio']:.2f}" if r["share_ratio"] is not None else "-"
        out.append(f"| {r['pair']} | {r['cause']} | {r['first'] or '(none)'} | {'yes' if r['ranked_first'] else 'no'} "
                   f"| {r['size_ms']:.1f}{noise}, {r['share']:.0%} | {statistics.median(a['broken']):.1f} -> "
                   f"{statistics.median(a['fixed']):.1f}, {a['gain_ms']:.1f} ({a['gain_range_ms'][0]:.1f} to "
                   f"{a['gain_range_ms'][1]:.1f}) | {ratio} | {'yes' if r['within'] else 'no'} | {sr} "
                   f"| {'yes' if r['within_share'] else 'no'} | {r['gap_ms']:.1f} "
                   f"| {oc} | {'tested' if r['tested'] else 'held out'} |")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", default="", help="comma-separated pair names (default: all)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--work", type=Path, default=None, help="where the traces are kept (default: a new temp folder)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--table", type=Path, default=None)
    ap.add_argument("--sitting", default="", help="what else the machine ran (e.g. 'quiet', 'the other core kept busy')")
    ap.add_argument("--again", type=Path, default=None,
                    help="an earlier run's --out: explain its traces again, keep its A/Bs (nothing is timed)")
    a = ap.parse_args()
    earlier = {r["pair"]: r for r in json.loads(a.again.read_text())["rows"]} if a.again else {}
    work = a.work or Path(tempfile.mkdtemp(prefix="port-corpus-"))
    before = {**conditions(), "sitting": a.sitting}
    torch_traces: dict[tuple[str, ...], Path] = {}
    rows = []
    for p in pairs([n for n in a.pairs.split(",") if n]):
        if a.again and p["name"] not in earlier:
            continue
        print(f"{p['name']}: doctor + trace, explain, A/B ({a.rounds} rounds)...", flush=True)
        try:
            rows.append(run_pair(p, work / p["name"], a.rounds, a.steps, a.timeout, torch_traces,
                                 earlier.get(p["name"])))
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print(f"  {p['name']}: failed: {e}", flush=True)
            continue
        r = rows[-1]
        if a.out:  # each row kept as it ends: a run cut short loses nothing finished
            a.out.write_text(json.dumps({"conditions": {"before": before}, "work": str(work), "rows": rows}, indent=1))
        print(f"  first {r['first']} ({'known' if r['ranked_first'] else 'NOT the known ' + r['cause']}), size "
              f"{r['size_ms']:.1f} ms, A/B gain {r['ab']['gain_ms']:.1f} ms", flush=True)
    after = conditions()
    text = table(rows, before, after)
    print(text)
    if a.table:
        a.table.write_text(text)
    if a.out:
        a.out.write_text(json.dumps({"conditions": {"before": before, "after": after}, "work": str(work),
                                     "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
