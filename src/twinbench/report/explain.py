"""The report's explain section (``compare --explain``): a stacked bar of phases per run and the gap table
between the first two explained runs, with links to their traces."""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

from twinbench.record import Record

if TYPE_CHECKING:
    from twinbench.explain.side import Side

COLORS = {"input": "#8c8c8c", "forward": "#4e79a7", "backward": "#f28e2b", "optimizer": "#59a14f",
          "rest": "#d3d3d3"}
LINKS = {"torch": "open in https://ui.perfetto.dev (Chrome trace)",
         "jax": "open the .trace.json.gz in https://ui.perfetto.dev, or the directory with xprof / "
                "`tensorboard --logdir` (xplane)"}


def _bar(e: Side, scale: float) -> str:
    segs = []
    for p, color in COLORS.items():
        ms = e.phase_ms(p)
        if ms > 0:
            segs.append(f'<span title="{p} {ms:.2f} ms" style="display:inline-block;height:14px;'
                        f'width:{100 * ms / scale:.2f}%;background:{color}"></span>')
    return f'<div style="width:100%;white-space:nowrap">{"".join(segs)}</div>'


def _explained(records: list[Record]) -> tuple[list[Record], list[Side]]:
    """The records made with ``--explain`` whose traces are regular files, and their explanations."""
    from pathlib import Path

    from twinbench.explain.command import explain_records
    from twinbench.explain.side import Side

    wanted = [r for r in records if r.ok and r.explain.timing and r.trace.path and Path(r.trace.path).is_file()]
    if not wanted:
        return [], []
    try:
        return wanted, [e for e in explain_records(wanted) if isinstance(e, Side)]
    except Exception:  # a trace nobody can read: the rest of the report stands
        return wanted, []


def markdown_section(records: list[Record]) -> list[str]:
    """The same section for report.md: each explained run's phases (timing and trace), the gap of the first two."""
    from twinbench.explain import gap
    from twinbench.report.escape import md

    _, runs = _explained(records)
    if not runs:
        return []
    out = ["## Where the step time goes", "", "Phases of each run's measured step: by timing, and by its profiler "
           "trace as shares of the measured step (explain).", "",
           "| run | step ms | " + " | ".join(f"{p} ms (timing / trace)" for p in gap.PHASES) + " |",
           "|" + "---|" * (2 + len(gap.PHASES))]
    for e in runs:
        cells = []
        for p in gap.PHASES:
            t = e.timing.get(p)
            cells.append(("not measured" if t is None or t < 0 else f"{t:.1f}") + f" / {e.phase_ms(p):.1f}")
        out.append(f"| {md(e.run)} | {e.step_ms:.1f} | " + " | ".join(cells) + " |")
    out.append("")
    out += [f"- {md(e.run)}: {md(n)}" for e in runs for n in e.notes]
    if len(runs) >= 2:
        a, b = runs[0], runs[1]
        table = gap.rows(a, b)
        out += ["", f"Gap: {md(b.run)} - {md(a.run)}", "", f"| row | {md(a.run)} ms | {md(b.run)} ms | "
                "B-A ms | share of gap |", "|---|---|---|---|---|"]
        out += [f"| {'&nbsp;&nbsp;' * r.level}{md(r.category)} | {r.a_ms:.2f} | {r.b_ms:.2f} | "
                f"{r.diff_ms:+.2f} | {r.share:.0%} |" for r in table if r.a_ms or r.b_ms]
        out += ["", md(gap.sentence(a, b, table))]
    return [*out, ""]


def html_section(records: list[Record]) -> list[str]:
    """HTML parts; empty when no record was made with ``--explain``."""
    from twinbench.explain import gap

    wanted, runs = _explained(records)
    if not runs:
        return []
    scale = max(e.step_ms for e in runs) or 1.0
    legend = " ".join(f'<span style="background:{c};padding:0 6px">{p}</span>' for p, c in COLORS.items())
    parts = ["<h2>Where the step time goes</h2><p class='sub'>Phases from each run's profiler trace, as shares "
             f"of its measured step (explain). {legend}</p>", "<table class='findings' data-section='explain'>"]
    by_fw = {r.run.run_id: r.run.framework for r in wanted}
    for e in runs:
        notes = "<br>".join(escape(n) for n in e.notes)
        parts.append(f"<tr><td><b>{escape(e.run)}</b> {e.step_ms:.1f} ms</td><td style='width:60%'>"
                     f"{_bar(e, scale)}<span class='sub'>{notes}</span></td><td class='sub'>"
                     f"{escape(str(e.trace_path))}<br>{escape(LINKS.get(by_fw.get(e.run_id or '') or '', ''))}"
                     "</td></tr>")
    parts.append("</table>")
    if len(runs) >= 2:
        a, b = runs[0], runs[1]
        table = gap.rows(a, b)
        head = (f"<tr><th>row</th><th>{escape(a.run)} ms</th><th>{escape(b.run)} ms</th><th>B-A ms</th>"
                "<th>share of gap</th></tr>")
        body = [f"<tr><td class='l'>{'&nbsp;&nbsp;' * r.level}{escape(r.category)}</td>"
                f"<td>{r.a_ms:.2f}</td><td>{r.b_ms:.2f}</td><td>{r.diff_ms:+.2f}</td>"
                f"<td>{r.share:.0%}</td></tr>" for r in table if r.a_ms or r.b_ms]
        parts += [f"<h3>Gap: {escape(b.run)} - {escape(a.run)}</h3>", "<table>", head, *body, "</table>",
                  f"<p>{escape(gap.sentence(a, b, table))}</p>"]
    return parts
