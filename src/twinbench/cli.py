"""The command line: parses flags, builds RunSpecs, delegates. No measurement or model code lives here."""

from __future__ import annotations

import contextvars
import functools
import inspect
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

from twinbench import runner
from twinbench.plan import build_specs, csv, model_spec, repeat_rounds, with_cache
from twinbench.spec import (
    FLAG_HELP,
    OVERRIDABLE,
    PRESETS,
    RunSpec,
    SpecError,
    flag,
)

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Measure the same Transformer trained in PyTorch and JAX, honestly.")
console = Console(stderr=True)
#: a terminal's own width; elsewhere (a log, a pipe) 100 columns: tables fold their columns, notes wrap. --wide:
#: every table at its natural width
NARROW = 100


def _width() -> int | None:
    if sys.stdout.isatty():
        return None
    cols = os.environ.get("COLUMNS", "")
    return int(cols) if cols.isdigit() and int(cols) > 0 else NARROW


out = Console(width=_width())
#: lines saying where records that could not be written to results.jsonl were kept (runner.save_record)
UNSAVED: list[str] = []


def set_wide(wide: bool) -> None:
    """``--wide``: tables and notes at their full width, never folded."""
    if wide:
        out.width = 400


def check_json(json_path: Path | None, flag: str = "--json") -> None:
    """Fail before any work when ``json_path`` cannot be written (no such folder, a directory, read-only)."""
    if json_path is None:
        return
    parent = json_path.parent
    if json_path.is_dir():
        fail(f"{flag} {json_path}: a directory, not a file")
    if not parent.is_dir():
        fail(f"{flag} {json_path}: no folder {parent} (create it first)")
    if not os.access(parent, os.W_OK) or (json_path.exists() and not os.access(json_path, os.W_OK)):
        fail(f"{flag} {json_path}: cannot write there")


def check_timeout(timeout: float) -> None:
    if not timeout > 0:  # NaN too
        fail(f"--timeout must be a positive number of seconds, got {timeout:g}")


def ready_outputs(target: Path, json_path: Path | None, timeout: float | None = None) -> None:
    """Every check of where results go, before anything runs: --out a writable directory, --json writable."""
    if timeout is not None:
        check_timeout(timeout)
    check_json(json_path)
    try:
        runner.check_out_dir(target)
    except SpecError as e:
        fail(str(e))


def write_text(path: Path, text: str, what: str) -> bool:
    """Write an output file; a failure is a warning (the records are already safe in results.jsonl)."""
    try:
        path.write_text(text)
        return True
    except OSError as e:
        console.print(f"[yellow]warning:[/] {what} not written to {path}: {e.strerror or e}", highlight=False)
        return False


def fail(message: str, code: int = 2) -> None:
    """One line on stderr, a non-zero exit: how every user error ends."""
    console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def with_spec_flags(fn: Callable) -> Callable:
    """Add one option per overridable RunSpec field (``--d-model`` for ``d_model``) to a command.

    The command receives them in ``**overrides`` (``None`` when not given), so every field of the spec is a
    flag without writing each one by hand in every command.
    """
    sig = inspect.signature(fn)
    params = [p for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD]
    for name, typ in OVERRIDABLE.items():
        option = typer.Option(None, flag(name), help=FLAG_HELP.get(name, f"override the preset's {name}"),
                              rich_help_panel="Run spec (overrides the preset)")
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option,
                                        annotation=Optional[typ]))  # noqa: UP045 (typer needs Optional)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SpecError as e:
            fail(str(e))

    wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    return wrapper


#: The launcher options of the command being run (``with_launcher_flags``), read by run_and_report.
JOBS: contextvars.ContextVar[Any] = contextvars.ContextVar("jobs", default=None)
LAUNCHER_FLAGS = {
    "launcher": (str, "process", "how each run reaches a process: process (a fresh local subprocess, the default), "
                                 "local (a submitit job on this machine, one at a time) or slurm (a SLURM job "
                                 "through submitit, sized from the run's devices)"),
    "partition": (str, "", "SLURM partition"),
    "account": (str, "", "SLURM account"),
    "qos": (str, "", "SLURM quality of service"),
    "time": (int, 60, "minutes a job may run (SLURM --time)"),
    "gpus_per_node": (int, 0, "GPUs per node: runs with more --devices span several nodes, one task per node"),
    "cpus_per_task": (int, 0, "CPUs per task (0: the scheduler's default)"),
    "slurm_option": (list[str], None, "KEY=VALUE passed to sbatch as --KEY=VALUE (repeatable)"),
    "max_parallel": (int, 4, "jobs in the queue at once (one run a node: measurements never share a node)"),
    "dry_run": (bool, False, "print the job each run would be (nodes, tasks, GPUs, time, command) and stop"),
}


def with_launcher_flags(fn: Callable) -> Callable:
    """Add ``--launcher`` and the SLURM options (launch/) to a command that runs specs."""
    from twinbench.launch import JobOptions, check, parse_slurm_options

    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    keep = [p for p in params if p.kind is not p.VAR_KEYWORD]
    extra = [p for p in params if p.kind is p.VAR_KEYWORD]
    for name, (typ, default, help_) in LAUNCHER_FLAGS.items():
        option = typer.Option(default, f"--{name.replace('_', '-')}", help=help_, rich_help_panel="Launcher")
        keep.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option,
                                      annotation=Optional[typ] if default is None else typ))  # noqa: UP045

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        given = {name: kwargs.pop(name) for name in LAUNCHER_FLAGS}
        try:
            opts = JobOptions(launcher=given["launcher"], partition=given["partition"], account=given["account"],
                              qos=given["qos"], time_min=given["time"], gpus_per_node=given["gpus_per_node"],
                              cpus_per_task=given["cpus_per_task"],
                              slurm_options=parse_slurm_options(given["slurm_option"]),
                              max_parallel=given["max_parallel"], dry_run=given["dry_run"])
            check(opts)
        except SpecError as e:
            fail(str(e))
        token = JOBS.set(opts)
        try:
            return fn(*args, **kwargs)
        finally:
            JOBS.reset(token)

    wrapper.__signature__ = sig.replace(parameters=keep + extra)  # type: ignore[attr-defined]
    return wrapper


def run_and_report(specs: list[RunSpec], out_dir: Path, timeout: float, plan_steps: int, json_path: Path | None,
                   title: str, report: bool = True, retry_failed: bool = False) -> list[dict[str, Any]]:
    """Run specs with a progress bar (one line per finished run when stderr is not a terminal), then print the
    table and write summary.md (every run of the results file) and --json; with ``report`` also report.html +
    report.md (see :func:`write_report`)."""
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from twinbench.report.table import conditions, crossings, markdown, rich_table

    jobs = JOBS.get()
    if jobs is not None and jobs.dry_run:  # the jobs it would submit, and nothing else
        from twinbench.launch.jobs import describe

        for spec in specs:
            out.print(describe(spec, jobs, timeout), highlight=False, soft_wrap=True, markup=False)
        raise typer.Exit(0)
    if jobs is None or not jobs.jobs:  # runs on this host: the GPUs they ask for must be here, before any starts
        from twinbench.measure import device

        problem = device.devices_problem([(s.label(), s.devices // max(s.num_processes, 1)) for s in specs],
                                         device.gpu_count(), os.environ.get("JAX_PLATFORMS"))
        if problem:
            fail(problem)
    from twinbench.byo.plan import parity_summary, read_parity
    from twinbench.record import duplicates, latest_per_run, read_records

    terminal = console.is_terminal
    started = time.perf_counter()
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                  TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(), console=console,
                  transient=True, disable=not terminal) as progress:
        task = progress.add_task("starting", total=len(specs))
        count = [0]

        def on_start(spec: RunSpec) -> None:
            progress.update(task, description=f"running {spec.label()} ({spec.preset})")

        def on_done(spec: RunSpec, record: dict[str, Any]) -> None:
            progress.advance(task)
            count[0] += 1
            if not terminal:  # a log: one line per finished run, so a long compare is never silent
                step = record.get("step_ms")
                how = f"{step:.1f} ms/step" if isinstance(step, (int, float)) else record.get("error") or ""
                console.print(f"run {count[0]}/{len(specs)} {spec.label()} ({spec.preset}): {record.get('status')}"
                              f"{', ' + how if how else ''} [{time.perf_counter() - started:.0f} s]",
                              highlight=False, markup=False, soft_wrap=True)
            elif record.get("status") != "ok":
                progress.console.print(f"[red]{record.get('status')}[/] {spec.label()}: {record.get('error')}",
                                       highlight=False)

        notes: list[str] = []
        try:
            records = runner.run_many(specs, out_dir, timeout, on_start, on_done, jobs=jobs,
                                      retry_failed=retry_failed, notes=notes)
        except runner.Interrupted:
            progress.stop()
            fail(f"interrupted; finished runs are in {out_dir / runner.RESULTS}; "
                 f"continue with --resume {out_dir}", code=130)
        except SpecError as e:
            progress.stop()
            fail(str(e))
    UNSAVED.extend(notes)
    out.print(rich_table(records, plan_steps, title))
    parity = parity_summary(read_parity(out_dir))
    for line in conditions(records) + crossings(records) + ([parity] if parity else []):
        out.print(f"  {line}", highlight=False, markup=False)
    # summary.md: every run of the results file (an --out written by several commands shows all of them)
    try:
        every, _ = read_records(out_dir / runner.RESULTS)
    except OSError:
        every = []
    twice = duplicates(every)
    if twice:
        console.print(f"[yellow]warning:[/] {out_dir / runner.RESULTS} holds {len(twice)} configuration(s) measured "
                      f"more than once ({', '.join(f'{k} x{n}' for k, n in list(twice.items())[:4])}); the "
                      "summary and the report show the last of each", highlight=False)
    shown = latest_per_run(every) or records
    summary = markdown(shown, plan_steps, title)
    if parity:
        summary += f"\n- {parity}\n"
    write_text(out_dir / "summary.md", summary, "summary.md")
    if json_path:
        write_text(json_path, json.dumps(records, indent=1), "--json")
    out.print(f"  results: {out_dir / runner.RESULTS}, {out_dir / 'summary.md'}", highlight=False)
    if report:
        write_report(out_dir, plan_steps)
    for line in notes:
        console.print(f"not saved: {line}", highlight=False, markup=False)
    return records


#: ``--cache`` / ``--cache-dir`` for every command that runs specs: pass them through with_cache().
CACHE_OPTION = typer.Option("cold", "--cache", help="compilation cache state to measure: cold (fresh empty caches), "
                            "warm (a second process on a filled cache) or both (cold, then warm on the same cache)")
CACHE_DIR_OPTION = typer.Option(None, "--cache-dir", help="where compilation caches live (cold runs use fresh "
                                "subdirectories, removed after); default ~/.cache/twinbench/compile")


#: Options shared by every command that runs specs (compare, sweep, advise, claims).
PRESET_OPTION = typer.Option("small", help=f"model/training preset: {', '.join(PRESETS)}")
FRAMEWORK_OPTION = typer.Option("torch,jax", help="comma-separated: torch, jax")
TIMEOUT_OPTION = typer.Option(900.0, help="seconds before one run is stopped and marked failed")


#: ``--trace DIR`` for every command that runs specs (compare, sweep, claims): pass it through trace_top().
TRACE_OPTION = typer.Option(
    None, "--trace", help="also record a few steady-state steps of each run with the framework's profiler "
                          "(after the measured steps, which stay unaffected) into this directory")


def trace_top(trace: Path | None) -> dict[str, Any]:
    """The RunSpec field for ``--trace`` (an absolute path, as the worker may run elsewhere)."""
    return {"trace_dir": str(trace.resolve())} if trace else {}


def write_report(out_dir: Path, plan_steps: int) -> None:
    """report.html + report.md (+ plots/) into ``out_dir``; a failure to draw never loses the run."""
    from twinbench.report.page import write

    try:
        html_path, md_path, _ = write(out_dir, plan_steps)
    except Exception as e:
        console.print(f"[yellow]warning:[/] report not written: {type(e).__name__}: {e}", highlight=False)
        return
    out.print(f"  report: {html_path} (Markdown: {md_path.name})", highlight=False)


@app.command()
@with_launcher_flags
@with_spec_flags
def compare(
    preset: str = PRESET_OPTION,
    framework: str = FRAMEWORK_OPTION,
    strategies: Optional[str] = typer.Option(  # noqa: UP045
        None, help="comma-separated strategy names (framework:name to pick one), or 'all'; "
                   "default: the representative set (see `twinbench strategies`)"),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="results directory; default runs/<timestamp>"),  # noqa: UP045
    json_path: Optional[Path] = typer.Option(None, "--json", help="also write the list of records here"),  # noqa: UP045
    resume: Optional[Path] = typer.Option(None, help="continue an interrupted compare in this directory"),  # noqa: UP045
    show_sharding: bool = typer.Option(False, "--show-sharding",
                                       help="print where the batch, parameters and optimizer state live"),
    timeout: float = TIMEOUT_OPTION,
    plan_steps: int = typer.Option(1000, help="steps of the planned run whose total wall time is shown"),
    trace: Optional[Path] = TRACE_OPTION,  # noqa: UP045
    explain: bool = typer.Option(False, "--explain", help="also break each run's step into phases and op "
                                 "categories (traced and timed after the measured steps; see docs/explain.md)"),
    cache: str = CACHE_OPTION,
    cache_dir: Optional[Path] = CACHE_DIR_OPTION,  # noqa: UP045
    model: Optional[str] = typer.Option(  # noqa: UP045
        None, "--model", help="your own PyTorch model, FILE.py:build: build(cfg) returns a twinbench.byo.UserModel "
        "(module, loss_fn, batch); runs under torch eager/compile/compile-regional (+remat, +bf16), ddp/fsdp "
        "on several devices, and JAX via torchax (also torchax-mesh-dp/-fsdp) (see docs/own-model.md)"),
    jax_model: Optional[str] = typer.Option(  # noqa: UP045
        None, "--jax-model", help="your own JAX port of --model, FILE.py:build_jax returning a "
        "twinbench.byo.JaxUserModel (loss_fn, to_jax): parity-checked, then measured as strategy 'port'"),
    repeats: int = typer.Option(1, help="run every configuration N times, interleaved (A B, A B, ...), each a "
                                        "fresh process: the repeats `twinbench diff` needs to tell code from drift"),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="with --resume: run again the runs whose "
                                      "record says failed (the new record replaces the failed one in the reports)"),
    allow_mismatch: bool = typer.Option(False, "--allow-mismatch", help="with --jax-model: exit 0 even when the "
                                        "port fails its parity check against the torch model (default: exit 1)"),
    wide: bool = typer.Option(False, "--wide", help="print tables at their full width (default: fit the terminal, "
                              "or 100 columns when the output is not a terminal)"),
    **overrides: Any,
) -> None:
    """Train the same model with each framework and strategy, one fresh process per run, and compare."""
    set_wide(wide)
    check_timeout(timeout)
    UNSAVED.clear()
    user = {"user_model": model or "", "user_jax_model": jax_model or ""}
    specs = with_cache(build_specs(preset, framework, strategies, overrides, **trace_top(trace), **user),
                       cache, cache_dir)
    specs = [s for round_ in repeat_rounds(specs, repeats) for s in round_]
    if plan_steps <= 0:
        raise SpecError(f"--plan-steps must be a positive integer, got {plan_steps}")
    if resume is not None and not (resume / runner.RESULTS).exists():
        raise SpecError(f"--resume {resume}: no {runner.RESULTS} there")
    target = resume or out_dir or Path("runs") / time.strftime("%Y%m%d-%H%M%S")
    ready_outputs(target, json_path, timeout)
    if explain:  # trace + explain's timing after the measured steps (twinbench/explain)
        from twinbench.explain.runs import for_explain

        specs = [for_explain(s, trace or target / "traces") for s in specs]
    if model:  # check the user's model and write its initial weights once, before any run (exit 2 if bad)
        from twinbench.byo import plan

        specs, parity = plan.prepare(specs, target, timeout)
        for line in plan.parity_lines(parity) if parity else []:
            out.print(line, highlight=False)
    records = run_and_report(specs, target, timeout, plan_steps, json_path, "twinbench compare",
                             retry_failed=retry_failed)
    print_sharding(records, show_sharding)
    if explain:
        from twinbench.explain.command import print_runs

        print_runs(records, target, out)
    if model:  # the doctor's findings on the JAX side of a user model
        for line in plan.doctor_lines(records):
            out.print(f"  {line}", highlight=False, markup=False)
    if not any(r.get("status") == "ok" for r in records) or UNSAVED:
        raise typer.Exit(1)
    failed = [f"{r.get('framework')}/{r.get('strategy')}" for r in records if r.get("status") == "failed"]
    if model and failed:  # a run of the user's own model that failed is their problem to see, not a footnote
        fail(f"{len(failed)} of {len(records)} run(s) of your model failed: {', '.join(failed)} (reasons in the "
             "rows above)", code=1)
    if model and parity and not parity.get("ok") and not allow_mismatch:
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
    out_dir: Optional[Path] = typer.Option(None, "--out", help="results directory; default runs/sweep-<timestamp>"),  # noqa: UP045
    json_path: Optional[Path] = typer.Option(None, "--json", help="also write the list of records here"),  # noqa: UP045
    resume: Optional[Path] = typer.Option(None, help="continue an interrupted sweep in this directory"),  # noqa: UP045
    timeout: float = TIMEOUT_OPTION,
    plan_steps: int = typer.Option(1000, help="steps of the planned run whose total wall time is shown"),
    trace: Optional[Path] = TRACE_OPTION,  # noqa: UP045
    cache: str = CACHE_OPTION,
    cache_dir: Optional[Path] = CACHE_DIR_OPTION,  # noqa: UP045
    model: Optional[str] = typer.Option(  # noqa: UP045
        None, "--model", help="your own PyTorch model, FILE.py:build, swept instead of a twin (see compare --model)"),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="with --resume: run the failed runs again"),
    wide: bool = typer.Option(False, "--wide", help="print tables at their full width"),
    **overrides: Any,
) -> None:
    """Run compare at every point of a grid (same strategies), into one results file and one table."""
    from twinbench.sweep import grid_specs, parse_over

    set_wide(wide)
    check_timeout(timeout)
    UNSAVED.clear()
    axes = parse_over(over)
    user = {"user_model": model} if model else {}
    specs = grid_specs(axes, overrides,
                       lambda o: build_specs(preset, framework, strategies, o, **trace_top(trace), **user))
    specs = with_cache(specs, cache, cache_dir)
    if plan_steps <= 0:
        raise SpecError(f"--plan-steps must be a positive integer, got {plan_steps}")
    if resume is not None and not (resume / runner.RESULTS).exists():
        raise SpecError(f"--resume {resume}: no {runner.RESULTS} there")
    target = resume or out_dir or Path("runs") / time.strftime("sweep-%Y%m%d-%H%M%S")
    title = "twinbench sweep over " + ", ".join(f"{k}={','.join(map(str, v))}" for k, v in axes)
    ready_outputs(target, json_path, timeout)
    if model:  # the user's model checked and its initial weights written once per shape, before any run
        from twinbench.byo import plan

        specs = plan.prepare_points(specs, target, timeout)
    records = run_and_report(specs, target, timeout, plan_steps, json_path, title, retry_failed=retry_failed)
    print_scaling(records)
    if not any(r.get("status") == "ok" for r in records) or UNSAVED:
        raise typer.Exit(1)


def print_sharding(records: list[dict[str, Any]], drawings: bool) -> None:
    """Every run's sharding warnings; with ``drawings`` (--show-sharding) its whole sharding report."""
    from twinbench.distributed.sharding_report import render
    from twinbench.record import CONDITION_WARNINGS

    for r in records:
        if drawings and r.get("status") == "ok":
            out.print()
            for item in render(r):
                out.print(item)
        elif r.get("warnings"):
            for w in r["warnings"]:
                if w.startswith(CONDITION_WARNINGS):  # the conditions under the table say these once
                    continue
                out.print(f"  [bold red]warning[/] {r['framework']}/{r['strategy']}: {w}", highlight=False)
    from twinbench.report.scaling import caveat, efficiency

    note = caveat(efficiency(records))
    if note:
        out.print(f"  {note}", highlight=False)


def print_scaling(records: list[dict[str, Any]]) -> None:
    """Strong and weak scaling efficiency per strategy (report/scaling.py) when the runs span device counts."""
    from twinbench.report.scaling import lines

    if len({r.get("device_count") for r in records if r.get("status") == "ok"}) > 1:
        for line in lines(records):
            out.print(f"  {line}", highlight=False)


@app.command("strategies")
def list_strategies(
    matrix: bool = typer.Option(False, "--matrix", help="every (family, framework, strategy, modifier) cell: "
                                "ok, or the one-line reason it cannot exist"),
) -> None:
    """List every registered strategy and modifier, one line each (* = in the default compare set)."""
    from rich.table import Table

    from twinbench.strategies.registry import MODIFIERS, REGISTRY

    if matrix:
        print_matrix()
        return

    table = Table(header_style="bold", title="strategies (combine with modifiers: base+mod+mod)")
    for c in ("framework", "strategy", "default", "what it does"):
        table.add_column(c)
    for s in REGISTRY.values():
        table.add_row(s.framework, s.name, "*" if s.default else "", s.summary)
    out.print(table)
    if MODIFIERS:
        mods = Table(header_style="bold", title="modifiers")
        for c in ("modifier", "frameworks", "applies to", "what it does"):
            mods.add_column(c)
        for m in MODIFIERS.values():
            mods.add_row("+" + m.name, ",".join(m.frameworks), ",".join(m.bases or ("any",)), m.summary)
        out.print(mods)


def print_matrix() -> None:
    """The strategy matrix, one cell per line; cells whose modifier is another framework's are counted, not listed."""
    from rich.table import Table

    from twinbench.strategies.registry import MODIFIERS, matrix

    cells = matrix()
    foreign = [c for c in cells if c.modifier and c.framework not in MODIFIERS[c.modifier].frameworks]
    table = Table(header_style="bold", title="strategy matrix (ok = runs, parity-tested)")
    for col in ("family", "framework", "strategy", "modifier", "ok / why not"):
        table.add_column(col)
    for c in cells:
        if c not in foreign:
            table.add_row(c.family, c.framework, c.strategy, "+" + c.modifier if c.modifier else "",
                          "ok" if c.reason is None else c.reason)
    out.print(table)
    n_ok = sum(c.reason is None for c in cells)
    out.print(f"{n_ok} ok, {len(cells) - n_ok} cannot exist ({len(foreign)} of them pair a modifier with the other "
              "framework)", highlight=False)


@app.command()
@with_spec_flags
def export(
    out_dir: Path = typer.Option(..., "--out", help="directory to write config.json + model.safetensors into"),
    preset: str = typer.Option("small", help=f"model preset whose shape is exported: {', '.join(PRESETS)}"),
    weights_file: Optional[Path] = typer.Option(  # noqa: UP045
        None, "--weights", help="canonical weights (a safetensors file of twinbench's layout, e.g. written by "
                                "twinbench.models.weights.save) to export; must fit the preset's shape"),
    results: Optional[Path] = typer.Option(  # noqa: UP045
        None, "--from", help="a results directory whose run saved its trained weights (compare --save-weights "
                             "DIR); the run's own spec gives the shape"),
    run: Optional[str] = typer.Option(  # noqa: UP045
        None, help="with --from: the run to export, as framework/strategy or run_id, when several saved weights"),
    **overrides: Any,
) -> None:
    """Write a model's canonical weights as a Hugging Face checkpoint that `transformers` loads offline.

    The weights are, in this order: the trained weights of a run (--from RESULTS, saved by compare
    --save-weights DIR); --weights FILE; the checkpoint of --init-from (a round trip); else the spec's
    initial weights (the preset's shape and --seed: exactly what a compare run starts from).
    Load the result with transformers' GPT2LMHeadModel / BertForSequenceClassification.from_pretrained(DIR).
    """
    from twinbench.export import export_weights, weights_from_results
    from twinbench.models.hf import save_hf

    if results is not None:
        if weights_file is not None:
            raise SpecError("--from and --weights are two sources of weights; give one")
        spec, weights, source = weights_from_results(results, run)
    else:
        if run is not None:
            raise SpecError("--run selects a run of --from RESULTS; give --from too")
        spec = model_spec(preset, overrides)
        weights, source = export_weights(spec, weights_file)
    path = save_hf(spec.model, weights, out_dir)
    n = sum(w.size for w in weights.values())
    m = spec.model
    out.print(f"wrote {path}/config.json and model.safetensors: {m.family}, {m.layers} layers, d_model "
              f"{m.d_model}, {m.heads} heads, vocab {m.vocab}, context {m.context}, {n / 1e6:.2f} M params "
              f"(from {source})", highlight=False)


@app.command()
def score(
    init_from: Path = typer.Option(..., "--init-from", help="local Hugging Face GPT-2 checkpoint directory "
                                   "(config.json + model.safetensors)"),
    data: Path = typer.Option(..., help="UTF-8 text file to score"),
    framework: str = typer.Option("torch,jax", help="comma-separated: torch, jax (each in its own process)"),
    tokenizer: Optional[Path] = typer.Option(  # noqa: UP045
        None, help="local tokenizer.json (tokenizers library); default: byte-level tokens (ids 0-255)"),
    batch: int = typer.Option(4, help="windows per forward pass"),
    max_windows: int = typer.Option(0, help="score at most this many windows (0: all)"),
    compare_windows: int = typer.Option(1, help="windows whose logits are compared across frameworks"),
    json_path: Optional[Path] = typer.Option(None, "--json", help="also write the result here as JSON"),  # noqa: UP045
    timeout: float = typer.Option(900.0, help="seconds before one framework's scoring is stopped"),
) -> None:
    """Mean next-token cross-entropy of a GPT-2 checkpoint on a text file, in each framework, and the largest
    logit difference between them: the check that a migrated model is numerically the same model.

    The file is cut into consecutive non-overlapping windows of the model's context length (a final partial
    window is dropped); each window's loss covers its context - 1 next-token predictions, in float32.
    """
    from rich.table import Table

    from twinbench.score import score as run_score

    check_timeout(timeout)
    check_json(json_path)
    try:
        result = run_score(str(init_from), str(data), csv(framework) or [], str(tokenizer) if tokenizer else None,
                           batch, max_windows, compare_windows, timeout)
    except SpecError as e:
        fail(str(e))
    table = Table(header_style="bold", title=f"twinbench score: {init_from}")
    for c in ("framework", "mean CE (nats)", "perplexity", "bits/token", "seconds (incl. compile)", "device"):
        table.add_column(c, justify="left" if c in ("framework", "device") else "right")
    for fw, r in result["frameworks"].items():
        if r["status"] != "ok":
            table.add_row(fw, "[red]failed[/]", "", "", "", r["error"])
            continue
        table.add_row(fw, f"{r['loss']:.6f}", f"{r['perplexity']:.3f}", f"{r['bits_per_token']:.4f}",
                      f"{r['seconds']:.2f}", f"{r['device']} ({r['platform']})")
    out.print(table)
    tokens = "byte-level" if result["tokenizer"] == "bytes" else result["tokenizer"]
    out.print(f"  {result['windows']} windows x {result['context']} tokens ({tokens} tokens; "
              f"{result['tokens_scored']:,} predictions), fp32, no TF32, batch {result['batch']}", highlight=False)
    if "max_logit_diff" in result:
        out.print(f"  max |logit diff| torch vs jax: {result['max_logit_diff']:.3g} over the first "
                  f"{result['compared_windows']} window(s) ({result['logits_compared']:,} logits, max |logit| "
                  f"{result['max_abs_logit']:.3g}); max per-window loss diff {result['max_window_loss_diff']:.3g}",
                  highlight=False)
    if json_path:
        write_text(json_path, json.dumps(result, indent=1), "--json")
    if any(r["status"] != "ok" for r in result["frameworks"].values()):
        raise typer.Exit(1)


@app.command()
@with_launcher_flags
def claims(
    quick: bool = typer.Option(False, "--quick", help="small presets and short runs (under 15 minutes on a "
                               "2-core CPU); default: larger presets, longer runs"),
    only: Optional[str] = typer.Option(None, help="comma-separated claim ids, e.g. C1,C7 (default: C1-C21)"),  # noqa: UP045
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
    """Test each practitioner claim (C1-C21, docs/claims.md) here: what ran, the numbers, the verdict, its rule."""
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
        user = {"user_model": model, "user_jax_model": jax_model or ""} if model else {}
        if jax_model and not model:
            raise SpecError("--jax-model: a JAX port is measured beside its torch model: give --model FILE.py:build too")
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
    if model:  # the user's model checked and its initial weights written once per shape, before any run
        from twinbench.byo import plan as byo_plan

        specs = byo_plan.prepare_points(specs, target, timeout)
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


@app.command("peak")
def peak_cmd(
    remeasure: bool = typer.Option(False, "--remeasure", help="measure the peaks again now (each framework in its "
                                   "own fresh process) and cache them; without it, only show the cache"),
    framework: str = typer.Option("torch,jax", help="comma-separated: torch, jax"),
    precision: str = typer.Option("fp32", help="with --remeasure: fp32, bf16, or both comma-separated"),
    threads: int = typer.Option(0, help="with --remeasure: CPU threads (0: all cores, as a run's default)"),
    timeout: float = typer.Option(600.0, help="seconds before one framework's measurement is stopped"),
) -> None:
    """The measured matmul peaks MFU is computed against: value, spread of the repeats, age, versions.

    Each peak is cached per framework, device, dtype, threads and framework versions (~/.cache/twinbench/
    peaks.json). A run measures its peak the first time and again when the cached one was measured on a
    busy machine or its repeats disagreed by more than 10%; --remeasure measures now. Exit code 1 when a new
    measurement is not to be trusted (its repeats disagree by more than 10% after 3 attempts, or the machine
    was busy: load above 0.5 per core): try again when it is idle; a trusted cached peak is then kept.
    """
    import tempfile

    from rich.table import Table

    from twinbench.measure.peak import Peak, cache_path, cached_peaks, fmt_age

    fws, dtypes = csv(framework) or [], csv(precision) or []
    for fw in fws:
        if fw not in ("torch", "jax"):
            fail(f"--framework: unknown framework {fw!r}; allowed: torch, jax")
    for dt in dtypes:
        if dt not in ("fp32", "bf16"):
            fail(f"--precision: unknown value {dt!r}; allowed: fp32, bf16")
    if threads < 0:
        fail(f"--threads must be >= 0 (0: all cores), got {threads}")
    if timeout <= 0:
        fail(f"--timeout must be a positive number of seconds, got {timeout:g}")
    shown: list[tuple[str, Peak | None]] = []
    problems = []
    if remeasure:
        with tempfile.TemporaryDirectory(prefix="twinbench-peak-") as tmp:
            for fw in fws:
                for dt in dtypes:
                    path = Path(tmp, f"{fw}-{dt}.json")
                    with console.status(f"measuring the {fw} {dt} matmul peak"):
                        code, reason = runner.run_module("twinbench.measure.peak",
                                                         [fw, dt, str(threads), str(path), "--remeasure"], timeout)
                    if code != 0:
                        problems.append(f"{fw} {dt}: the measurement failed: {reason}")
                        continue
                    peak = Peak.from_json(json.loads(path.read_text()))
                    assert peak is not None
                    shown.append((peak.key, peak))
                    if not peak.trusted:
                        problems.append(f"{fw} {dt}: " + "; ".join(peak.problems()) + " (not trusted: "
                                        "re-run `twinbench peak --remeasure` when the machine is idle)")
    else:
        shown = [(k, p) for k, p in cached_peaks() if k.split("|")[0] in fws]
    if not shown and not problems:
        out.print(f"no matmul peak cached in {cache_path()}: a run measures its own the first time; "
                  "`twinbench peak --remeasure` measures them now", highlight=False)
        return
    table = Table(header_style="bold", title=f"matmul peaks ({cache_path()})", title_justify="left")
    for c in ("framework", "device", "dtype", "threads", "versions", "GFLOP/s", "spread", "age", "load/core",
              "status"):
        table.add_column(c, justify="right" if c in ("threads", "GFLOP/s", "spread", "age", "load/core") else "left")
    for key, p in shown:
        if p is None:  # an entry of the first cache format: a bare number, never used again
            parts = [*key.split("|"), "", "", "", ""]
            table.add_row(parts[0], f"{parts[2]} ({parts[1]})", parts[3], parts[4].removeprefix("threads="), "—",
                          "—", "—", "—", "—", "stale (old format)", style="dim")
            continue
        vers = ", ".join(f"{k} {v}" for k, v in sorted(p.versions.items()))
        load = "—" if p.load_per_core is None else f"{p.load_per_core:.2f}"
        table.add_row(p.framework, f"{p.device} ({p.platform})", p.dtype, str(p.threads), vers,
                      f"{p.tflops * 1e3:,.1f}", f"{p.spread:.1%}", fmt_age(p.age_s()), load,
                      p.status(), style=None if p.trusted else "yellow")
    out.print(table)
    if any(p is None or not p.trusted for _, p in shown) and not remeasure:
        out.print("  not ok: measured again by the next run on a quiet machine (load <= 0.5 per core), or now "
                  "with `twinbench peak --remeasure`", highlight=False)
    if problems:
        fail("peak " + " | ".join(problems), code=1)


@app.command("report")
def report_cmd(
    directory: Path = typer.Argument(..., help="results directory (holds results.jsonl; claims.json, "
                                               "advice.json when present)"),
    plan_steps: Optional[int] = typer.Option(  # noqa: UP045
        None, help="planned run length for totals and break-even plots; default: advice.json's, else 1000"),
    against: Optional[Path] = typer.Option(  # noqa: UP045
        None, help="an older results directory: add `twinbench diff AGAINST DIRECTORY` (ratios with their "
                   "intervals, and a plot of them) to the report"),
) -> None:
    """Write report.html (self-contained, plots embedded) and report.md (plots in plots/) for a results dir."""
    from twinbench.diff import DiffError
    from twinbench.report.page import ReportError, write

    if plan_steps is not None and plan_steps <= 0:
        fail(f"--plan-steps must be a positive integer, got {plan_steps}")
    try:
        html_path, md_path, res = write(directory, plan_steps, against=against)
    except (ReportError, DiffError) as e:
        fail(str(e))
    if res.skipped:
        console.print(f"[yellow]warning:[/] skipped {res.skipped} malformed line(s) of "
                      f"{directory / runner.RESULTS}", highlight=False)
    out.print(f"report: {html_path} (Markdown: {md_path}), {len(res.records)} record(s)", highlight=False)


@app.command("diff")
def diff_cmd(
    old: Path = typer.Argument(..., help="the results before the change: a results directory or results.jsonl"),
    new: Path = typer.Argument(..., help="the results after it"),
    fail_above: Optional[float] = typer.Option(  # noqa: UP045
        None, "--fail-above", metavar="PCT", help="CI gate: exit 1 when a matched run is slower by more than PCT "
                                                  "percent with its whole 95% interval above that"),
    json_path: Optional[Path] = typer.Option(None, "--json", help="write the diff as JSON"),  # noqa: UP045
) -> None:
    """Did a change make training faster or slower, beyond the noise? Matches the runs of OLD and NEW by what
    they ran and gives each step-time ratio NEW/OLD with a 95% interval over repeats (compare --repeats N)."""
    from rich.table import Table

    from twinbench import diff as tdiff
    from twinbench.report.table import fmt_bytes

    if fail_above is not None and not fail_above >= 0:
        fail(f"--fail-above must be >= 0 (percent), got {fail_above:g}")
    check_json(json_path)
    skipped: list[str] = []
    try:
        d = tdiff.diff(tdiff.load(old, skipped), tdiff.load(new, skipped))
    except tdiff.DiffError as e:
        fail(str(e))
    for line in skipped:
        console.print(f"warning: {line}", highlight=False, markup=False)
    if skipped and fail_above is not None:
        fail("--fail-above: cannot pass a gate over results with lines that are not records (NaN or non-positive "
             "step times, garbage): see the warning(s) above")
    table = Table(title=f"twinbench diff {old} -> {new}")
    for col in ("run", "OLD step ms", "NEW step ms", "NEW/OLD [95% CI]", "verdict", "compile s", "1st step s",
                "peak mem", "MFU", "losses"):
        table.add_column(col, justify="left" if col in ("run", "verdict") else "right")

    def pair(x: dict, fmt) -> str:
        o, n = x["old"], x["new"]
        return f"{fmt(o)} -> {fmt(n)}" if o is not None and n is not None else "-"

    colors = {tdiff.SLOWER: "red", tdiff.FASTER: "green"}
    for p in d.pairs:
        ms = lambda v: f"{statistics.median(v):.1f} ({len(v)}x)"  # noqa: E731
        verdict = f"[{colors[p.verdict]}]{p.verdict}[/]" if p.verdict in colors else p.verdict
        table.add_row(p.run, ms(p.old_ms), ms(p.new_ms), tdiff.fmt_ratio(p), verdict,
                      pair(p.deltas["compile_s"], lambda v: f"{v:.2f}"),
                      pair(p.deltas["first_step_s"], lambda v: f"{v:.2f}"),
                      pair(p.deltas["peak_mem_bytes"], fmt_bytes),
                      pair(p.deltas["mfu"], lambda v: f"{v:.0%}"),
                      "same" if p.losses_agree else ("differ" if p.losses_agree is False else "-"))
    out.print(table)
    for line in tdiff.lines(d):
        out.print(f"  {line}", highlight=False, soft_wrap=True)
    if json_path:
        write_text(json_path, json.dumps(d.to_dict(), indent=1), "--json")
    if fail_above is not None:
        failing = d.gate(fail_above)
        for p in failing:
            out.print(f"  FAIL: {p.run} is slower by more than {fail_above:g}%: {tdiff.fmt_ratio(p)}", highlight=False)
        if failing:
            raise typer.Exit(1)


@app.command()
@with_spec_flags
def advise(
    preset: str = PRESET_OPTION,
    framework: str = FRAMEWORK_OPTION,
    strategies: Optional[str] = typer.Option(  # noqa: UP045
        None, help="candidate strategies (as in compare); default: each framework's default set, "
                   "'all' for every registered base"),
    plan_steps: int = typer.Option(20000, help="steps of the training run you plan"),
    changes_per_day: int = typer.Option(0, help="model changes a day; each one costs a cold compile"),
    out_dir: Optional[Path] = typer.Option(  # noqa: UP045
        None, "--out", help="results directory; default runs/advise-<timestamp>; runs already there are reused"),
    timeout: float = TIMEOUT_OPTION,
    trace: Optional[Path] = TRACE_OPTION,  # noqa: UP045
    model: Optional[str] = typer.Option(  # noqa: UP045
        None, "--model", help="your own PyTorch model, FILE.py:build, advised on instead of a twin (see compare --model)"),
    jax_model: Optional[str] = typer.Option(  # noqa: UP045
        None, "--jax-model", help="your own JAX port of --model, FILE.py:build_jax (strategy 'port')"),
    **overrides: Any,
) -> None:
    """Measure each framework's strategies here and say which framework to use for a planned run, and why."""
    from twinbench.advise import advise as decide
    from twinbench.strategies import registry

    if plan_steps <= 0:
        raise SpecError(f"--plan-steps must be a positive integer, got {plan_steps}")
    if changes_per_day < 0:
        raise SpecError(f"--changes-per-day must be >= 0, got {changes_per_day}")
    user = {"user_model": model or "", "user_jax_model": jax_model or ""}
    specs = [s for s in build_specs(preset, framework, strategies, overrides, **trace_top(trace), **user)
             if not getattr(registry.get(s.framework, s.strategy), "known_failing", False)]
    target = out_dir or Path("runs") / time.strftime("advise-%Y%m%d-%H%M%S")
    ready_outputs(target, None, timeout)
    if model:  # check the user's model and write its initial weights once, before any run (exit 2 if bad)
        from twinbench.byo import plan as byo_plan

        specs, _ = byo_plan.prepare(specs, target, timeout)
    records = run_and_report(specs, target, timeout, plan_steps, None, "twinbench advise", report=False)
    advice = decide(records, plan_steps, changes_per_day, results=str(target / runner.RESULTS))
    write_text(target / "advice.json", json.dumps(advice, indent=1), "advice.json")
    out.print()
    for line in advice["lines"]:
        out.print(line, highlight=False, markup=False)
    out.print(f"  advice: {target / 'advice.json'} (ids in [brackets] are run_ids in "
              f"{target / runner.RESULTS})", highlight=False, markup=False)
    write_report(target, plan_steps)
    if advice["recommendation"]["framework"] is None:
        raise typer.Exit(1)


@app.command()
def doctor(
    script: Path = typer.Argument(..., help="your training script (a .py file)", show_default=False),
    script_args: Optional[list[str]] = typer.Argument(  # noqa: UP045
        None, help="arguments for the script, after --", show_default=False),
    steps: Optional[int] = typer.Option(None, help="end the script cleanly after N training steps"),  # noqa: UP045
    timeout: float = typer.Option(600.0, help="seconds before the script is stopped"),
    json_path: Optional[Path] = typer.Option(None, "--json", help="also write the findings here as JSON"),  # noqa: UP045
    python: Optional[str] = typer.Option(  # noqa: UP045
        None, help="run the script under this interpreter (its virtual environment's python); default: twinbench's"),
) -> None:
    """Run your own training script and say why it is slow: each finding with evidence and the fix.

    Usage: twinbench doctor train.py [--steps N] [--timeout S] [--json FILE] [--python PATH] [-- SCRIPT_ARGS...].
    Exit code 0: nothing of severity warning or worse; 1: something was found; 2: the doctor could not run
    (or found no training step: mark it with twinbench.doctor.step());
    3: one of the doctor's own instruments or checks failed (printed; the findings may be incomplete).
    """
    from twinbench.doctor import DoctorError, run_doctor
    from twinbench.doctor.report import no_step_message, render

    if steps is not None and steps <= 0:
        fail(f"--steps must be a positive integer, got {steps}")
    check_timeout(timeout)
    check_json(json_path)
    try:
        with console.status(f"running {script} under the doctor"):
            result = run_doctor(script, list(script_args or []), steps, timeout, python=python)
    except DoctorError as e:
        fail(str(e))
    except KeyboardInterrupt:
        fail(f"interrupted; {script} was stopped", code=130)
    no_step = no_step_message(result.observations, str(script))
    if no_step and not result.self_errors:  # nothing per step could be said: not a clean bill of health
        if json_path:
            write_text(json_path, json.dumps(result.to_json(str(script)), indent=1), "--json")
        fail(no_step)
    render(out, result.findings, result.observations, str(script))
    if json_path:
        write_text(json_path, json.dumps(result.to_json(str(script)), indent=1), "--json")
    if result.timed_out:
        fail(f"{script} did not finish within --timeout {timeout:g} s; stopped after "
             f"{result.observations.get('steps', 0)} steps (the findings above cover that part); "
             "use --steps N to diagnose a long run quickly")
    if result.self_errors:  # an incomplete report must not pass for a clean one
        raise typer.Exit(3)
    raise typer.Exit(1 if result.serious else 0)


@app.command("explain")
@with_spec_flags
def explain_cmd(
    run_a: str = typer.Argument(..., help="framework:strategy (run now), RESULTS_DIR:framework/strategy, or a "
                                "trace file/directory (torch.profiler .json[.gz], JAX *.xplane.pb)"),
    run_b: Optional[str] = typer.Argument(None, help="the run or trace compared with A, same forms"),  # noqa: UP045
    preset: str = PRESET_OPTION,
    out_dir: Optional[Path] = typer.Option(None, "--out", help="results directory; default runs/<timestamp>"),  # noqa: UP045
    json_path: Optional[Path] = typer.Option(None, "--json", help="also write the explanation here"),  # noqa: UP045
    scopes: bool = typer.Option(False, "--scopes", help="expand phases by scope (block0.attn...) not category"),
    timeout: float = TIMEOUT_OPTION,
    model: Optional[str] = typer.Option(None, "--model", help="your own PyTorch model, FILE.py:build"),  # noqa: UP045
    jax_model: Optional[str] = typer.Option(None, "--jax-model", help="its JAX port, FILE.py:build_jax"),  # noqa: UP045
    step_marker: Optional[str] = typer.Option(None, "--step-marker", help="traces: the annotation that marks a step"),  # noqa: UP045
    rank: Optional[int] = typer.Option(None, "--rank", help="traces: which rank's file (default the lowest)"),  # noqa: UP045
    device: Optional[int] = typer.Option(None, "--device", help="traces: which device (default the first)"),  # noqa: UP045
    hlo: Optional[str] = typer.Option(None, "--hlo", help="JAX traces: compiled HLO text (file or --xla_dump_to dir)"),  # noqa: UP045
    try_flags: Optional[list[str]] = typer.Option(  # noqa: UP045
        None, "--try", help="run one side again with one option and show the rows that moved: 'B:--xla_...=V' "
        "(an XLA flag), 'B:threads=1' (a spec option), 'A:env:NAME=V'; repeatable"),
    depths: Optional[str] = typer.Option(  # noqa: UP045
        None, "--depths", help="compile each JAX side's step at these layer counts (e.g. 2,4) and name the "
        "compiled work that grows faster than the layer count"),
    **overrides: Any,
) -> None:
    """Where each run's (or trace's) step time goes (phases x op categories), and the gap between A and B."""
    from twinbench.explain import command

    target = out_dir or Path("runs") / time.strftime("%Y%m%d-%H%M%S")
    expand = "scopes" if scopes else "categories"
    check_timeout(timeout)
    check_json(json_path)
    try:
        if command.trace_file.is_trace(run_a) or run_b is None or command.trace_file.is_trace(run_b):
            result = command.explain_traces(run_a, run_b, expand, step_marker, rank, device, hlo)
        else:
            result = command.explain(run_a, run_b, preset, overrides, target, timeout, model, jax_model, expand,
                                     lambda line: out.print(line, highlight=False))
    except command.ExplainError as e:
        fail(str(e))
    command.print_pair(result, out)
    if try_flags:
        from twinbench.explain import try_flag

        try:
            result["tries"] = [try_flag.run(result, t, target, timeout, lambda line: out.print(line, highlight=False))
                               for t in try_flags]
        except try_flag.TryError as e:
            fail(str(e))
        for t in result["tries"]:
            try_flag.print_try(t, out)
    if depths:
        from twinbench.explain import depth

        try:
            layer_counts = sorted({int(d) for d in depths.split(",") if d.strip()})
        except ValueError:
            fail(f"--depths {depths!r}: layer counts separated by commas, e.g. 2,4")
        if len(layer_counts) < 2 or layer_counts[0] < 1:
            fail(f"--depths {depths!r}: at least two layer counts of 1 or more, e.g. 2,4")
        result["depth"] = depth.for_pair(result, layer_counts, target, timeout)
        for d in result["depth"]:
            out.print(f"  depth: {d['sentence']}", highlight=False)
    if json_path:
        write_text(json_path, json.dumps(result, indent=1), "--json")


def main() -> None:  # pragma: no cover - console entry point convenience
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
