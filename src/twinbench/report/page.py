"""The report people look at: ``report.html`` (self-contained) and ``report.md`` from a results directory.

Reads ``results.jsonl`` (compare or sweep), and when present ``claims.json`` (twinbench claims) and
``advice.json`` (twinbench advise). The HTML page needs no network: plots are PNGs embedded as base64, the
style sheet is inline. The Markdown twin links the same plots as PNG files in ``plots/`` beside it.
"""

from __future__ import annotations

import base64
import html
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from twinbench.advise import Advice
from twinbench.claims.result import ClaimResult
from twinbench.folder_io import check_inside, cut, read_json, terminal, write_file
from twinbench.measure.device import platform_name
from twinbench.measure.trace import HINTS as TRACE_HINTS
from twinbench.record import Record, latest_per_run, read_records
from twinbench.report.breakeven import total_s
from twinbench.report.escape import file_href, md
from twinbench.report.plots import PALETTES, Plot, all_plots, label, leader_changes, shape_text, varying
from twinbench.report.table import COLUMNS, conditions, row

RESULTS = "results.jsonl"
CLAIMS = "claims.json"
ADVICE = "advice.json"
#: claims.json and advice.json are read up to this size (a verdicts file is a few hundred KB)
MAX_SIDE_FILE = 32 << 20


if TYPE_CHECKING:
    from twinbench.diff import Diff, Pair

T = TypeVar("T")


class ReportError(ValueError):
    """A results directory that cannot be reported: the message is one line, fit to print."""


def _typed(path: Path, data: Any, kind: type[T]) -> T:
    """``data`` (parsed JSON) read as ``kind``, its strings through the reader's cut: a field of another type is
    one ReportError line naming the file and the field."""
    try:
        return msgspec.convert(cut(data), kind)
    except msgspec.ValidationError as e:
        raise ReportError(f"{path}: {terminal(e, 160)}") from None


@dataclass
class Against:
    """``report --against OLD``: the diff of OLD -> these results (diff.py) and its lines."""

    old: str
    diff: Diff
    lines: list[str]


@dataclass
class Results:
    directory: Path
    records: list[Record]
    skipped: int = 0  # malformed lines of results.jsonl
    claims: list[ClaimResult] = field(default_factory=list)
    advice: Advice | None = None
    against: Against | None = None


def load(directory: Path) -> Results:
    """Records (and claims/advice) of ``directory``; :class:`ReportError` when there is nothing to report."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ReportError(f"{directory}: no such results directory")
    path = directory / RESULTS
    if not path.is_file():
        raise ReportError(f"{directory}: no {RESULTS} there (run `twinbench compare --out {directory}`)")
    try:
        records, skipped = read_records(path)
    except OSError as e:
        raise ReportError(f"{path}: cannot read it ({e})") from None
    records = latest_per_run(records)
    if not records:
        raise ReportError(f"{path}: no valid record ({skipped} malformed line(s))")
    claims: list[ClaimResult] = []
    if (directory / CLAIMS).is_file():
        try:
            loaded = read_json(directory / CLAIMS, MAX_SIDE_FILE)
        except (ValueError, RecursionError) as e:
            raise ReportError(f"{directory / CLAIMS}: not valid JSON ({e})") from None
        except OSError as e:
            raise ReportError(f"{directory / CLAIMS}: cannot read it ({e})") from None
        if not isinstance(loaded, list):
            raise ReportError(f"{directory / CLAIMS}: a JSON {type(loaded).__name__}, not a list of verdicts")
        claims = _typed(directory / CLAIMS, loaded, list[ClaimResult])
    advice = None
    if (directory / ADVICE).is_file():
        try:
            loaded = read_json(directory / ADVICE, MAX_SIDE_FILE)
        except (ValueError, RecursionError, OSError):
            loaded = None  # advice is an extra: a file that is not JSON is left out
        if isinstance(loaded, dict):
            advice = _typed(directory / ADVICE, loaded, Advice)
    return Results(directory, records, skipped, claims, advice)


def write(directory: Path, plan_steps: int | None = None,
          against: Path | None = None) -> tuple[Path, Path, Results]:
    """Write ``report.html``, ``report.md`` and ``plots/*.png`` into ``directory``; return their paths. With
    ``against`` (an older results directory) the report opens with the diff of it against these results."""
    res = load(directory)
    if plan_steps is None:
        plan_steps = (res.advice.plan_steps if res.advice else None) or 1000
    plots = all_plots(res.records, plan_steps)
    if against is not None:
        from twinbench import diff
        from twinbench.report.plots import diff_ratios

        d = diff.diff(diff.load(against), res.records)
        res.against = Against(str(against), d, diff.lines(d))
        plots.insert(0, diff_ratios(d.pairs))
    # every file inside the folder, none through a link it holds (folder_io: LinkRefused, one line)
    for name in ("plots", "report.html", "report.md"):
        check_inside(res.directory, name)
    for p in plots:
        if p.png is not None:
            write_file(res.directory, f"plots/{p.id}.png", p.png)
    html_path = write_file(res.directory, "report.html", render_html(res, plots, plan_steps))
    md_path = write_file(res.directory, "report.md", render_markdown(res, plots, plan_steps))
    return html_path, md_path, res


# ----------------------------------------------------------------------------------------------- helpers

def _e(x: Any) -> str:
    return html.escape(str(x))


def _ec(x: Any) -> str:
    """Escaped text with `backticked` spans as <code>."""
    parts = _e(x).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _trace_rel(res: Results, r: Record) -> str | None:
    """The trace's path relative to the report, or None when the record's ``trace_path`` is not a file path (a
    URL such as ``javascript:...`` never becomes a link)."""
    tp = r.trace.path
    if not tp or file_href(tp) is None:
        return None
    try:
        return os.path.relpath(tp, res.directory)
    except ValueError:  # another drive (Windows)
        return tp


def _parity_notes(res: Results) -> list[str]:
    """The runs of a user's JAX port that failed the parity check (or left torch eager's losses): every report
    says so, next to the numbers."""
    from twinbench.report.plots import _parity_failed

    out = []
    for r in res.records:
        if r.status == "ok" and _parity_failed(r):
            p = r.parity
            if p.ok is False:
                where = ", ".join(name for name, _ in p.grad_worst)
                out.append(f"{label(r)}: parity MISMATCH: the JAX port does not compute what the torch model does"
                           f"{' (gradients differ most in ' + where + ')' if where else ''}; its timings are of "
                           "another computation")
            else:
                out.append(f"{label(r)}: its losses differ from torch eager's (parity of the loss trajectory "
                           "failed): not the same computation")
    return out


def _summary(res: Results) -> str:
    ok = [r for r in res.records if r.status == "ok"]
    failed = len(res.records) - len(ok)
    text = f"{len(res.records)} run(s): {len(ok)} ok, {failed} failed"
    if res.skipped:
        text += f"; {res.skipped} malformed line(s) of {RESULTS} skipped"
    return text


def _findings(res: Results) -> list[str]:
    """Headline sentences: the break-evens and the fastest steady step of each framework."""
    ok = [r for r in res.records if r.usable()]
    out = _parity_notes(res)
    vary = varying(ok)
    groups: dict[tuple, list[Record]] = {}
    for r in ok:
        groups.setdefault(tuple(r.field(k) for k in vary), []).append(r)
    for runs in groups.values():
        if len(runs) < 2:
            continue
        prefix = f"{shape_text(runs[0], vary)}: " if vary else ""
        changes = leader_changes(runs)
        first = changes[0][1] if changes else min(runs, key=lambda r: total_s(r, 10**9))
        text = f"{prefix}{label(first)} [{first.run.run_id}] has the least total wall time"
        if not changes:
            out.append(text + " at every run length (quickest start and fastest step)")
            continue
        for n, a, b in changes:
            text += (f" up to {math.ceil(n) - 1:,} steps; from {math.ceil(n):,} steps {label(b)} "
                     f"[{b.run.run_id}] (first step {b.timing.first_step_s - a.timing.first_step_s:+.2f} s, "
                     f"step {a.timing.step_ms / b.timing.step_ms:.2f}x as fast)")
        out.append(text)
    if len(out) > 12:
        out = [*out[:12], f"... and {len(out) - 12} more break-evens (see the cumulative plot)"]
    for fw in sorted({str(r.run.framework) for r in ok}):
        best = min((r for r in ok if r.run.framework == fw), key=lambda r: r.timing.step_ms)
        extra = f" ({shape_text(best, varying(ok))})" if varying(ok) else ""
        out.append(f"fastest {fw} step: {label(best)}{extra} at {best.timing.step_ms:.2f} ms "
                   f"[{best.run.run_id}]")
    return out


def _table_rows(res: Results, plan_steps: int) -> tuple[list[str], list[tuple[Record, list[str]]]]:
    vary = varying(res.records)
    cols = [c.replace("plan", str(plan_steps)) for c in COLUMNS]
    if vary:
        cols = [cols[0], "shape", *cols[1:]]
    rows = []
    for r in res.records:
        cells = row(r, plan_steps)
        if vary:
            cells = [cells[0], shape_text(r, vary), *cells[1:]]
        rows.append((r, cells))
    return cols, rows


# ----------------------------------------------------------------------------------------------- HTML

CSS = """
:root { --ink:#212529; --muted:#6c757d; --line:#dee2e6; --bg:#f8f9fa; --ok:#2b8a3e; --bad:#c92a2a;
        --torch:%(torch)s; --jax:%(jax)s; }
* { box-sizing: border-box; }
body { margin:0; font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;
       color:var(--ink); background:#fff; }
main { max-width:1320px; margin:0 auto; padding:28px 28px 60px; }
header { border-bottom:3px solid var(--ink); padding-bottom:12px; margin-bottom:8px; }
h1 { font-size:26px; margin:0 0 4px; letter-spacing:-0.01em; }
h1 .t { color:var(--torch); } h1 .j { color:var(--jax); }
h2 { font-size:19px; margin:34px 0 10px; padding-bottom:4px; border-bottom:1px solid var(--line); }
.sub { color:var(--muted); font-size:13px; }
.cards { display:flex; flex-wrap:wrap; gap:10px; margin:14px 0; }
.card { background:var(--bg); border:1px solid var(--line); border-radius:8px; padding:10px 14px; min-width:150px; }
.card b { display:block; font-size:20px; } .card span { color:var(--muted); font-size:12px; }
ul.findings { padding-left:20px; } ul.findings li { margin:3px 0; }
.table-wrap { overflow-x:auto; border:1px solid var(--line); border-radius:8px; }
table { border-collapse:collapse; width:100%%; font-size:13px; font-variant-numeric:tabular-nums; }
th, td { padding:6px 9px; border-bottom:1px solid var(--line); text-align:right; white-space:nowrap; }
th { background:var(--bg); position:sticky; top:0; font-weight:600; }
th:first-child, td:first-child, td.l { text-align:left; }
tbody tr:nth-child(even) td { background:#fcfcfd; }
tr.failed td { color:var(--bad); background:#fff5f5 !important; }
.chip { display:inline-block; width:10px; height:10px; border-radius:50%%; margin-right:6px; vertical-align:middle; }
figure { margin:18px 0 26px; padding:14px; border:1px solid var(--line); border-radius:8px; }
figure img { max-width:100%%; height:auto; display:block; margin:0 auto; }
figcaption { color:var(--muted); font-size:13px; margin-top:8px; }
p.omitted { color:var(--muted); font-size:13px; border-left:3px solid var(--line); padding:2px 10px; margin:8px 0; }
.verdict { font-weight:600; padding:1px 8px; border-radius:10px; font-size:12px; }
.v-supported { background:#d3f9d8; color:#2b8a3e; } .v-contradicted { background:#ffe3e3; color:#c92a2a; }
.v-depends { background:#fff3bf; color:#946800; } .v-far { background:#dbe4ff; color:#364fc7; }
.v-inconclusive { background:#e3fafc; color:#0b7285; } .v-not { background:#f3d9fa; color:#862e9c; }
code { background:var(--bg); padding:1px 4px; border-radius:4px; font-size:12.5px; }
ul.cond li { font-size:13px; color:#343a40; }
.advice { background:#f3f0ff; border:1px solid #d0bfff; border-radius:8px; padding:12px 16px; }
.advice p { margin:4px 0; }
footer { margin-top:40px; color:var(--muted); font-size:12px; }
""" % {"torch": PALETTES["torch"][0], "jax": PALETTES["jax"][0]}  # noqa: UP031 (CSS braces)


def _chip(r: Record) -> str:
    color = PALETTES.get(r.run.framework, ["#495057"])[0]
    return f'<span class="chip" style="background:{color}"></span>'


def _html_table(res: Results, plan_steps: int) -> str:
    cols, rows = _table_rows(res, plan_steps)
    head = "".join(f"<th>{_e(c)}</th>" for c in cols)
    body = []
    for r, cells in rows:
        cls = "" if r.status == "ok" else ' class="failed"'
        tds = [f"<td>{_chip(r)}{_e(cells[0])}</td>"]
        tds += [f'<td class="l">{_e(c)}</td>' if i == 0 and len(cols) > len(COLUMNS) else f"<td>{_e(c)}</td>"
                for i, c in enumerate(cells[1:])]
        body.append(f'<tr{cls} data-run="{_e(r.run.run_id)}">{"".join(tds)}</tr>')
    return f'<div class="table-wrap"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def _html_plot(p: Plot) -> str:
    if p.png is None:
        return f'<p class="omitted" data-plot-omitted="{p.id}"><b>{_e(p.title)}</b>: omitted: {_ec(p.note)}</p>'
    b64 = base64.b64encode(p.png).decode()
    return (f'<figure data-plot="{p.id}"><img data-plot-img="{p.id}" alt="{_e(p.title)}" '
            f'src="data:image/png;base64,{b64}"><figcaption><b>{_e(p.title)}.</b> {_ec(p.caption)}'
            f"</figcaption></figure>")


def _html_advice(a: Advice) -> str:
    summary = a.recommendation.summary if a.recommendation else None
    head = f"<p><b>{_e(summary)}</b></p>" if summary else ""
    return f'<div class="advice" data-section="advice">{head}' + "".join(
        f"<p>{_e(x)}</p>" for x in a.lines) + "</div>"


def _claim_note(c: ClaimResult) -> str:
    """The finding (why, with the threshold) and the caveat of a claims.json entry, under its verdict."""
    parts = [f'<div style="white-space:normal">{_e(c.finding)}</div>'] if c.finding else []
    if c.caveat:
        parts.append(f'<div style="white-space:normal"><em>caveat: {_e(c.caveat)}</em></div>')
    return "".join(parts)


def _numbers_text(c: ClaimResult) -> str:
    return ", ".join(f"{k} = {v}" for k, v in c.numbers.items())


def _html_claims(claims: list[ClaimResult]) -> str:
    rows = []
    for c in claims:
        v = c.verdict
        rows.append(f'<tr><td>{_e(c.claim)}</td><td class="l"><span class="verdict v-{_e((v.split() or [""])[0])}">'
                    f'{_e(v)}</span>{_claim_note(c)}</td><td class="l" style="white-space:normal">{_e(c.rule)}</td>'
                    f'<td class="l" style="white-space:normal">{_e(_numbers_text(c))}</td>'
                    f'<td class="l" style="white-space:normal"><code>{_e(", ".join(c.runs))}</code></td></tr>')
    return ('<div class="table-wrap" data-section="claims"><table><thead><tr><th>claim</th><th>verdict</th>'
            "<th>rule</th><th>numbers</th><th>runs</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table></div>")


def _ci(p: Pair) -> str:
    return f"{p.ci_low:.3f}-{p.ci_high:.3f}" if p.ci_low is not None and p.ci_high is not None else "-"


def _html_diff(against: Against) -> str:
    """The diff of an older result set against this one: a row per matched run, then the lines under it."""
    rows = "".join(f"<tr><td>{_e(p.run)}</td><td>{p.ratio:.3f}</td><td>{_e(_ci(p))}</td>"
                   f"<td>{_e(p.verdict)}</td></tr>" for p in against.diff.pairs)
    return ("<table data-section='diff'><thead><tr><th>run</th><th>NEW/OLD step</th><th>95% CI</th>"
            f"<th>verdict</th></tr></thead><tbody>{rows}</tbody></table>"
            "<ul class='cond'>" + "".join(f"<li>{_e(x)}</li>" for x in against.lines) + "</ul>")


def render_html(res: Results, plots: list[Plot], plan_steps: int) -> str:
    ok = [r for r in res.records if r.status == "ok"]
    first = (ok or res.records)[0]
    cards = [(len(ok), "runs ok"), (len(res.records) - len(ok), "runs failed")]
    for fw in sorted({str(r.run.framework) for r in ok}):
        steps = [r.timing.step_ms for r in ok if r.run.framework == fw and r.timing.step_ms is not None]
        if steps:
            cards.append((f"{min(steps):.2f} ms", f"fastest {fw} step"))
    totals = [(total_s(r, plan_steps), r) for r in ok
              if r.timing.first_step_s is not None and r.timing.step_ms is not None]
    if totals:
        t, r = min(totals, key=lambda x: x[0])
        cards.append((f"{t:,.1f} s", f"least total @ {plan_steps:,} steps (one compile): {label(r)}"))
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width,initial-scale=1'>",
        f"<title>twinbench report: {_e(res.directory.name)}</title><style>{CSS}</style></head><body><main>",
        "<header><h1>twinbench: <span class='t'>PyTorch</span> vs <span class='j'>JAX</span></h1>",
        f"<div class='sub'>{_e(first.run.preset)} preset on {_e(first.run.device)} "
        f"({_e(platform_name(first.conditions.platform))}) · {_e(_summary(res))} · results <code>{_e(res.directory)}</code> · "
        f"generated {_e(time.strftime('%Y-%m-%d %H:%M'))}</div></header>",
        '<div class="cards">' + "".join(f"<div class='card'><b>{_e(v)}</b><span>{_e(k)}</span></div>"
                                        for v, k in cards) + "</div>",
    ]
    if res.advice:
        parts += ["<h2>Advice</h2>", _html_advice(res.advice)]
    findings = _findings(res)
    if findings:
        parts += ["<h2>Findings</h2><ul class='findings'>", *[f"<li>{_e(f)}</li>" for f in findings], "</ul>"]
    if res.against:
        parts += [f"<h2>Against {_e(res.against.old)}</h2>", _html_diff(res.against)]
    parts += ["<h2>Results</h2>", _html_table(res, plan_steps)]
    parts += ["<h2>Plots</h2>", *[_html_plot(p) for p in plots]]
    failed = [r for r in res.records if r.status != "ok"]
    if failed:
        parts += ['<h2>Failed runs</h2><ul class="findings" data-section="failed">',
                  *[f"<li><b>{_e(label(r))}</b> [{_e(r.run.run_id)}]: {_e(r.error)}</li>"
                    for r in failed], "</ul>"]
    if res.claims:
        parts += ["<h2>Claims</h2>", _html_claims(res.claims)]
    traced = [r for r in res.records if r.trace.path or r.trace.error]
    if traced:
        items = []
        for r in traced:
            rel = _trace_rel(res, r)
            href = file_href(rel) if rel else None
            if href:
                items.append(f"<li><b>{_e(label(r))}</b>: <a href='{_e(href)}'>{_e(rel)}</a><br>"
                             f"<span class='sub'>{_ec(TRACE_HINTS.get(r.run.framework, ''))}</span></li>")
            elif r.trace.path:
                items.append(f"<li><b>{_e(label(r))}</b>: trace {_e(r.trace.path)} (not a file path: "
                             "not linked)</li>")
            else:
                items.append(f"<li><b>{_e(label(r))}</b>: no trace ({_e(r.trace.error)})</li>")
        parts += ["<h2>Profiler traces</h2><p class='sub'>A few steady-state steps, recorded after the measured "
                  "steps (so the profiler never slows the numbers above).</p>",
                  '<ul class="findings" data-section="traces">', *items, "</ul>"]
    from twinbench.report.explain import html_section

    parts += html_section(res.records)  # compare --explain: phases per run and the gap table
    parts += ["<h2>Conditions</h2><ul class='cond'>", *[f"<li>{_e(c)}</li>" for c in conditions(res.records)],
              "</ul>",
              "<footer>Timings on a shared or busy machine are noisy: compare runs taken in one sitting. "
              f"Every number above comes from <code>{RESULTS}</code> (run ids in brackets).</footer>",
              "</main></body></html>"]
    return "\n".join(parts)


# ----------------------------------------------------------------------------------------------- Markdown

def render_markdown(res: Results, plots: list[Plot], plan_steps: int) -> str:
    """report.md: every text that comes from records, claims or advice is escaped (:func:`md`), so it stays text."""
    out = [f"# twinbench report: {md(res.directory.name)}", "", f"_{md(_summary(res))}_", ""]
    if res.advice:
        out += ["## Advice", "", *[f"- {md(x)}" for x in res.advice.lines], ""]
    findings = _findings(res)
    if findings:
        out += ["## Findings", "", *[f"- {md(f)}" for f in findings], ""]
    if res.against:
        out += [f"## Against {md(res.against.old)}", "", "| run | NEW/OLD | 95% CI | verdict |", "|---|---|---|---|"]
        out += [f"| {md(p.run)} | {p.ratio:.3f} | {_ci(p)} | {md(p.verdict)} |" for p in res.against.diff.pairs]
        out += ["", *[f"- {md(x)}" for x in res.against.lines], ""]
    cols, rows = _table_rows(res, plan_steps)
    out += ["## Results", "", "| " + " | ".join(md(c) for c in cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(md(c) for c in cells) + " |" for _, cells in rows]
    out += ["", "## Plots", ""]
    for p in plots:
        if p.png is None:
            out += [f"- **{md(p.title)}**: omitted: {md(p.note)}", ""]
        else:
            out += [f"![{md(p.title)}](plots/{p.id}.png)", "", f"*{md(p.title)}.* {md(p.caption)}", ""]
    failed = [r for r in res.records if r.status != "ok"]
    if failed:
        out += ["## Failed runs", "", *[f"- {md(label(r))} \\[{md(r.run.run_id)}\\]: {md(r.error)}"
                                        for r in failed], ""]
    if res.claims:
        out += ["## Claims", "", "| claim | verdict | rule | numbers | runs |", "|---|---|---|---|---|"]
        for c in res.claims:
            verdict = " ".join(x for x in (c.verdict, c.finding and f"({c.finding})",
                                           c.caveat and f"caveat: {c.caveat}") if x)
            out.append(f"| {md(c.claim)} | {md(verdict)} | {md(c.rule)} | {md(_numbers_text(c))} | "
                       f"{md(', '.join(c.runs))} |")
        out.append("")
    traced = [r for r in res.records if r.trace.path or r.trace.error]
    if traced:
        out += ["## Profiler traces", "", "A few steady-state steps recorded after the measured ones.", ""]
        for r in traced:
            rel = _trace_rel(res, r)
            href = file_href(rel) if rel else None
            hint = md(TRACE_HINTS.get(r.run.framework, ""))
            if href:
                out.append(f"- {md(label(r))}: [{md(rel)}](<{href}>) ({hint})")
            elif r.trace.path:
                out.append(f"- {md(label(r))}: trace {md(r.trace.path)} (not a file path: not linked)")
            else:
                out.append(f"- {md(label(r))}: no trace ({md(r.trace.error)})")
        out.append("")
    from twinbench.report.explain import markdown_section

    out += markdown_section(res.records)  # compare --explain: phases per run and the gap table
    out += ["## Conditions", "", *[f"- {md(c)}" for c in conditions(res.records)], ""]
    return "\n".join(out)
