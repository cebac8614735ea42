"""The doctor on public script pairs (a PyTorch training and a JAX/Flax training of the same model), checked.

Usage (the scripts are not fetched or copied here: PAIRS_DIR holds copies of public scripts laid out as
below, each loop calling ``pairprof.tick(i)`` at the start of every iteration, which with ``PAIR_TIMES=FILE``
appends that iteration's wall time; see docs/doctor.md, "Proven on public pairs")::

    python benchmarks/doctor_pairs.py PAIRS_DIR [--rounds 3] [--only nanogpt_jax,...] [--out FILE.jsonl] [--keep DIR]

For each script, in every round (the runs of one round interleaved, each in its own process):

- ``doctor``: ``twinbench doctor SCRIPT --json`` (its step time, its findings);
- ``own``: the script alone, its own step time: the mean time per steady iteration from iteration
  ``SKIP`` to the end of the loop, the end taken after every live JAX array is ready (an asynchronous loop
  that never reads the device is timed by when its steps complete, not by its dispatch); for a PyTorch
  script on the CPU (synchronous) the median of the iterations' wall times, which leaves out the
  evaluation a script runs after its loop;
- each variant of ``VARIANTS`` (the fix of a finding applied by a script argument), timed like ``own``.

Prints a table per script: the doctor's step time against the script's own (ratio), every finding the
doctor gave, and each variant's time against the original's (median of the rounds).
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
from pathlib import Path

from twinbench import host_malloc

ONE_THREAD = {"OMP_NUM_THREADS": "1", "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}
NANOGPT = ["--n_layer=4", "--n_head=4", "--n_embd=128", "--batch_size=8", "--block_size=64", "--max_iters=40",
           "--eval_interval=100000", "--eval_iters=1", "--log_interval=1", "--dropout=0.0", "--dataset=synth"]
NANOGPT_256 = [a.replace("--n_embd=128", "--n_embd=256").replace("--block_size=64", "--block_size=128") for a in NANOGPT]
LM_TORCH = ["--data", "./data/synth", "--model", "Transformer", "--emsize", "128", "--nhid", "512", "--nlayers",
            "4", "--nhead", "4", "--bptt", "64", "--batch_size", "8", "--dropout", "0.0", "--use-optimizer",
            "--lr", "0.001", "--epochs", "1", "--log-interval", "40"]
SCRIPTS = {  # name -> (folder in PAIRS_DIR, script, arguments, extra environment)
    "nanogpt_torch": ("nanogpt/torch", "train.py",
                      [*NANOGPT, "--device=cpu", "--compile=False", "--dtype=float32",
                       "--gradient_accumulation_steps=1"], {}),
    "nanogpt_jax": ("nanogpt/jax", "train.py", [*NANOGPT, "--max_new_tokens=2"], {}),
    # a width at which XLA:CPU's step buffers are tens of MB (glibc maps them afresh each step: page-faults)
    "nanogpt_torch_256": ("nanogpt/torch", "train.py",
                          [*NANOGPT_256, "--device=cpu", "--compile=False", "--dtype=float32",
                           "--gradient_accumulation_steps=1"], {}),
    "nanogpt_jax_256": ("nanogpt/jax", "train.py", [*NANOGPT_256, "--max_new_tokens=2"], {}),
    "mnist_torch": ("mnist/torch", "main.py", ["--epochs", "1", "--batch-size", "64", "--log-interval", "10"],
                    {"PAIR_MNIST_N": "2560"}),
    "mnist_jax": ("mnist/jax", "run_mnist.py", ["--steps", "40", "--batch-size", "64"], {}),
    "lm_torch": ("lm/torch", "main.py", LM_TORCH, {}),
    "lm_jax": ("lm/jax", "run_lm.py", ["--steps", "40"], {}),
}
#: page-faults' fix, as the doctor words it on this machine: glibc's malloc tunables of ``--host-malloc tuned``
HOST_MALLOC = {"GLIBC_TUNABLES": host_malloc.merged("", "tuned", host_malloc.thp_mode())}
TWO_THREADS = {"OMP_NUM_THREADS": None, "XLA_FLAGS": None}  # as published: each framework's own thread count
# name -> {variant: (folder or None, arguments or None, environment)}: one finding's fix applied (or, for
# "two-threads", the script as published on every core: cpu-oversubscribed's fix is the one-thread default)
VARIANTS: dict[str, dict[str, tuple[str | None, list[str] | None, dict[str, str | None]]]] = {
    "nanogpt_jax": {
        "read-once": (None, [a if a != "--log_interval=1" else "--log_interval=100000"
                             for a in SCRIPTS["nanogpt_jax"][2]], {}),  # jax-host-sync's fix
        "scan-layers": ("doctor-variants/nanogpt_jax_scan", None, {}),  # jax-unrolled-loop's fix
        "two-threads": (None, None, TWO_THREADS),
    },
    "nanogpt_torch": {"two-threads": (None, None, TWO_THREADS)},
    "nanogpt_jax_256": {"host-malloc": (None, None, HOST_MALLOC)},  # page-faults' fix
    "nanogpt_torch_256": {"host-malloc": (None, None, HOST_MALLOC)},
    "mnist_jax": {"donate": ("doctor-variants/mnist_jax_donate", None, {})},  # jax-no-donation's fix
}
DOCTOR_VARIANTS = {("nanogpt_jax", "two-threads"), ("nanogpt_torch", "two-threads"), ("nanogpt_jax", "scan-layers"),
                   ("mnist_jax", "donate"), ("nanogpt_jax_256", "host-malloc"), ("nanogpt_torch_256", "host-malloc")}
# --steps for the doctor: end a long epoch early (lm_torch: its evaluation after the loop is not the step); the JAX
# scripts at their last step, so the doctor waits for every step dispatched and can time a loop it could not
# wait on step by step (a step whose outputs are all donated)
DOCTOR_STEPS = {"lm_torch": 60, "nanogpt_jax": 40, "mnist_jax": 40, "lm_jax": 40}
SKIP = 5  # the first iterations (compilation, an evaluation at iteration 0) are not steady

HARNESS = r"""
import json, os, runpy, sys, time
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(script))
try:
    runpy.run_path(script, run_name="__main__")
except SystemExit:
    pass
if "jax" in sys.modules:
    import jax
    for a in jax.live_arrays():
        try:
            a.block_until_ready()
        except Exception:
            pass
end = time.perf_counter()
pp = sys.modules.get("pairprof")
import resource
print("HARNESS " + json.dumps({"last_start": pp._t[0] if pp else None, "end": end,
                              "jax": "jax" in sys.modules,
                              "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def environ(env: dict[str, str | None]) -> dict[str, str]:
    """This process's environment with ``env`` on top (a None value removes the variable)."""
    return {k: v for k, v in {**os.environ, **env}.items() if v is not None}


def own_time(folder: Path, script: str, args: list[str], env: dict[str, str]) -> dict:
    """The script's own steady step time (see the module docstring), in a fresh process."""
    with tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False) as f:
        times = f.name
    try:
        proc = subprocess.run([sys.executable, "-c", HARNESS, script, *args], cwd=folder, capture_output=True,
                              text=True, timeout=900, env=environ({**env, "PAIR_TIMES": times}))
        lines = [json.loads(ln) for ln in Path(times).read_text().splitlines() if ln.strip()]
    finally:
        os.unlink(times)
    tail = [ln for ln in proc.stdout.splitlines() if ln.startswith("HARNESS ")]
    if proc.returncode != 0 or not tail:
        return {"error": (proc.stderr or proc.stdout)[-500:]}
    h = json.loads(tail[-1][len("HARNESS "):])
    dts = [x["dt"] for x in lines if x["i"] > SKIP]  # dt of iteration i-1, measured at the start of i
    out = {"iterations": len(dts) + 1, "median_iter_ms": 1e3 * statistics.median(dts) if dts else None,
           "max_rss_mib": h["max_rss_mib"]}
    if h["jax"] and h["last_start"] is not None and dts:  # completion: the last iteration ends when all is ready
        out["step_ms"] = 1e3 * (sum(dts) + h["end"] - h["last_start"]) / (len(dts) + 1)
    else:
        out["step_ms"] = out["median_iter_ms"]
    return out


def doctor_run(name: str, folder: Path, script: str, args: list[str], env: dict[str, str],
               keep: Path | None = None) -> dict:
    """The doctor's run of the script, and the script's own clock in that same process (``PAIR_TIMES``: the
    median wall time of its steady iterations, one start to the next; the same conditions as the doctor's)."""
    with tempfile.TemporaryDirectory() as tmp:
        out, times = Path(tmp, "d.json"), Path(tmp, "times.jsonl")
        steps = [f"--steps={DOCTOR_STEPS[name]}"] if name in DOCTOR_STEPS else []
        proc = subprocess.run([sys.executable, "-m", "twinbench.cli", "doctor", script, "--json", str(out),
                               "--timeout", "900", *steps, "--", *args], cwd=folder, capture_output=True,
                              text=True, timeout=1000, env=environ({**env, "PAIR_TIMES": str(times)}))
        if not out.exists():
            return {"error": (proc.stderr or proc.stdout)[-500:], "code": proc.returncode}
        doc = json.loads(out.read_text())
        if keep is not None:  # the doctor's whole report (findings and the observations they came from)
            keep.parent.mkdir(parents=True, exist_ok=True)
            keep.write_text(out.read_text())
        lines = [json.loads(ln) for ln in times.read_text().splitlines() if ln.strip()] if times.exists() else []
    dts = [x["dt"] for x in lines if x["i"] > SKIP]
    obs = doc["observations"]
    return {"code": proc.returncode, "step_ms": doc["step_ms"], "step_timing": obs.get("step_timing"),
            "own_in_run_ms": 1e3 * statistics.median(dts) if dts else None, "compile_s": doc.get("compile_s"),
            "dispatch_ms": obs.get("dispatch_ms"), "end_to_end_ms": obs.get("end_to_end_ms"), "read_check": obs.get("read_check"), "split": obs.get("split"),
            "machine": obs.get("machine"),
            "findings": [{k: f[k] for k in ("id", "severity", "title", "evidence")} for f in doc["findings"]]}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pairs", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated script names (default: all)")
    ap.add_argument("--out", type=Path, default=None, help="append every run here as a JSON line")
    ap.add_argument("--keep", type=Path, default=None,
                    help="keep each doctor run's whole --json report here, as NAME[-VARIANT]-rROUND.json")
    ap.add_argument("--kinds", default="doctor,own", help="doctor, own or both (default)")
    ap.add_argument("--variants", default="", help="comma-separated variant names to run (default: all)")
    ap.add_argument("--threads", choices=("one", "default"), default="one",
                    help="one: OMP_NUM_THREADS=1 and XLA's one-thread flag for every run; default: as published")
    opts = ap.parse_args(argv)
    names = [n for n in SCRIPTS if not opts.only or n in opts.only.split(",")]
    wanted = set(opts.variants.split(",")) if opts.variants else None
    variants = {n: {v: x for v, x in vs.items() if wanted is None or v in wanted} for n, vs in VARIANTS.items()}
    jobs = []
    for name in names:
        jobs += [(name, "doctor", None), (name, "own", None)]
        jobs += [(name, "own", v) for v in variants.get(name, {})]
        jobs += [(name, "doctor", v) for v in variants.get(name, {}) if (name, v) in DOCTOR_VARIANTS]
    jobs = [j for j in jobs if j[1] in opts.kinds.split(",")]
    rows: list[dict] = []
    for r in range(opts.rounds):
        order = jobs[r % len(jobs):] + jobs[:r % len(jobs)]  # rotated each round: no job always runs first
        for name, kind, variant in order:
            folder, script, args, env = SCRIPTS[name]
            env = {**(ONE_THREAD if opts.threads == "one" else {}), **env}
            if variant:
                v_folder, v_args, v_env = VARIANTS[name][variant]
                folder, args, env = v_folder or folder, v_args or args, {**env, **v_env}
            t0 = time.time()
            keep = opts.keep / f"{name}{'-' + variant if variant else ''}-r{r}.json" if opts.keep else None
            got = (doctor_run(name, opts.pairs / folder, script, args, env, keep) if kind == "doctor" else
                   own_time(opts.pairs / folder, script, args, env))
            row = {"name": name, "kind": kind, "variant": variant or "as published", "round": r,
                   "load1": os.getloadavg()[0], "wall_s": round(time.time() - t0, 1), **got}
            rows.append(row)
            print(json.dumps({k: row.get(k) for k in ("name", "kind", "variant", "round", "step_ms", "load1",
                                                      "wall_s", "error")}), flush=True)
            if opts.out:
                with opts.out.open("a") as f:
                    f.write(json.dumps(row) + "\n")
    summarize(rows)
    return 0


def summarize(rows: list[dict]) -> None:
    def med(name: str, kind: str, variant: str = "as published") -> float | None:
        xs = [r["step_ms"] for r in rows if (r["name"], r["kind"], r["variant"]) == (name, kind, variant)
              and r.get("step_ms")]
        return statistics.median(xs) if xs else None

    for name in dict.fromkeys(r["name"] for r in rows):
        d, o = med(name, "doctor"), med(name, "own")
        ratio = f"{d / o:.2f}" if d and o else "-"
        print(f"\n== {name}: doctor {d and round(d, 2)} ms/step, own {o and round(o, 2)} ms/step, ratio {ratio}")
        for r in rows:
            if r["name"] == name and r["kind"] == "doctor" and r.get("own_in_run_ms") and r.get("step_ms"):
                print(f"   round {r['round']} {r['variant']}: doctor {r['step_ms']:.2f} ms/step, the script's own clock "
                      f"in the same run {r['own_in_run_ms']:.2f} ({r['step_ms'] / r['own_in_run_ms']:.2f}x)")
        for v in VARIANTS.get(name, {}):
            vm, vd = med(name, "own", v), med(name, "doctor", v)
            if vm and o:
                print(f"   variant {v}: {vm:.2f} ms/step against {o:.2f} ({100 * (vm - o) / o:+.1f}%)"
                      + (f"; doctor on it {vd:.2f} (ratio {vd / vm:.2f})" if vd else ""))
        for r in rows:
            if r["name"] == name and r["kind"] == "doctor":
                found = ", ".join(f"{f['severity']} {f['id']}" for f in r.get("findings", [])) or "none"
                print(f"   round {r['round']} {r['variant']}: {found}"
                      + (f"; read check {r['read_check']}" if r.get("read_check") else ""))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
