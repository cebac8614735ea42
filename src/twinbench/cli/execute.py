"""Running specs from a command: the launcher flags (``with_launcher_flags``) and ``run_and_report``:
progress, the table, summary.md, --json and the report."""

from __future__ import annotations

import contextvars
import functools
import inspect
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import typer

from twinbench import runner
from twinbench.cli.common import UNSAVED, console, fail, out, write_report, write_text
from twinbench.record import Record
from twinbench.spec import RunSpec, SpecError

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
                   title: str, report: bool = True, retry_failed: bool = False,
                   resume_command: str | None = None) -> list[Record]:
    """Run specs with a progress bar (one line per finished run when stderr is not a terminal), then print the
    table and write summary.md (every run of the results file) and --json; with ``report`` also report.html +
    report.md (see :func:`write_report`). ``resume_command``: what an interrupted run tells the user to run to
    continue (default ``--resume OUT_DIR``, the compare/sweep flag)."""
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from twinbench.report import table

    jobs = JOBS.get()
    if jobs is not None and jobs.dry_run:  # the jobs it would submit, and nothing else
        from twinbench.launch.jobs import describe

        for spec in specs:
            out.print(describe(spec, jobs, timeout), highlight=False, soft_wrap=True, markup=False)
        raise typer.Exit(0)
    if jobs is None or not jobs.jobs:  # runs on this host: the GPUs they ask for must be here, before any starts
        from twinbench.measure import device

        problem = device.devices_problem([(s.label(), s.launch.devices // max(s.launch.num_processes, 1)) for s in specs],
                                         device.gpu_count(), os.environ.get("JAX_PLATFORMS"))
        if problem:
            fail(problem)
    from twinbench.byo.plan import parity_summary, read_parity
    from twinbench.record import duplicates, for_spec, latest_per_run, read_records, varying

    terminal = console.is_terminal
    started = time.perf_counter()
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                  TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(), console=console,
                  transient=True, disable=not terminal) as progress:
        task = progress.add_task("starting", total=len(specs))
        count = [0]
        planned = [for_spec(s, "planned") for s in specs]
        vary = varying(planned)  # each run named as its row of the table will be: jax/jit warm, layers=8
        names = {r.run.run_id: r.label(vary) for r in planned}

        def on_start(spec: RunSpec) -> None:
            progress.update(task, description=f"running {names[spec.run_id()]} ({spec.preset})")

        def on_done(spec: RunSpec, record: Record) -> None:
            progress.advance(task)
            count[0] += 1
            if not terminal:  # a log: one line per finished run, so a long compare is never silent
                step = record.timing.step_ms
                how = f"{step:.1f} ms/step" if isinstance(step, (int, float)) else record.error or ""
                console.print(f"run {count[0]}/{len(specs)} {names[spec.run_id()]} ({spec.preset}): {record.status}"
                              f"{', ' + how if how else ''} [{time.perf_counter() - started:.0f} s]",
                              highlight=False, markup=False, soft_wrap=True)
            elif record.status != "ok":
                progress.console.print(f"[red]{record.status}[/] {names[spec.run_id()]}: {record.error}",
                                       highlight=False)

        notes: list[str] = []
        try:
            records = runner.run_many(specs, out_dir, timeout, on_start, on_done, jobs=jobs,
                                      retry_failed=retry_failed, notes=notes)
        except runner.Interrupted:
            progress.stop()
            fail(f"interrupted; finished runs are in {out_dir / runner.RESULTS}; "
                 f"continue with {resume_command or f'--resume {out_dir}'}", code=130)
        except SpecError as e:
            progress.stop()
            fail(str(e))
    UNSAVED.extend(notes)
    table.print_table(out, table.rich_table(records, plan_steps, title))
    parity = parity_summary(read_parity(out_dir))
    from twinbench.measure.interference import disturbed

    shaken = disturbed(records, names)  # which side other processes disturbed, and the flag that fixes it
    for line in table.conditions(records) + shaken + table.crossings(records) + ([parity] if parity else []):
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
    summary = table.markdown(shown, plan_steps, title)
    if parity:
        summary += f"\n- {parity}\n"
    write_text(out_dir / "summary.md", summary, "summary.md", inside=out_dir)
    if json_path:
        write_text(json_path, json.dumps([r.flat() for r in records], indent=1), "--json")  # the flat layout
    out.print(f"  results: {out_dir / runner.RESULTS}, {out_dir / 'summary.md'}", highlight=False)
    if report:
        write_report(out_dir, plan_steps)
    for line in notes:
        console.print(f"not saved: {line}", highlight=False, markup=False)
    return records

