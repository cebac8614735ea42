"""``twinbench explain A B`` and ``compare --explain``: resolve the runs, run (through runner.py) only what is
missing, read the traces, build the gap table, print it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from twinbench.errors import error_line
from twinbench.explain import answer, files, gap, result, runs, trace_file, why
from twinbench.explain.result import Explained
from twinbench.explain.side import Side, Unreadable
from twinbench.explain.steps import TraceError, parse_window
from twinbench.folder_io import make_dir, terminal
from twinbench.limits import check_host
from twinbench.record import Record
from twinbench.spec import RunSpec, SpecError

if TYPE_CHECKING:
    from twinbench.plan import Overrides  # the flags' values by spec field

#: what a reader of a file may raise on content it did not foresee: the file's fault, one line (bad-input.md)
UNEXPECTED = (TypeError, ValueError, KeyError, IndexError, AttributeError, UnicodeError, RecursionError,
              OverflowError, EOFError)


class ExplainError(ValueError):
    """Bad input to explain: one line, exit 2."""


def explain(run_a: str, run_b: str, preset: str, overrides: Overrides, out_dir: Path, timeout: float,
            model: str | None, jax_model: str | None, expand: str, say: Callable[[str], None],
            before: Callable[[list[RunSpec]], None] | None = None) -> Explained:
    """Explain the pair ``run_a`` ``run_b``; ``before`` is given the sides' specs once they are known, before
    any run starts (``--try``/``--depths``: their variants preflighted as compare's runs are)."""
    from twinbench import runner
    from twinbench.plan import build_specs

    try:
        resolved: list[tuple[RunSpec, Record | None]] = []
        fresh = [a for a in (run_a, run_b) if not runs.is_results_arg(a)]
        built: dict[str, RunSpec] = {}
        if fresh:
            from twinbench.byo.plan import prepare_user, user_fields

            names = ",".join(a.replace("/", ":") for a in fresh)
            specs = build_specs(preset, ",".join(sorted({a.split(":")[0] for a in fresh})), names, overrides,
                                **user_fields(model, jax_model))
            specs, _ = prepare_user(specs, out_dir, timeout)
            built = {s.label(): s for s in specs}
        for a in (run_a, run_b):
            if runs.is_results_arg(a):
                spec, rec, left = runs.from_results(a, overrides)  # what a re-run may take from a record
                if runs.needs_run(rec):  # its spec would run again: never code the record names on its own
                    for line in [*left, *runs.check_code(a, spec, model, jax_model)]:
                        say(line)
                    spec = runs.runnable(a, spec)
                    if spec.user.user_model:  # its initial weights written anew from the model you named, never
                        from twinbench.byo.plan import prepare_user  # read from where the record points

                        (spec,), _ = prepare_user([spec], out_dir / f"record-{len(resolved)}", timeout)
                resolved.append((spec, rec))
            else:
                key = a.replace(":", "/")
                if key not in built:
                    raise SpecError(f"unknown run {a!r} (framework:strategy, or RESULTS_DIR:framework/strategy)")
                resolved.append((built[key], None))
    except SpecError as e:
        raise ExplainError(str(e)) from e
    todo = [runs.for_explain(s, out_dir / "traces") for s, r in resolved if runs.needs_run(r)]
    for (s, r), a in zip(resolved, (run_a, run_b), strict=True):
        try:
            if runs.needs_run(r):
                check_host([s])  # a shape the host cannot hold (a record's too): refused before any run
        except SpecError as e:  # a record's value is named as the record's, not as a flag never given
            raise ExplainError(f"{a}: the record's {e}" if r is not None else str(e)) from e
    if before is not None:
        try:
            before([s for s, _ in resolved])
        except SpecError as e:
            raise ExplainError(str(e)) from e
    for s, r in resolved:
        if r is not None and runs.needs_run(r):
            say(f"  re-running {s.label()} (its record has no trace/explain timing): same spec, run id {s.run_id()}")
        if r is not None and not runs.needs_run(r):
            for w in gap.busy_warnings(r):
                say(f"  warning {s.label()}: {w}")
    records = {}
    if todo:
        try:
            runner.check_out_dir(out_dir)  # a file, read-only: one line before any run
            make_dir(out_dir, "traces")  # the traces' folder through no link (a link there would be resolved)
        except SpecError as e:
            raise ExplainError(str(e)) from e
        for rec in runner.run_many(todo, out_dir, timeout):
            records[rec.run.run_id, rec.label()] = rec
    final = []
    for s, r in resolved:
        rec = r if not runs.needs_run(r) else records.get((s.run_id(), s.label()))
        if rec is None or not rec.ok:
            raise ExplainError(f"{s.label()}: the run failed: {rec.error if rec else None}")
        final.append(rec)
    try:
        # --try and --depths run these specs again: the record-to-run boundary's, never a record's own
        explained = gap.explain_pair(final[0], final[1], expand)
        explained.specs = [s.to_dict() for s, _ in resolved]
        return explained
    except TraceError as e:
        raise ExplainError(str(e)) from e


def explain_traces(trace_a: str, trace_b: str | None, expand: str = "categories", step_marker: str | None = None,
                   rank: int | None = None, device: int | None = None, hlo: str | None = None,
                   steps: str | None = None) -> Explained:
    """``twinbench explain TRACE [TRACE_B]``: one trace's table, or two traces' gap table (any frameworks);
    ``steps``: ``--steps A:B``, a window of each trace's steps (:func:`steps.parse_window`)."""
    args = [a for a in (trace_a, trace_b) if a]
    for a in args:
        if not trace_file.is_trace(a):
            raise ExplainError(f"{a}: no such trace (to compare a trace, give two traces; runs are "
                               "framework:strategy or RESULTS_DIR:framework/strategy)")
    try:
        window = parse_window(steps) if steps else None
        if hlo and Path(hlo).is_file():  # a file over the cap is refused before any trace is parsed
            files.check_hlo_size(hlo)
    except TraceError as e:
        raise ExplainError(str(e)) from e
    explained = []
    for a in args:
        try:
            explained.append(gap.explain_trace(a, step_marker, rank, device, hlo, window))
        except TraceError as e:
            raise ExplainError(str(e)) from e
        except UNEXPECTED as e:  # a file its reader did not foresee (another protobuf named *.xplane.pb): data
            raise ExplainError(f"{a}: not a trace explain reads ({error_line(e)})") from e
    if len(explained) == 2 and explained[0].run == explained[1].run:
        explained = [msgspec.structs.replace(e, run=f"{e.run.split(':')[0]}:{Path(a).resolve()}")
                     for e, a in zip(explained, args, strict=True)]
    if len(explained) == 1:
        return Explained(a=explained[0])
    out = gap.pair(explained[0], explained[1], expand)
    # the doctor's findings beside the traces, with the gap
    out.answer = answer.join(explained[0], explained[1], out.noise_ms, args[0], args[1])
    return out


def explain_records(records: list[Record]) -> list[Side | Unreadable]:
    """``compare --explain``: each ok record explained (an unreadable trace: its error instead)."""
    out: list[Side | Unreadable] = []
    for r in records:
        if not r.ok:
            continue
        try:
            out.append(gap.explain_run(r))
        except TraceError as e:
            out.append(Unreadable(run=r.label(), error=str(e)))
    return out


def run_table(e: Side) -> Any:
    from rich.table import Table

    kind = "measured" if e.run_id else "traced"
    measured = e.measured.untraced_step_ms if e.measured else None  # twinbench doctor's, without the profiler
    title = f"{shown(e.run, 200)}: {e.step_ms:.1f} ms per {kind} step" + (
        f", {measured:.1f} ms measured without the profiler (twinbench doctor)" if measured else "")
    t = Table(title=title, title_justify="left")
    scale = e.timing_scale
    apart = e.timing_apart
    t.add_column("phase")
    # a column scaled to the measured step adds up to it by construction: its header says so, and by how much
    t.add_column("timing ms" if abs(scale - 1) < 1e-9 else f"timing ms (scaled x{scale:.2f})", justify="right")
    t.add_column("trace ms", justify="right")
    t.add_column("top categories (trace)")
    for p in gap.PHASES:
        cats = sorted(e.cells.get(p, {}).items(), key=lambda kv: -kv[1])[:3]
        tm = e.timing.get(p)
        cell = "" if tm is None else f"{tm:.1f}"
        if p in apart:  # not a measurement: two methods disagree by that much (the note says so)
            cell = f"[dim]{cell} ({apart[p]:.1f}x apart)[/]"
        t.add_row(p, cell, f"{e.phase_ms(p):.1f}", ", ".join(f"{c} {v:.1f}" for c, v in cats))
    tsum = sum(e.timing.get(p, 0.0) for p in gap.PHASES)
    raw = sum(e.timing_raw.get(p, 0.0) for p in gap.PHASES)
    said = (f"{raw:.1f} -> {tsum:.1f}" if abs(scale - 1) >= 1e-9 else f"{tsum:.1f}") if e.timing else \
        f"{measured:.1f}" if measured else ""
    t.add_row("sum", said, f"{sum(e.trace.values()):.1f}", f"categorized {e.categorized_share:.0%}")
    return t


def gap_table(result: Explained) -> Any:
    from rich.table import Table

    assert result.b is not None
    a, b = shown(result.a.run, 200), shown(result.b.run, 200)  # in the title: a header would cut them
    t = Table(title=f"gap: B {b} - A {a} = {result.gap_ms:+.1f} ms per step", title_justify="left")
    for col, just in (("row", "left"), ("A ms", "right"), ("B ms", "right"), ("B-A ms", "right"),
                      ("share of gap", "right"), ("timing B-A", "right"), ("A GFLOP/s (peak)", "right"),
                      ("B GFLOP/s (peak)", "right")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for r in result.rows:
        if r.level and abs(r.diff_ms) < 0.005 * max(result.a.step_ms, 1e-9) and not r.a_ms:
            continue
        name = ("  " * r.level) + shown(r.category, 80)
        t.add_row(name if r.level else f"[bold]{name}[/]", f"{r.a_ms:.2f}", f"{r.b_ms:.2f}",
                  f"{r.diff_ms:+.2f}", f"{r.share:.0%}", *why.throughput_cells(r))
    return t


def ops_table(e: Side, n: int = 10) -> Any:
    from rich.table import Table

    t = Table(title=f"{shown(e.run, 200)}: top ops (traced ms per step)", title_justify="left")
    for col, just in (("kernel / op", "left"), ("launched by", "left"), ("category", "left"), ("phase", "left"),
                      ("ms", "right")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for o in e.kernels[:n]:
        t.add_row(shown(o.name, 70), shown(o.op, 40), shown(o.category, 30), o.phase, f"{o.ms:.3f}")
    return t


def shown(text: Any, width: int) -> str:
    """A name from a trace or a record as a table cell: as text (folder_io.terminal: no control characters,
    cut to ``width``), its brackets no markup."""
    from rich.markup import escape

    return escape(terminal(text, width))


def print_side(e: Side, out: Any, top_ops: bool = False) -> None:
    out.print(run_table(e))
    if e.step_method:
        spread = f"; spread {e.step_spread_ms:.2f} ms (slowest - fastest)" if e.steps_used >= 2 else ""
        out.print(f"  steps: {e.steps_used} of {e.steps_traced} found, from {e.step_method}{spread}", highlight=False)
    if e.device:
        out.print(f"  device: {e.device}; idle = {e.idle}", highlight=False)
    line = throughput_line(e)
    if line:
        out.print(f"  {line}", highlight=False)
    if top_ops and e.kernels:
        out.print(ops_table(e))
    if e.other:
        out.print("  other: " + ", ".join(f"{shown(k, 60)} {v:.2f} ms" for k, v in list(e.other.items())[:5]),
                  highlight=False)
    for note in e.notes:
        out.print(f"  note: {note}", highlight=False)
    out.print(f"  trace: {e.trace_path}", highlight=False)


def throughput_line(e: Side) -> str:
    """``FLOP/s against the peak (...): forward matmul 168 TFLOP/s (85%), ...`` for the compute rows of one
    run or trace ('' when none has FLOPs counted)."""
    from twinbench.explain import ops

    parts = []
    for p in gap.PHASES:
        for c in ops.COMPUTE:
            t = e.throughput.get(p, {}).get(c)
            if t is not None and t.tflops and t.ms > 0.01 * e.step_ms:
                share = f" ({t.peak_share:.0%})" if t.peak_share is not None else ""
                parts.append(f"{p} {c} {t.tflops:.3g} TFLOP/s{share}")
    if not parts:
        return ""
    pk = e.peak
    if pk.tflops:
        src = pk.source or "measured" + (f" {pk.age}" if pk.age else "")
        head = f"FLOP/s against the peak ({pk.tflops:.3g} TFLOP/s, {src})"
    else:
        head = "FLOP/s (no peak known)"
    return f"{head}: " + ", ".join(parts)


def print_pair(explained: Explained, out: Any) -> None:
    if explained.b is None:  # one trace: its table and its top ops
        print_side(explained.a, out, top_ops=True)
        return
    for side in (explained.a, explained.b):
        print_side(side, out)
    out.print(gap_table(explained))
    out.print(f"  {explained.summary}", highlight=False)
    for line in answer.lines(explained.answer) if explained.answer else []:
        out.print(line, highlight=False, markup=False)  # findings' text is the doctor's data, not markup
    why.print_extras(explained, out)


def print_runs(records: list[Record], out_dir: Path, out: Any) -> None:
    """``compare --explain``: each run's phases (and notes), written to ``out_dir/explain.json`` too
    (:mod:`.result`: versioned)."""
    explained = explain_records(records)
    for e in explained:
        if isinstance(e, Unreadable):
            out.print(f"  explain {e.run}: {e.error}", highlight=False)
            continue
        out.print(run_table(e))
        for note in e.notes:
            out.print(f"  note: {note}", highlight=False)
    from twinbench.folder_io import write_file

    try:  # inside --out, never through a link (folder_io); the records are safe already: a warning at most
        write_file(out_dir, "explain.json", result.to_json(result.runs_of(explained)))
    except (OSError, SpecError) as e:
        out.print(f"  warning: explain.json not written: {e}", highlight=False, markup=False)
        return
    out.print(f"  explain: {out_dir / 'explain.json'}", highlight=False)
