"""``compare`` and ``sweep``: the commands that measure runs and print their table."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional

import typer

from twinbench import runner
from twinbench.byo.plan import doctor_lines, parity_lines, prepare_user, user_fields
from twinbench.cli.common import (
    CACHE_DIR_OPTION,
    CACHE_OPTION,
    FRAMEWORK_OPTION,
    MEASURE_PANEL,
    OUTPUT_PANEL,
    OWN_MODEL_PANEL,
    PRESET_OPTION,
    TIMEOUT_OPTION,
    TRACE_OPTION,
    UNSAVED,
    app,
    check_places,
    check_timeout,
    fail,
    out,
    ready_outputs,
    set_wide,
    trace_dir,
    with_spec_flags,
)
from twinbench.cli.execute import run_and_report, with_launcher_flags
from twinbench.limits import check_host
from twinbench.plan import RunFields, build_specs, repeat_rounds, with_cache
from twinbench.record import Record
from twinbench.results_dir import LOCK
from twinbench.spec import SpecError


@app.command()
@with_launcher_flags
@with_spec_flags
def compare(
    preset: str = PRESET_OPTION,
    framework: str = FRAMEWORK_OPTION,
    strategies: Optional[str] = typer.Option(  # noqa: UP045
        None, help="comma-separated strategy names (framework:name to pick one), or 'all'; "
                   "default: the representative set (see `twinbench strategies`)"),
    model: Optional[str] = typer.Option(  # noqa: UP045
        None, "--model", help="your own PyTorch model, FILE.py:build: build(cfg) returns a twinbench.byo.UserModel "
        "(module, loss_fn, batch); runs under torch eager/compile/compile-regional (+remat, +bf16), ddp/fsdp "
        "on several devices, and JAX via torchax (also torchax-mesh-dp/-fsdp) (see docs/own-model.md)",
        rich_help_panel=OWN_MODEL_PANEL),
    jax_model: Optional[str] = typer.Option(  # noqa: UP045
        None, "--jax-model", help="your own JAX port of --model, FILE.py:build_jax returning a "
        "twinbench.byo.JaxUserModel (loss_fn, to_jax): parity-checked, then measured as strategy 'port'",
        rich_help_panel=OWN_MODEL_PANEL),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="results directory; default runs/<timestamp>",  # noqa: UP045
                                           rich_help_panel=OUTPUT_PANEL),
    json_path: Optional[Path] = typer.Option(None, "--json", help="also write the list of records here",  # noqa: UP045
                                             rich_help_panel=OUTPUT_PANEL),
    resume: Optional[Path] = typer.Option(None, help="continue an interrupted compare in this directory",  # noqa: UP045
                                          rich_help_panel=OUTPUT_PANEL),
    show_sharding: bool = typer.Option(False, "--show-sharding", rich_help_panel=OUTPUT_PANEL,
                                       help="print where the batch, parameters and optimizer state live"),
    timeout: float = TIMEOUT_OPTION,
    plan_steps: int = typer.Option(1000, help="steps of the planned run whose total wall time is shown",
                                   rich_help_panel=OUTPUT_PANEL),
    trace: Optional[Path] = TRACE_OPTION,  # noqa: UP045
    explain: bool = typer.Option(False, "--explain", help="also break each run's step into phases and op "
                                 "categories (traced and timed after the measured steps; see docs/explain.md)",
                                 rich_help_panel=MEASURE_PANEL),
    cache: str = CACHE_OPTION,
    cache_dir: Optional[Path] = CACHE_DIR_OPTION,  # noqa: UP045
    repeats: int = typer.Option(1, help="run every configuration N times, interleaved (A B, A B, ...), each a "
                                        "fresh process: the repeats `twinbench diff` needs to tell code from drift",
                                rich_help_panel=MEASURE_PANEL),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="with --resume: run again the runs whose "
                                      "record says failed (the new record replaces the failed one in the reports)",
                                      rich_help_panel=OUTPUT_PANEL),
    allow_mismatch: bool = typer.Option(False, "--allow-mismatch", help="with --jax-model: exit 0 even when the "
                                        "port fails its parity check against the torch model (default: exit 1)",
                                        rich_help_panel=OWN_MODEL_PANEL),
    wide: bool = typer.Option(False, "--wide", help="print tables at their full width (default: fit the terminal, "
                              "or 100 columns when the output is not a terminal)", rich_help_panel=OUTPUT_PANEL),
    **overrides: Any,
) -> None:
    """Train the same model with each framework and strategy, one fresh process per run, and compare."""
    set_wide(wide)
    check_timeout(timeout)
    UNSAVED.clear()
    user = user_fields(model, jax_model)
    fields = RunFields(trace_dir=trace_dir(trace), **user).kwargs()
    specs = with_cache(build_specs(preset, framework, strategies, overrides, **fields),
                       cache, cache_dir)
    specs = [s for round_ in repeat_rounds(specs, repeats) for s in round_]
    check_host(specs)  # a shape the host cannot build or train: refused before any process starts
    if plan_steps <= 0:
        raise SpecError(f"--plan-steps must be a positive integer, got {plan_steps}")
    if resume is not None and not (resume / runner.RESULTS).exists() and not (resume / LOCK).is_file():
        raise SpecError(f"--resume {resume}: no {runner.RESULTS} there")  # its lock alone: interrupted before a run
    target = resume or out_dir or Path("runs") / time.strftime("%Y%m%d-%H%M%S")
    check_places(specs)  # --cache-dir, --trace, --save-weights writable, before --out is even created
    ready_outputs(target, json_path, timeout)
    if explain:  # trace + explain's timing after the measured steps (twinbench/explain)
        from twinbench.explain.runs import for_explain
        from twinbench.folder_io import make_dir

        # --out's own traces folder made without following a link (a link there, resolved, would send the
        # profilers' traces outside --out); a --trace you name is yours
        specs = [for_explain(s, trace or make_dir(target, "traces")) for s in specs]
    specs, parity = prepare_user(specs, target, timeout)  # --model: checked, initial weights written (exit 2 if bad)
    for line in parity_lines(parity) if parity else []:
        out.print(line, highlight=False)
    records = run_and_report(specs, target, timeout, plan_steps, json_path, "twinbench compare",
                             retry_failed=retry_failed)
    print_sharding(records, show_sharding)
    if explain:
        from twinbench.explain.command import print_runs

        print_runs(records, target, out)
    if model:  # the doctor's findings on the JAX side of a user model
        for line in doctor_lines(records):
            out.print(f"  {line}", highlight=False, markup=False)
    lacking = next((r.error for r in records if (r.error or "").startswith("TorchaxUnsupported")), "")
    if lacking:  # jax:torchax met an operator torchax cannot lower: the model cannot run there (one line, exit 2)
        fail(lacking.removeprefix("TorchaxUnsupported: "), code=2)
    if not any(r.ok for r in records) or UNSAVED:
        raise typer.Exit(1)
    failed = [r.label() for r in records if r.status == "failed"]
    if model and failed:  # a run of the user's own model that failed is their problem to see, not a footnote
        fail(f"{len(failed)} of {len(records)} run(s) of your model failed: {', '.join(failed)} (reasons in the "
             "rows above)", code=1)
    if model and parity and not parity.ok and not allow_mismatch:
        fail("parity MISMATCH: the JAX port does not compute what the torch model does (see the parity lines "
             "above); its timings are of another computation. --allow-mismatch to exit 0 anyway", code=1)


@app.command()
@with_launcher_flags
@with_spec_flags
def sweep(
    over: list[str] = typer.Option(..., "--over", help="FIELD=V1,V2,... for any run-spec field (layers, batch, "
                                   "seq, d_model, devices, ...); repeat --over for a grid"),
    preset: str = PRESET_OPTION,
    framework: str = FRAMEWORK_OPTION,
    strategies: Optional[str] = typer.Option(  # noqa: UP045
        None, help="comma-separated strategy names, or 'all'; the same at every point"),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="results directory; default runs/sweep-<timestamp>",  # noqa: UP045
                                           rich_help_panel=OUTPUT_PANEL),
    json_path: Optional[Path] = typer.Option(None, "--json", help="also write the list of records here",  # noqa: UP045
                                             rich_help_panel=OUTPUT_PANEL),
    resume: Optional[Path] = typer.Option(None, help="continue an interrupted sweep in this directory",  # noqa: UP045
                                          rich_help_panel=OUTPUT_PANEL),
    timeout: float = TIMEOUT_OPTION,
    plan_steps: int = typer.Option(1000, help="steps of the planned run whose total wall time is shown",
                                   rich_help_panel=OUTPUT_PANEL),
    trace: Optional[Path] = TRACE_OPTION,  # noqa: UP045
    cache: str = CACHE_OPTION,
    cache_dir: Optional[Path] = CACHE_DIR_OPTION,  # noqa: UP045
    model: Optional[str] = typer.Option(  # noqa: UP045
        None, "--model", help="your own PyTorch model, FILE.py:build, swept instead of a twin (see compare --model)",
        rich_help_panel=OWN_MODEL_PANEL),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="with --resume: run the failed runs again",
                                      rich_help_panel=OUTPUT_PANEL),
    wide: bool = typer.Option(False, "--wide", help="print tables at their full width", rich_help_panel=OUTPUT_PANEL),
    **overrides: Any,
) -> None:
    """Run compare at every point of a grid (same strategies), into one results file and one table."""
    from twinbench.sweep import grid_specs, parse_over

    set_wide(wide)
    check_timeout(timeout)
    UNSAVED.clear()
    axes = parse_over(over)
    user = user_fields(model, None)
    fields = RunFields(trace_dir=trace_dir(trace), **user).kwargs()
    specs = grid_specs(axes, overrides, lambda o: build_specs(preset, framework, strategies, o, **fields))
    specs = with_cache(specs, cache, cache_dir)
    check_host(specs, swept={key for key, _ in axes})  # a grid point the host cannot hold: refused before any run
    if plan_steps <= 0:
        raise SpecError(f"--plan-steps must be a positive integer, got {plan_steps}")
    if resume is not None and not (resume / runner.RESULTS).exists() and not (resume / LOCK).is_file():
        raise SpecError(f"--resume {resume}: no {runner.RESULTS} there")  # its lock alone: interrupted before a run
    target = resume or out_dir or Path("runs") / time.strftime("sweep-%Y%m%d-%H%M%S")
    title = "twinbench sweep over " + ", ".join(f"{k}={','.join(map(str, v))}" for k, v in axes)
    check_places(specs)  # --cache-dir, --trace, --save-weights writable, before --out is even created
    ready_outputs(target, json_path, timeout)
    specs, _ = prepare_user(specs, target, timeout, per_shape=True)  # --model: once per shape, before any run
    records = run_and_report(specs, target, timeout, plan_steps, json_path, title, retry_failed=retry_failed)
    print_scaling(records)
    if not any(r.ok for r in records) or UNSAVED:
        raise typer.Exit(1)


def print_sharding(records: list[Record], drawings: bool) -> None:
    """Every run's sharding warnings; with ``drawings`` (--show-sharding) its whole sharding report."""
    from twinbench.distributed.sharding_report import render
    from twinbench.record import CONDITION_WARNINGS

    for r in records:
        if drawings and r.ok:
            out.print()
            for item in render(r):
                out.print(item)
        elif r.warnings:
            for w in r.warnings:
                if w.startswith(CONDITION_WARNINGS):  # the conditions under the table say these once
                    continue
                out.print(f"  [bold red]warning[/] {r.label()}: {w}", highlight=False)
    from twinbench.report.scaling import caveat, efficiency

    note = caveat((row.platform, row.devices) for row in efficiency(records))
    if note:
        out.print(f"  {note}", highlight=False)


def print_scaling(records: list[Record]) -> None:
    """Strong and weak scaling efficiency per strategy (report/scaling.py) when the runs span device counts."""
    from twinbench.report.scaling import lines

    if len({r.run.device_count for r in records if r.ok}) > 1:
        for line in lines(records):
            out.print(f"  {line}", highlight=False)

