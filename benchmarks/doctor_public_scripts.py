"""Run the doctor on public training scripts (given by path; nothing is fetched) and print what it found.

Usage::

    python benchmarks/doctor_public_scripts.py SCRIPT.py [SCRIPT.py ...] [--steps N] [--args "ARGS"]

``--args`` is passed to every script (e.g. ``--args "--model LSTM --epochs 1"``). For each script: the step
the doctor found and how, steps, ms/step, compile and wall seconds, the doctor's self-check failures, and
every finding with its severity and evidence. Each step's time is split (the mean of the steady iterations:
the step up to its results being ready, the DataLoader's wait, known host work, the rest); where no step is
found, the doctor's message saying what it looked for.
"""

from __future__ import annotations

import argparse
import shlex
import sys


def main(argv: list[str]) -> int:
    import msgspec

    from twinbench.doctor import DoctorError, run_doctor
    from twinbench.doctor.report import no_step_message

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scripts", nargs="+")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--args", default="", help="arguments for every script, as one string")
    ap.add_argument("--timeout", type=float, default=600.0)
    opts = ap.parse_args(argv)
    for script in opts.scripts:
        print(f"== {script}")
        try:
            res = run_doctor(script, shlex.split(opts.args), opts.steps, opts.timeout)
        except DoctorError as e:
            print(f"   doctor could not run: {e}")
            continue
        o = res.observations
        print(f"   step={o.step_fn} (found by {o.step_signal}) steps={o.steps} "
              f"step_ms={o.step_ms} compile_s={o.compile_s:.2f} wall_s={o.wall_s:.2f} "
              f"stopped_early={o.stopped_early}")
        if o.split:
            print("   per iteration: " + ", ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}"
                                                 for k, v in msgspec.structs.asdict(o.split).items()))
        if (message := no_step_message(o, script)) is not None:
            print(f"   {message}")
        for e in res.self_errors:
            print(f"   SELF-CHECK FAILED: {e}")
        for f in res.findings or []:
            print(f"   {f.severity.upper()} {f.id}: {f.title}\n      {f.evidence}")
        if not res.findings:
            print("   no findings")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
