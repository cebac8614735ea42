"""Reading and deciding from runs: ``report``, ``diff``, ``advise`` and ``explain``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import msgspec
import typer

from twinbench import runner
from twinbench.byo.plan import prepare_user, user_fields
from twinbench.cli.common import (
    FRAMEWORK_OPTION,
    OUTPUT_PANEL,
    OWN_MODEL_PANEL,
    PRESET_OPTION,
    RUN_PANEL,
    TIMEOUT_OPTION,
    TRACE_OPTION,
    TRACES_PANEL,
    app,
    check_json,
    check_places,
    check_timeout,
    console,
    fail,
    in_panel,
    out,
    ready_outputs,
    trace_dir,
    with_spec_flags,
    write_report,
    write_text,
)
from twinbench.cli.execute import run_and_report
from twinbench.limits import MAX_PLAN_STEPS, check_host, count
from twinbench.plan import Overrides, RunFields, build_specs
from twinbench.spec import SpecError

if TYPE_CHECKING:
    from twinbench.explain.result import Explained


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

    if plan_steps is not None and not 0 < plan_steps <= MAX_PLAN_STEPS:
        fail(f"--plan-steps must be a positive integer of at most {MAX_PLAN_STEPS:.0e}, got {count(plan_steps)}")
    try:
        html_path, md_path, res = write(directory, plan_steps, against=against)
    except (ReportError, DiffError, SpecError) as e:  # SpecError: a link where the report goes (folder_io)
        fail(str(e))
    except OSError as e:
        fail(f"{directory}: cannot write the report there ({e.strerror or e})")
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
    from twinbench import diff as tdiff

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
    out.print(tdiff.table(d, old, new))
    for line in tdiff.lines(d):
        out.print(f"  {line}", highlight=False, soft_wrap=True)
    if json_path:
        write_text(json_path, json.dumps(msgspec.to_builtins(d), indent=1), "--json")
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
        None, "--out", help="results directory; default runs/advise-<timestamp>; runs already there are reused",
        rich_help_panel=OUTPUT_PANEL),
    timeout: float = TIMEOUT_OPTION,
    trace: Optional[Path] = TRACE_OPTION,  # noqa: UP045
    model: Optional[str] = typer.Option(  # noqa: UP045
        None, "--model", help="your own PyTorch model, FILE.py:build, advised on instead of a twin (see compare --model)",
        rich_help_panel=OWN_MODEL_PANEL),
    jax_model: Optional[str] = typer.Option(  # noqa: UP045
        None, "--jax-model", help="your own JAX port of --model, FILE.py:build_jax (strategy 'port')",
        rich_help_panel=OWN_MODEL_PANEL),
    **overrides: Any,
) -> None:
    """Measure each framework's strategies here and say which framework to use for a planned run, and why."""
    from twinbench.advise import advise as decide

    if not 0 < plan_steps <= MAX_PLAN_STEPS:
        raise SpecError(f"--plan-steps must be a positive integer of at most {MAX_PLAN_STEPS:.0e}, got "
                        f"{count(plan_steps)}")
    if changes_per_day < 0:
        raise SpecError(f"--changes-per-day must be >= 0, got {changes_per_day}")
    user = user_fields(model, jax_model)
    fields = RunFields(trace_dir=trace_dir(trace), **user).kwargs()
    specs = build_specs(preset, framework, strategies, overrides, **fields)
    check_host(specs)  # a shape the host cannot build or train: refused before any run
    target = out_dir or Path("runs") / time.strftime("advise-%Y%m%d-%H%M%S")
    check_places(specs)
    ready_outputs(target, None, timeout)
    specs, _ = prepare_user(specs, target, timeout)  # --model: checked, initial weights written (exit 2 if bad)
    records = run_and_report(specs, target, timeout, plan_steps, None, "twinbench advise", report=False)
    advice = decide(records, plan_steps, changes_per_day, results=str(target / runner.RESULTS))
    write_text(target / "advice.json", json.dumps(msgspec.to_builtins(advice), indent=1), "advice.json", inside=target)
    out.print()
    for line in advice.lines:
        out.print(line, highlight=False, markup=False)
    out.print(f"  advice: {target / 'advice.json'} (ids in [brackets] are run_ids in "
              f"{target / runner.RESULTS})", highlight=False, markup=False)
    write_report(target, plan_steps)
    if advice.recommendation is None or advice.recommendation.framework is None:
        raise typer.Exit(1)



@app.command("explain")
@with_spec_flags
def explain_cmd(
    run_a: str = typer.Argument(..., help="a trace file/directory (torch.profiler .json[.gz], JAX *.xplane.pb or "
                                "the folder jax.profiler wrote), framework:strategy (run now), or "
                                "RESULTS_DIR:framework/strategy"),
    run_b: Optional[str] = typer.Argument(None, help="the run or trace compared with A, same forms"),  # noqa: UP045
    json_path: Optional[Path] = typer.Option(None, "--json", help="also write the explanation here"),  # noqa: UP045
    scopes: bool = typer.Option(False, "--scopes", help="expand phases by scope (block0.attn...) not category"),
    step_marker: Optional[str] = typer.Option(  # noqa: UP045
        None, "--step-marker", help="the annotation that marks a step (default: ProfilerStep#N, your "
        "StepTraceAnnotation or record_function names, else the repeating pattern)", rich_help_panel=TRACES_PANEL),
    rank: Optional[int] = typer.Option(None, "--rank", help="which rank's file (default the lowest)",  # noqa: UP045
                                       rich_help_panel=TRACES_PANEL),
    device_index: Optional[int] = typer.Option(  # noqa: UP045
        None, "--device-index", help="which device of the trace, counted from 0 (default the first)",
        rich_help_panel=TRACES_PANEL),
    device_alias: Optional[int] = typer.Option(None, "--device", hidden=True),  # noqa: UP045  (earlier spelling)
    hlo: Optional[str] = typer.Option(  # noqa: UP045
        None, "--hlo", help="JAX traces: the compiled HLO text (a file, or the --xla_dump_to folder)",
        rich_help_panel=TRACES_PANEL),
    preset: str = in_panel(PRESET_OPTION, RUN_PANEL),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="results directory; default runs/<timestamp>",  # noqa: UP045
                                           rich_help_panel=RUN_PANEL),
    timeout: float = in_panel(TIMEOUT_OPTION, RUN_PANEL),
    model: Optional[str] = typer.Option(None, "--model", help="your own PyTorch model, FILE.py:build",  # noqa: UP045
                                        rich_help_panel=RUN_PANEL),
    jax_model: Optional[str] = typer.Option(None, "--jax-model", help="its JAX port, FILE.py:build_jax",  # noqa: UP045
                                            rich_help_panel=RUN_PANEL),
    steps: Optional[str] = typer.Option(  # noqa: UP045
        None, "--steps", help="traces: a window of the steps found, A:B (from 0, A to B-1; A: or :B), e.g. 100:120; "
        "default every step. Runs: the number of training steps (the preset's override)", rich_help_panel=TRACES_PANEL),
    try_flags: Optional[list[str]] = typer.Option(  # noqa: UP045
        None, "--try", help="run one side again with one option and show the rows that moved: 'B:--xla_...=V' "
        "(an XLA flag), 'B:threads=1' (a spec option), 'A:env:NAME=V'; repeatable", rich_help_panel=RUN_PANEL),
    depths: Optional[str] = typer.Option(  # noqa: UP045
        None, "--depths", help="compile each JAX side's step at these layer counts (e.g. 2,4) and name the "
        "compiled work that grows faster than the layer count", rich_help_panel=RUN_PANEL),
    **overrides: Any,
) -> None:
    """Where each run's (or trace's) step time goes (phases x op categories), and the gap between A and B."""
    from twinbench.explain import command

    target = out_dir or Path("runs") / time.strftime("%Y%m%d-%H%M%S")
    expand = "scopes" if scopes else "categories"
    check_timeout(timeout)
    check_json(json_path)
    traces = command.trace_file.is_trace(run_a) or run_b is None or command.trace_file.is_trace(run_b)
    layer_counts = _depths(depths, traces, [run_a, run_b or ""]) if depths else []
    if steps is not None and not traces:  # runs: --steps N is the spec's training steps, as for compare
        if not steps.strip().isdigit():
            fail(f"--steps {steps!r}: for runs, the number of training steps (an integer); A:B picks a window of "
                 "a trace's steps")
        overrides["steps"] = int(steps)
        steps = None
    if try_flags:  # every --try understood before any run
        from twinbench.explain import try_flag

        if traces:
            fail("--try runs a side again: give two runs (framework:strategy or RESULTS_DIR:framework/strategy), "
                 "not traces")
        try:
            for t in try_flags:
                try_flag.check(t)
        except try_flag.TryError as e:
            fail(str(e))
    device = device_index if device_index is not None else device_alias
    try:
        with runner.interruptible(str(target)):  # Ctrl-C or SIGTERM in any of explain's runs: exit 130, one line
            result = _explain(run_a, run_b, traces, preset, overrides, target, timeout, model, jax_model, expand,
                              step_marker, rank, device, hlo, steps, try_flags or [], layer_counts)
    except runner.Interrupted:  # a folder is named only where runs wrote one (traces are only read)
        fail("interrupted" + (f"; what finished is in {target}" if not traces and target.is_dir() else ""), code=130)
    if json_path:
        write_text(json_path, command.result.to_json(result).decode(), "--json")  # versioned (explain/result.py)


def _explain(run_a: str, run_b: str | None, traces: bool, preset: str, overrides: Overrides, target: Path,
             timeout: float, model: str | None, jax_model: str | None, expand: str, step_marker: str | None,
             rank: int | None, device: int | None, hlo: str | None, steps: str | None, try_flags: list[str],
             layer_counts: list[int]) -> Explained:
    """explain's work after its flags are read: the pair, then each --try and --depths. Their variants pass
    compare's checks (validation, the files they read, the memory their shape needs) before any run starts."""
    from twinbench.explain import command, depth, try_flag

    def before(sides: list[Any]) -> None:
        for t in try_flags:
            try_flag.preflight(t, sides)
        if layer_counts:
            depth.preflight(layer_counts, sides)

    try:
        if traces:
            result = command.explain_traces(run_a, run_b, expand, step_marker, rank, device, hlo, steps)
        else:
            result = command.explain(run_a, run_b, preset, overrides, target, timeout, model, jax_model, expand,
                                     lambda line: out.print(line, highlight=False), before=before)
    except (command.ExplainError, try_flag.TryError) as e:
        fail(str(e))
    command.print_pair(result, out)
    if try_flags:
        try:
            result.tries = [try_flag.run(result, t, target, timeout, lambda line: out.print(line, highlight=False))
                            for t in try_flags]
        except (try_flag.TryError, SpecError) as e:
            fail(str(e))
        for t in result.tries:
            try_flag.print_try(t, out)
    if layer_counts:
        try:
            result.depth = depth.for_pair(result, layer_counts, target, timeout)
        except SpecError as e:
            fail(str(e))
        for d in result.depth:
            out.print(f"  depth: {d.sentence}", highlight=False)
    return result


def _depths(depths: str, traces: bool, sides: list[str]) -> list[int]:
    """``--depths 2,4`` read before any run: at least two layer counts, and a JAX side to compile them for."""
    try:
        counts = sorted({int(d) for d in depths.split(",") if d.strip()})
    except ValueError:
        fail(f"--depths {depths!r}: layer counts separated by commas, e.g. 2,4")
    if len(counts) < 2 or counts[0] < 1:
        fail(f"--depths {depths!r}: at least two layer counts of 1 or more, e.g. 2,4")
    frameworks = [a.rpartition(":")[2].split("/")[0] if "/" in a.rpartition(":")[2] else a.split(":")[0]
                  for a in sides]
    if traces or "jax" not in frameworks:
        fail(f"--depths {depths}: compiles a JAX side's step at other depths; neither side is a JAX run "
             "(jax:STRATEGY or RESULTS_DIR:jax/STRATEGY)")
    return counts
