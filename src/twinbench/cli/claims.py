"""``claims``: each practitioner claim tested here, with its verdict."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from twinbench.byo.plan import prepare_user, user_fields
from twinbench.cli.common import (
    TRACE_OPTION,
    app,
    console,
    fail,
    out,
    ready_outputs,
    trace_top,
    write_report,
)
from twinbench.cli.execute import run_and_report, with_launcher_flags
from twinbench.spec import SpecError


@app.command()
@with_launcher_flags
def claims(
    quick: bool = typer.Option(False, "--quick", help="small presets and short runs (under 15 minutes on a "
                               "2-core CPU); default: larger presets, longer runs"),
    only: Optional[str] = typer.Option(None, help="comma-separated claim ids, e.g. C1,C7 (default: C1-C22)"),  # noqa: UP045
    preset: Optional[str] = typer.Option(  # noqa: UP045
        None, help="GPT preset of most runs (tiny, small, gpt2-124m, gpt-350m); the size claims also use the next "
                   "larger one; default: tiny with --quick, else small"),
    out_dir: Optional[Path] = typer.Option(  # noqa: UP045
        None, "--out", help="results directory; default runs/claims-<timestamp>; runs and probes already there "
                            "are reused"),
    json_path: Optional[Path] = typer.Option(None, "--json", help="also write the list of verdicts here"),  # noqa: UP045
    plan_steps: int = typer.Option(20000, help="steps of a full training run (compile shares, break-even verdicts)"),
    repeats: int = typer.Option(3, help="runs of every timed configuration, interleaved; verdicts on the median, "
                                "inconclusive when the repeats straddle a threshold"),
    timeout: float = typer.Option(900.0, help="seconds before one run or probe is stopped and marked failed"),
    trace: Optional[Path] = TRACE_OPTION,  # noqa: UP045
    model: Optional[str] = typer.Option(  # noqa: UP045
        None, "--model", help="your own PyTorch model, FILE.py:build, in the claims whose experiment takes any model "
        "(C6, C7, C8, C12); the others say why they need a twin"),
    jax_model: Optional[str] = typer.Option(  # noqa: UP045
        None, "--jax-model", help="your own JAX port of --model (FILE.py:build_jax): the JAX side of those claims"),
) -> None:
    """Test each practitioner claim (C1-C22, docs/claims.md) here: what ran, the numbers, the verdict, its rule."""
    from twinbench.claims import suite
    from twinbench.claims.core import GPT_LADDER, Setup, accelerator_present, select

    try:
        chosen = select(only)
        if preset is not None and preset not in GPT_LADDER:
            raise SpecError(f"--preset: unknown GPT preset {preset!r}; allowed: {', '.join(GPT_LADDER)}")
        if plan_steps <= 0:
            raise SpecError(f"--plan-steps must be a positive integer, got {plan_steps}")
        if repeats <= 0:
            raise SpecError(f"--repeats must be a positive integer, got {repeats}")
        user = user_fields(model, jax_model)
        if model:  # only the claims whose experiment takes any model; the others say why not (claims/user.py)
            from twinbench.claims.user import split

            chosen, twin_lines = split(chosen)
            for line in twin_lines:
                out.print(f"  {line}", highlight=False, markup=False)
        setup = Setup(quick=quick, gpt=preset or ("tiny" if quick else "small"), plan_steps=plan_steps,
                      top={**trace_top(trace), **user}, repeats=repeats, accelerator=accelerator_present())
        per_claim, specs = suite.plan(chosen, setup)
    except SpecError as e:
        fail(str(e))
    target = out_dir or Path("runs") / time.strftime("claims-%Y%m%d-%H%M%S")
    ready_outputs(target, json_path, timeout)
    specs, _ = prepare_user(specs, target, timeout, per_shape=True)  # --model: once per shape, before any run
    start = time.perf_counter()
    rounds = suite.schedule(chosen, per_claim, specs, repeats) if specs else []
    n_probes = len({p for c in chosen for p in c.probes})
    est = suite.estimate_s(rounds, n_probes)
    out.print(f"  claims {', '.join(c.id for c in chosen)}: {len(specs)} configurations, {sum(map(len, rounds))} runs "
              f"({len(rounds)} repeat(s) of the timed ones, interleaved), {n_probes} probes; about "
              f"{f'{est / 60:.0f} min' if est >= 120 else f'{est:.0f} s'} on an idle 2-core CPU", highlight=False)
    records = [run_and_report(rs, suite.repeat_dir(target, k), timeout, plan_steps, None,
                              f"twinbench claims, repeat {k + 1} of {len(rounds)}", report=False)
               for k, rs in enumerate(rounds)]
    with console.status("probes") as status:
        probes = suite.run_probes(chosen, target, timeout, lambda name: status.update(f"probe {name}"))
    results = suite.verdicts(chosen, setup, per_claim, records, probes)
    suite.render(out, results)
    path = suite.write(results, target, json_path)
    out.print(f"  verdicts: {path}{f', {json_path}' if json_path else ''} ({len(specs)} configurations, "
              f"{sum(map(len, rounds))} runs, {time.perf_counter() - start:.0f} s)", highlight=False)
    if records:
        write_report(target, plan_steps)
    if all(r["verdict"] == "not measurable" for r in results):
        raise typer.Exit(1)

