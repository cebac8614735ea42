"""The report's explain section (``compare --explain``): a stacked bar of phases per run and the gap table
between the first two explained runs, with links to their traces."""

from __future__ import annotations

from html import escape
from typing import Any

COLORS = {"input": "#8c8c8c", "forward": "#4e79a7", "backward": "#f28e2b", "optimizer": "#59a14f",
          "rest": "#d3d3d3"}
LINKS = {"torch": "open in https://ui.perfetto.dev (Chrome trace)",
         "jax": "open the .trace.json.gz in https://ui.perfetto.dev, or the directory with xprof / "
                "`tensorboard --logdir` (xplane)"}


def _bar(e: dict[str, Any], scale: float) -> str:
    segs = []
    for p, color in COLORS.items():
        ms = e["trace"].get(p, 0.0)
        if ms > 0:
            segs.append(f'<span title="{p} {ms:.2f} ms" style="display:inline-block;height:14px;'
                        f'width:{100 * ms / scale:.2f}%;background:{color}"></span>')
    return f'<div style="width:100%;white-space:nowrap">{"".join(segs)}</div>'


def html_section(records: list[dict[str, Any]]) -> list[str]:
    """HTML parts; empty when no record was made with ``--explain``."""
    from twinbench.explain import gap
    from twinbench.explain.command import explain_records

    wanted = [r for r in records if r.get("status") == "ok" and r.get("explain_timing")]
    if not wanted:
        return []
    runs = [e for e in explain_records(wanted) if "error" not in e]
    if not runs:
        return []
    scale = max(e["step_ms"] for e in runs) or 1.0
    legend = " ".join(f'<span style="background:{c};padding:0 6px">{p}</span>' for p, c in COLORS.items())
    parts = ["<h2>Where the step time goes</h2><p class='sub'>Phases from each run's profiler trace, as shares "
             f"of its measured step (explain). {legend}</p>", "<table class='findings' data-section='explain'>"]
    by_fw = {r.get("run_id"): r.get("framework") for r in wanted}
    for e in runs:
        notes = "<br>".join(escape(n) for n in e["notes"])
        parts.append(f"<tr><td><b>{escape(e['run'])}</b> {e['step_ms']:.1f} ms</td><td style='width:60%'>"
                     f"{_bar(e, scale)}<span class='sub'>{notes}</span></td><td class='sub'>"
                     f"{escape(str(e['trace_path']))}<br>{escape(LINKS.get(by_fw.get(e['run_id']) or '', ''))}"
                     "</td></tr>")
    parts.append("</table>")
    if len(runs) >= 2:
        a, b = runs[0], runs[1]
        table = gap.rows(a, b)
        head = (f"<tr><th>row</th><th>{escape(a['run'])} ms</th><th>{escape(b['run'])} ms</th><th>B-A ms</th>"
                "<th>share of gap</th></tr>")
        body = [f"<tr><td class='l'>{'&nbsp;&nbsp;' * r['level']}{escape(r['row'].split(' / ')[-1])}</td>"
                f"<td>{r['a_ms']:.2f}</td><td>{r['b_ms']:.2f}</td><td>{r['diff_ms']:+.2f}</td>"
                f"<td>{r['share']:.0%}</td></tr>" for r in table if r["a_ms"] or r["b_ms"]]
        parts += [f"<h3>Gap: {escape(b['run'])} - {escape(a['run'])}</h3>", "<table>", head, *body, "</table>",
                  f"<p>{escape(gap.sentence(a, b, table))}</p>"]
    return parts
