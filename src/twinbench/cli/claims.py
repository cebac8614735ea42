"""``claims``: each practitioner claim tested here, with its verdict; ``--plan`` what that will cost."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import msgspec
import typer

from twinbench import folder_io
from twinbench.byo.plan import DIR as BYO_DIR
from twinbench.byo.plan import prepare_user, user_fields
from twinbench.cli.common import (
    MEASURE_PANEL,
    OUTPUT_PANEL,
    OWN_MODEL_PANEL,
    PLAN_PANEL,
    TRACE_OPTION,
    app,
    check_places,
    check_timeout,
    console,
    fail,
    out,
    ready_outputs,
    trace_dir,
    write_report,
    write_text,
)
from twinbench.cli.execute import run_and_report, with_launcher_flags
from twinbench.plan import RunFields
from twinbench.spec import SpecError

if TYPE_CHECKING:
    from twinbench.claims.core import Claim, Setup
    from twinbench.spec import RunSpec

#: What a claims run was asked, kept in its results directory so that ``--resume DIR`` continues the same suite.
SETTINGS = "claims-settings.json"
#: what a claims run's settings may set when resumed: the suite's choices, each of its JSON type. A model to
#: import and a place to write are never taken from a folder (``model``, ``jax_model`` are only checked against
#: the command line's; ``trace`` is not read)
RESUMED: dict[str, tuple[type, ...]] = {"quick": (bool,), "only": (str,), "preset": (str,), "plan_steps": (int,),
                                        "repeats": (int,), "device": (str,), "model": (str,), "jax_model": (str,),
                                        "threads": (int,)}


class Settings(msgspec.Struct, kw_only=True, frozen=True):
    """``claims-settings.json``: what a claims run was asked (None: the command line's), as :data:`RESUMED`
    allows it."""

    quick: bool | None = None
    only: str | None = None
    preset: str | None = None
    plan_steps: int | None = None
    repeats: int | None = None
    device: str | None = None
    model: str | None = None
    jax_model: str | None = None
    threads: int | None = None


def resumed(resume: Path) -> Settings:
    """The settings of the claims run in ``resume`` through the allow-list :data:`RESUMED` (a SpecError, one
    line, when it holds none or a field of the wrong type). Read bounded, as data: folder_io."""
    from twinbench.folder_io import read_json, typed

    path = resume / SETTINGS
    try:
        saved = read_json(path)
    except (OSError, ValueError) as e:
        why = "no claims run there" if isinstance(e, FileNotFoundError) else f"cannot read it ({e})"
        raise SpecError(f"--resume {resume}: {why} ({SETTINGS} is written when a claims run starts)") from None
    if not isinstance(saved, dict):
        raise SpecError(f"--resume {resume}: {SETTINGS} is not a claims run's settings")
    return msgspec.convert(typed(path, saved, RESUMED), Settings)


def same_model(flag: str, saved: str | None, given: str | None, resume: Path) -> None:
    """A resumed claims run imports a model only when the command line names it again, and the same one."""
    from twinbench.folder_io import terminal

    def where(spec: str | None) -> str:
        file, _, attr = (spec or "").rpartition(":")
        return f"{Path(file).expanduser().resolve()}:{attr}" if file else str(spec)

    if saved and not given:
        raise SpecError(f"--resume {resume}: its claims ran {flag} {terminal(saved, 120)}; a results folder never "
                        f"chooses the code that runs: give {flag} again to resume")
    if given and where(saved) != where(given):
        raise SpecError(f"--resume {resume}: {flag} {given} is not the model its claims ran "
                        f"({terminal(saved, 120) if saved else 'the twins'})")


def where(device: str | None) -> tuple[str, int, str]:
    """(platform, devices, datasheet name) the suite plans for: ``--device``'s datasheet, else this machine."""
    from twinbench.claims.sizes import device_here, devices_here
    from twinbench.measure.platforms import here as platform_here

    if device and device.strip().lower() != "here":  # "here", predict's name for this machine: as without --device
        from twinbench.predict.datasheets import UnknownDevice, lookup

        try:
            sheet = lookup(device)
        except UnknownDevice as e:
            raise SpecError(str(e)) from None
        here = platform_here()
        return sheet.platform, devices_here(here) if here == sheet.platform else 1, sheet.name
    platform = platform_here()
    return platform, devices_here(platform), device_here(platform)


@app.command()
@with_launcher_flags
def claims(
    quick: bool = typer.Option(False, "--quick", help="fewer, shorter runs: the small presets on a CPU (under 15 "
                               "minutes on 2 cores); the seeds' sizes on a GPU/TPU, some experiments left out (under "
                               "20 minutes on one TPU v5e)"),
    only: Optional[str] = typer.Option(None, help="comma-separated claim ids, e.g. C1,C7 (default: every claim)"),  # noqa: UP045
    preset: Optional[str] = typer.Option(  # noqa: UP045
        None, help="GPT preset of most runs (tiny, small, gpt2-124m, gpt-350m); the size claims also use the next "
                   "larger one; default: tiny with --quick, else small (a GPU/TPU: gpt2-124m, and llama-300m)"),
    out_dir: Optional[Path] = typer.Option(  # noqa: UP045
        None, "--out", help="results directory; default runs/claims-<timestamp>; runs and probes already there "
                            "are reused", rich_help_panel=OUTPUT_PANEL),
    resume: Optional[Path] = typer.Option(  # noqa: UP045
        None, "--resume", help="continue an interrupted claims run in this results directory: its settings, its "
                               "finished runs and probes kept, the rest run", rich_help_panel=OUTPUT_PANEL),
    json_path: Optional[Path] = typer.Option(None, "--json", help="also write the list of verdicts (with --plan: "  # noqa: UP045
                                             "the plan) here", rich_help_panel=OUTPUT_PANEL),
    plan_steps: int = typer.Option(20000, help="steps of a full training run (compile shares, break-even verdicts)",
                                   rich_help_panel=MEASURE_PANEL),
    repeats: Optional[int] = typer.Option(  # noqa: UP045
        None, help="runs of every timed configuration, interleaved; verdicts on the median, inconclusive when the "
                   "repeats straddle a threshold (default: 3 on a CPU; 1 with --quick on a GPU/TPU, else 2)",
        rich_help_panel=MEASURE_PANEL),
    timeout: float = typer.Option(900.0, help="seconds before one run or probe is stopped and marked failed",
                                  rich_help_panel=MEASURE_PANEL),
    threads: int = typer.Option(0, "--threads", help="CPU threads of every run (0: all cores); on a machine other "
                                "processes share, the cores they leave (a verdict's caveat names the number)",
                                rich_help_panel=MEASURE_PANEL),
    trace: Optional[Path] = TRACE_OPTION,  # noqa: UP045
    model: Optional[str] = typer.Option(  # noqa: UP045
        None, "--model", help="your own PyTorch model, FILE.py:build, in the claims whose experiment takes any model "
        "(C6, C7, C8, C12); the others say why they need a twin", rich_help_panel=OWN_MODEL_PANEL),
    jax_model: Optional[str] = typer.Option(  # noqa: UP045
        None, "--jax-model", help="your own JAX port of --model (FILE.py:build_jax): the JAX side of those claims",
        rich_help_panel=OWN_MODEL_PANEL),
    plan_only: bool = typer.Option(False, "--plan", help="run nothing: list each claim's runs (framework, strategy, "
                                   "size, platform) and the device time predict expects of them",
                                   rich_help_panel=PLAN_PANEL),
    device: Optional[str] = typer.Option(  # noqa: UP045
        None, "--device", help="the device to plan for with --plan (tpu-v5e, h200, ...: predict's datasheets); "
                               "default: this machine", rich_help_panel=PLAN_PANEL),
) -> None:
    """Test each practitioner claim (docs/claims.md) here: what ran, the numbers, the verdict, its rule."""
    from twinbench.claims import suite
    from twinbench.claims.core import GPT_LADDER, select, setup_for

    try:
        if resume is not None:
            if out_dir is not None and out_dir != resume:
                raise SpecError(f"--resume {resume} continues in that directory; --out {out_dir} names another")
            saved = resumed(resume)
            same_model("--model", saved.model, model, resume)
            same_model("--jax-model", saved.jax_model, jax_model, resume)
            quick = bool(saved.quick) or quick  # a setting the file leaves out: the command line's
            only, preset = saved.only or only, saved.preset or preset
            plan_steps, repeats = saved.plan_steps or plan_steps, saved.repeats or repeats
            threads = saved.threads or threads
            # the device to plan for is the command line's only: a claims run writes none, and a folder names no
            # place (a device planted in the file would be blamed on a --device never given)
        if device and not plan_only and resume is None:
            raise SpecError("--device names the device to plan for: use it with --plan")
        chosen = select(only)
        if preset is not None and preset not in GPT_LADDER:
            raise SpecError(f"--preset: unknown GPT preset {preset!r}; allowed: {', '.join(GPT_LADDER)}")
        if plan_steps <= 0:
            raise SpecError(f"--plan-steps must be a positive integer, got {plan_steps}")
        if threads < 0:
            raise SpecError(f"--threads must be 0 (all cores) or a positive integer, got {threads}")
        if repeats is not None and repeats <= 0:
            raise SpecError(f"--repeats must be a positive integer, got {repeats}")
        user = user_fields(model, jax_model)
        if model:  # only the claims whose experiment takes any model; the others say why not (claims/user.py)
            from twinbench.claims.user import split

            chosen, twin_lines = split(chosen)
            for line in twin_lines:
                out.print(f"  {line}", highlight=False, markup=False)
        platform, devices, sheet_name = where(device if plan_only else None)
        target = resume or out_dir or Path("runs") / time.strftime("claims-%Y%m%d-%H%M%S")
        setup = setup_for(platform, quick, preset=preset, devices=devices, device=sheet_name, plan_steps=plan_steps,
                          top=RunFields(trace_dir=trace_dir(trace), **user, threads=threads),
                          repeats=repeats)
        if setup.accelerator:  # C22's runs keep a trace explain reads for its reason
            setup = replace(setup, reason_traces=str((target / "traces").resolve()))
        per_claim, specs = suite.plan(chosen, setup)
    except SpecError as e:
        fail(str(e))
    rounds = suite.schedule(chosen, per_claim, specs, setup.repeats) if specs else []
    if plan_only:
        show_plan(chosen, setup, per_claim, rounds, sheet_name, json_path)
        return
    check_timeout(timeout)
    from twinbench.limits import check_host

    try:
        check_host(specs)  # the same preflight as compare's runs: a shape the host cannot hold, refused now
    except SpecError as e:
        fail(str(e))
    check_places(specs)  # --trace, the caches: writable, before any run
    existed = target.exists()
    ready_outputs(target, json_path, timeout)
    before = set(target.iterdir()) if target.is_dir() else set()
    try:
        specs, _ = prepare_user(specs, target, timeout, per_shape=True)  # --model: once per shape, before any run
    except SpecError as e:  # the model's check failed: one line, as in compare, and nothing of it left in --out
        for made in (set(target.iterdir()) if target.is_dir() else set()) - before:
            if made.name == BYO_DIR or made.name.startswith("shape-"):  # prepare_points' folders
                shutil.rmtree(made, ignore_errors=True)
        if not existed and not any(target.iterdir()):  # an --out made for this run is not left behind, empty
            target.rmdir()
        fail(str(e))
    if resume is None:  # the settings a --resume reads, once the model is known to run
        write_text(target / SETTINGS, json.dumps({"quick": quick, "only": only, "preset": preset, "plan_steps":
                                                  plan_steps, "repeats": repeats, "model": model, "jax_model":
                                                  jax_model, "device": None, "threads": threads or None}),
                   SETTINGS, inside=target)
    rounds = suite.schedule(chosen, per_claim, specs, setup.repeats) if specs else []
    start = time.perf_counter()
    measured = [c for c in chosen if not c.unmeasurable(setup)]
    n_probes = len({p for c in measured for p in c.probes})
    est = suite.estimate_s(rounds, n_probes) if not setup.accelerator else None
    factor, load = suite.load_factor()

    def span(s: float) -> str:
        return f"{s / 60:.0f} min" if s >= 120 else f"{s:.0f} s"

    when = (f"; about {span(est)} on an idle 2-core CPU" + (f", {span(est * factor)} at the load now ({load})"
                                                          if load else "") if est is not None
            else f" on the {setup.platform.upper()} at the seeds' sizes (`twinbench claims --plan` estimates the time)")
    out.print(f"  claims {', '.join(c.id for c in chosen)}: {len(specs)} configurations, {sum(map(len, rounds))} runs "
              f"({len(rounds)} repeat(s) of the timed ones, interleaved), {n_probes} probes{when}", highlight=False)
    again = f"`twinbench claims --resume {target}`"
    records = [run_and_report(rs, suite.repeat_dir(target, k), timeout, plan_steps, None,
                              f"twinbench claims, repeat {k + 1} of {len(rounds)}", report=False, resume_command=again)
               for k, rs in enumerate(rounds)]
    from twinbench import runner

    try:  # the probes write into --out too: under its lock, as the runs are (another twinbench there: one line)
        with runner.out_lock(target), console.status("probes") as status:
            probes = suite.run_probes(measured, target, timeout, lambda name: status.update(f"probe {name}"))
    except SpecError as e:
        fail(str(e))
    results = suite.verdicts(chosen, setup, per_claim, records, probes)
    suite.render(out, results)
    path = suite.write(results, target, json_path)
    out.print(f"  verdicts: {path}{f', {json_path}' if json_path else ''} ({len(specs)} configurations, "
              f"{sum(map(len, rounds))} runs, {time.perf_counter() - start:.0f} s)", highlight=False)
    if records:
        write_report(target, plan_steps)
    if all(r.verdict == "not measurable" for r in results):
        raise typer.Exit(1)


def show_plan(chosen: list[Claim], setup: Setup, per_claim: dict[str, dict[str, RunSpec]], rounds: list[list[RunSpec]],
              sheet_name: str, json_path: Path | None) -> None:
    """``--plan``: each claim's runs and their expected device time, printed (and written to --json)."""
    from rich.markup import escape

    from twinbench.claims.budget import plan
    from twinbench.predict.datasheets import lookup

    sheet = lookup(sheet_name) if setup.accelerator and sheet_name else None
    if setup.accelerator and sheet is None:
        fail(f"--plan: this machine's {setup.platform.upper()} has no datasheet name here; give --device (e.g. "
             f"{'tpu-v5e' if setup.platform == 'tpu' else 'h200'})")
    p = plan(chosen, setup, per_claim, rounds, sheet)
    where = f"{p.device} ({p.platform})"
    out.print(f"claims plan on {where}: {p.configurations} configurations, {p.runs} runs, "
              f"{len(p.probes)} probes, repeats {p.repeats}{' (--quick)' if p.quick else ''}", highlight=False)
    for c in p.claims:
        if c.not_run:
            out.print(f"[bold]{c.claim}[/] runs nothing: {escape(c.not_run)}", soft_wrap=True, highlight=False)
            continue
        out.print(f"[bold]{c.claim}[/]" + (f" (probes: {', '.join(c.probes)})" if c.probes else ""),
                  highlight=False)
        for r in c.runs:
            step = f", step ~{r.step_ms:.0f} ms" if r.step_ms is not None else ""
            out.print(f"  {r.name}: {r.framework}/{r.strategy}, {escape(r.size)}, {r.platform}; "
                      f"{r.runs}x ~{r.total_s:.0f} s, compile ~{r.compile_s:.0f} s{step}", soft_wrap=True,
                      highlight=False)
    total = p.predicted_total_s
    idle = " on an idle 2-core CPU" if sheet is None else " of device time"
    out.print(f"predicted total: {total:.0f} s = {total / 60:.1f} min{idle} (compiles {p.predicted_compile_s:.0f}"
              f" s of it; runs shared by several claims counted once; estimates, not measurements)", highlight=False)
    if p.load and p.predicted_total_s_at_load is not None and p.load_factor is not None:
        at = p.predicted_total_s_at_load
        out.print(f"at the load measured now ({p.load}): about {at / 60:.1f} min, {p.load_factor:.1f}x as long "
                  "(each run gets a share of the cores); on a quiet machine the figure above", highlight=False)
    if json_path:
        try:
            folder_io.write_text(json_path.resolve(), json.dumps(msgspec.to_builtins(p), indent=1))  # the one opener: never a FIFO
        except OSError as e:
            fail(f"--json {json_path}: {e.strerror or e}")
