"""Is what ``twinbench explain`` names on the corpus of public script pairs true of the scripts? For each pair of
tests/explain/fixtures (README, "Public training scripts"): what explain says on the pair's traces (the rows it
names, or the check that stopped it naming any, with its fact), then an A/B of each change that tests one of
those statements on the scripts themselves: the change made, the step timed again, rounds interleaved.

The scripts are not in the repository (fetched code is never committed): put the adapted copies the README
describes in one folder and pass it as ``--scripts DIR``; a pair whose scripts are missing is explained and its
A/B skipped, said so. Each run is ``twinbench doctor SCRIPT --steps N --json F -- ARGS`` in its own process; its
figure is the doctor's end-to-end iteration time (``iter_ms``: one loop iteration start to the next over the
steady steps, compilation left out). Rounds run A B, B A, ...; the table gives the median over rounds with its
range, and the load average (1 min) before and after each A/B: a figure taken while other jobs load the machine
is no result (benchmarks/RESULTS.md says which were taken quiet).

    python benchmarks/explain_corpus.py --scripts /tmp/corpus [--rounds 3] [--steps 20] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "explain" / "fixtures"
ONE_THREAD = {"OMP_NUM_THREADS": "1", "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}


@dataclass
class Lever:
    """One change that tests a statement of explain's on the scripts: run ``a`` against ``b``."""

    tests: str  # the statement (a gate's fact, a named row) it checks
    a: list[str]  # script and its arguments, before the change
    b: list[str]  # after it
    env_a: dict[str, str] = field(default_factory=dict)
    env_b: dict[str, str] = field(default_factory=dict)


@dataclass
class Pair:
    torch: str
    jax: str
    hlo: str
    levers: list[Lever]


PAIRS = {
    "vae_eager": Pair("pair_vae_torch.json.gz", "pair_vae_jax_eager.xplane.pb.gz", "pair_vae_jax_eager.hlo.txt.gz", [
        Lever("the JAX step runs op by op: jit it first",
              ["vae_flax.py", "--no-profile", "--variant", "eager"],
              ["vae_flax.py", "--no-profile", "--variant", "published"])]),
    "vae": Pair("pair_vae_torch.json.gz", "pair_vae_jax.xplane.pb.gz", "pair_vae_jax.hlo.txt.gz", [
        Lever("the forward found by data flow: returning the loss adds no work to the step",
              ["vae_flax.py", "--no-profile", "--variant", "published"],
              ["vae_flax.py", "--no-profile", "--variant", "loss"]),
        Lever("the machine busy: torch at one thread against two on the shared cores",
              ["vae_torch.py", "--no-profile"], ["vae_torch.py", "--no-profile"],
              env_a={"OMP_NUM_THREADS": "2"}, env_b={"OMP_NUM_THREADS": "1"})]),
    "vae_loss": Pair("pair_vae_torch.json.gz", "pair_vae_jax_loss.xplane.pb.gz", "pair_vae_jax_loss.hlo.txt.gz", []),
    "nanogpt": Pair("pair_nanogpt_torch.json.gz", "pair_nanogpt_jax.xplane.pb.gz", "pair_nanogpt_jax.hlo.txt.gz", []),
    "lm": Pair("pair_lm_torch.json.gz", "pair_lm_jax.xplane.pb.gz", "pair_lm_jax.hlo.txt.gz", []),
    "mnist": Pair("pair_mnist_torch.json.gz", "pair_mnist_jax.xplane.pb.gz", "pair_mnist_jax.hlo.txt.gz", []),
}


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


def timed(scripts: Path, argv: list[str], env: dict[str, str], steps: int) -> float | None:
    """The doctor's end-to-end iteration time (ms) of one run of a script, None when it failed."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "doctor.json"
        cmd = [sys.executable, "-m", "twinbench.cli", "doctor", str(scripts / argv[0]), "--steps", str(steps),
               "--json", str(out), "--", *argv[1:], "--steps", str(steps)]
        run_env = {**os.environ, **ONE_THREAD, **env, "PYTHONPATH": str(ROOT / "src")}
        subprocess.run(cmd, cwd=scripts, env=run_env, capture_output=True, timeout=900)
        if not out.is_file():
            return None
        ms = json.loads(out.read_text()).get("iter_ms")
        return float(ms) if isinstance(ms, (int, float)) else None


def ab(scripts: Path, lever: Lever, rounds: int, steps: int) -> dict[str, Any]:
    load0 = os.getloadavg()[0]
    a: list[float] = []
    b: list[float] = []
    for i in range(rounds):  # A B, B A, ...: drift in the machine's speed falls on both sides alike
        order = [("a", lever.a, lever.env_a), ("b", lever.b, lever.env_b)]
        for side, argv, env in (order if i % 2 == 0 else order[::-1]):
            ms = timed(scripts, argv, env, steps)
            if ms is not None:
                (a if side == "a" else b).append(ms)
    out: dict[str, Any] = {"tests": lever.tests, "a": lever.a, "b": lever.b, "env_a": lever.env_a,
                           "env_b": lever.env_b, "a_ms": a, "b_ms": b, "load_1m": [load0, os.getloadavg()[0]]}
    if a and b:
        out["ratio_b_over_a"] = statistics.median(b) / statistics.median(a)
    return out


def _ms(xs: list[float]) -> str:
    return f"{statistics.median(xs):.1f} ({min(xs):.1f}-{max(xs):.1f})" if xs else "failed"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scripts", type=Path, help="the folder of the adapted public scripts (see the README)")
    ap.add_argument("--pairs", default=",".join(PAIRS), help="comma-separated pairs (default: all)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    results = {}
    for name in args.pairs.split(","):
        if name not in PAIRS:
            print(f"unknown pair {name!r}; known: {', '.join(PAIRS)}", file=sys.stderr)
            return 2
        p = PAIRS[name]
        said = what_explain_says(p)
        print(f"\n## {name}\n  explain: {said['summary']}")
        for w in said["why"]:
            print(f"  why: {w}")
        runs = []
        for lever in p.levers:
            missing = [s for s in {lever.a[0], lever.b[0]} if args.scripts is None or not (args.scripts / s).is_file()]
            if missing:
                print(f"  A/B skipped ({', '.join(missing)} not in --scripts): {lever.tests}")
                continue
            r = ab(args.scripts, lever, args.rounds, args.steps)
            runs.append(r)
            ratio = f"{r['ratio_b_over_a']:.2f}" if "ratio_b_over_a" in r else "-"
            print(f"  A/B {lever.tests}: A {_ms(r['a_ms'])} ms, B {_ms(r['b_ms'])} ms, B/A {ratio} "
                  f"(load {r['load_1m'][0]:.1f} -> {r['load_1m'][1]:.1f})")
        results[name] = {"explain": said, "ab": runs}
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
