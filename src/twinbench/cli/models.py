"""The model-side commands: ``strategies``, ``export``, ``score`` and ``peak``."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from twinbench import runner
from twinbench.cli.common import (
    app,
    check_dir,
    check_json,
    check_timeout,
    console,
    fail,
    out,
    with_spec_flags,
    write_text,
)
from twinbench.config import PRECISIONS
from twinbench.plan import Overrides, csv, model_spec
from twinbench.spec import FRAMEWORKS, PRESETS, SpecError

if TYPE_CHECKING:
    from twinbench.models.weights import Canonical
    from twinbench.spec import RunSpec


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
    created = not out_dir.exists()
    check_dir(out_dir, "--out")  # a file, read-only: one line before any weights are built
    try:
        spec, weights, source, path = _export(out_dir, preset, weights_file, results, run, overrides)
    except BaseException:  # a refusal leaves no --out it created (an empty folder is all it could hold)
        if created:
            with contextlib.suppress(OSError):
                out_dir.rmdir()
        raise
    n = sum(w.size for w in weights.values())
    m = spec.model
    out.print(f"wrote {path}/config.json and model.safetensors: {m.family}, {m.layers} layers, d_model "
              f"{m.d_model}, {m.heads} heads, vocab {m.vocab}, context {m.context}, {n / 1e6:.2f} M params "
              f"(from {source})", highlight=False)


def _export(out_dir: Path, preset: str, weights_file: Path | None, results: Path | None, run: str | None,
            overrides: Overrides) -> tuple[RunSpec, Canonical, str, Path]:
    """export's work after its --out is checked: the weights and their spec, written as a checkpoint."""
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
        from twinbench.limits import check_weights

        check_weights(spec)  # a shape whose weights the host cannot hold: refused before they are built
        weights, source = export_weights(spec, weights_file)
    from twinbench.folder_io import check_folder

    check_folder(out_dir)  # a config.json or model.safetensors there that links elsewhere: refused, not followed
    try:
        path = save_hf(spec.model, weights, out_dir)
    except OSError as e:  # the disk filled, or the folder changed under us: one line
        fail(f"--out {out_dir}: cannot write the checkpoint there ({e.strerror or e})")
    return spec, weights, source, path


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
    import msgspec

    from twinbench.score import score as run_score
    from twinbench.score import table as score_table

    check_timeout(timeout)
    check_json(json_path)
    try:
        result = run_score(str(init_from), str(data), csv(framework) or [], str(tokenizer) if tokenizer else None,
                           batch, max_windows, compare_windows, timeout)
    except SpecError as e:
        fail(str(e))
    failed = {fw: r for fw, r in result.frameworks.items() if r.status != "ok"}
    text = json.dumps(msgspec.to_builtins(result), indent=1)
    if failed and len(failed) == len(result.frameworks):  # nothing scored: no table of failures, one line
        if json_path:
            write_text(json_path, text, "--json")
        fw, r = next(iter(failed.items()))
        fail(f"score: no framework could score {init_from} ({fw}: {(r.error or '')[:300]})", code=1)
    out.print(score_table(result, init_from))
    tokens = "byte-level" if result.tokenizer == "bytes" else result.tokenizer
    out.print(f"  {result.windows} windows x {result.context} tokens ({tokens} tokens; "
              f"{result.tokens_scored:,} predictions), fp32, no TF32, batch {result.batch}", highlight=False)
    if result.max_logit_diff is not None:
        out.print(f"  max |logit diff| torch vs jax: {result.max_logit_diff:.3g} over the first "
                  f"{result.compared_windows} window(s) ({result.logits_compared:,} logits, max |logit| "
                  f"{result.max_abs_logit:.3g}); max per-window loss diff {result.max_window_loss_diff:.3g}",
                  highlight=False)
    if json_path:
        write_text(json_path, text, "--json")
    if any(r.status != "ok" for r in result.frameworks.values()):
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

    from twinbench.measure.peak import Peak, cache_path, cached_peaks
    from twinbench.measure.peak import table as peaks_table

    fws, dtypes = csv(framework) or [], csv(precision) or []
    for fw in fws:
        if fw not in FRAMEWORKS:
            fail(f"--framework: unknown framework {fw!r}; allowed: {', '.join(FRAMEWORKS)}")
    for dt in dtypes:
        if dt not in PRECISIONS:
            fail(f"--precision: unknown value {dt!r}; allowed: {', '.join(PRECISIONS)}")
    if threads < 0:
        fail(f"--threads must be >= 0 (0: all cores), got {threads}")
    from twinbench.limits import cores

    if threads > cores():
        fail(f"--threads {threads}: this machine gives twinbench {cores()} cores; allowed: 0 (all) to {cores()}")
    check_timeout(timeout)
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
    out.print(peaks_table(shown))
    if any(p is None or not p.trusted for _, p in shown) and not remeasure:
        out.print("  not ok: measured again by the next run on a quiet machine (load <= 0.5 per core), or now "
                  "with `twinbench peak --remeasure`", highlight=False)
    if problems:
        fail("peak " + " | ".join(problems), code=1)

