"""The report's plots, drawn with matplotlib (Agg backend, no display needed) from records alone.

Every plot function returns a :class:`Plot`: either a figure's PNG bytes, or ``None`` with a one-line note
saying what run would produce it (a plot without data is omitted, never drawn empty). One colour family
per framework (torch warm reds, JAX blues) is used by every plot, so a line reads the same everywhere.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from twinbench import record
from twinbench.record import Record
from twinbench.report.breakeven import break_even_steps

if TYPE_CHECKING:
    from twinbench.diff import Pair

matplotlib.rcParams["text.parse_math"] = False  # a label is text: a strategy named "$x^$" is no formula

#: Shades of one hue per framework: the first strategy of a framework gets the first shade, and so on.
PALETTES = {
    "torch": ["#d9480f", "#f08c00", "#c2255c", "#e8590c", "#a61e4d", "#fab005"],
    "jax": ["#1c7ed6", "#0b7285", "#5f3dc4", "#1098ad", "#364fc7", "#4dabf7"],
}
OTHER = ["#495057", "#2b8a3e", "#868e96"]
MARKERS = ["o", "s", "^", "D", "v", "P"]
#: Keys whose values describe the measured shape; a sweep varies some of them.
SHAPE_KEYS = ("preset", "layers", "d_model", "batch", "seq", "device_count", "precision")


@dataclass
class Plot:
    id: str  # stable id: data-plot attribute in HTML, file name in Markdown
    title: str
    caption: str  # what the plot shows and how to read it
    png: bytes | None = None
    note: str = ""  # why it is omitted and what run would produce it (when png is None)


def label(r: Record) -> str:
    """``torch/compile``; a run measured on a warm compile cache says so (``torch/compile warm``)."""
    return r.label(warm=True)


class Styles:
    """Colour and marker per run label, consistent across every plot of one report."""

    def __init__(self, records: list[Record]) -> None:
        self._style: dict[str, tuple[str, str]] = {}
        per_fw: dict[str, int] = {}
        for r in records:
            key = label(r)
            if key in self._style:
                continue
            k = per_fw.get(r.run.framework, 0)
            per_fw[r.run.framework] = k + 1
            palette = PALETTES.get(r.run.framework, OTHER)
            self._style[key] = (palette[k % len(palette)], MARKERS[k % len(MARKERS)])

    def color(self, key: str) -> str:
        return self._style.get(key, (OTHER[0], "o"))[0]

    def marker(self, key: str) -> str:
        return self._style.get(key, (OTHER[0], "o"))[1]

    def framework_colors(self) -> dict[str, str]:
        return {fw: pal[0] for fw, pal in PALETTES.items()}


def _ok(records: list[Record]) -> list[Record]:
    return [r for r in records if r.usable()]  # a record without them (hand-made, older) has no curve


def _png(fig: plt.Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _axes(title: str, xlabel: str, ylabel: str, size: tuple[float, float] = (7.5, 4.2)):
    fig, ax = plt.subplots(figsize=size)
    ax.set_title(title, fontsize=11, loc="left")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    return fig, ax


def _shape(r: Record, keys: tuple[str, ...]) -> tuple:
    return tuple(r.field(k) for k in keys)


def varying(records: list[Record], keys: tuple[str, ...] = SHAPE_KEYS) -> list[str]:
    """The shape keys whose value differs between records (``record.varying`` over ``keys``)."""
    return record.varying(records, keys)


def shape_text(r: Record, keys: list[str]) -> str:
    short = {"layers": "L", "d_model": "d", "batch": "b", "seq": "s", "device_count": "dev"}
    return " ".join(f"{short.get(k, k + ' ')}{r.field(k)}" for k in keys)


def cumulative(records: list[Record], styles: Styles, plan_steps: int) -> Plot:
    """Total wall time against steps (first step with its compile, then steady steps), break-evens marked."""
    plot = Plot("cumulative", "Cumulative wall time against steps",
                "Wall time of a run of n steps: first step (with its compilation) + (n-1) x median step time, "
                "log-log. Where the fastest choice changes (one run compiles longer but steps faster), the "
                "crossing is marked X with its step count; grey dots are crossings among runs that are not "
                "the fastest there. The dotted line is the planned run length.")
    ok = _ok(records)
    if not ok:
        plot.note = "no successful run: `twinbench compare` produces it"
        return plot
    vary = varying(ok)
    groups: dict[tuple, list[Record]] = {}
    for r in ok:
        groups.setdefault(_shape(r, tuple(vary)), []).append(r)
    shown = sorted(groups.items(), key=lambda kv: -len(kv[1]))[:4]
    crossings = []
    for _, runs in shown:
        for i, a in enumerate(runs):
            for b in runs[i + 1:]:
                for x, y in ((a, b), (b, a)):
                    n = break_even_steps(x, y)
                    if n is not None and 1 < n < math.inf and break_even_steps(y, x) != 0:
                        crossings.append((n, x, y))
    top = max([plan_steps, *[1.6 * n for n, _, _ in crossings]])
    top = 10 ** math.ceil(math.log10(max(top, 10)))
    ncols = min(2, len(shown))
    nrows = math.ceil(len(shown) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(7.5 if ncols == 1 else 11, 4.4 * nrows), squeeze=False,
                             sharey=True)
    flat = [ax for line in axes for ax in line]
    for ax in flat[len(shown):]:
        ax.set_visible(False)
    steps = [1, *sorted({round(10 ** (k / 40)) for k in range(0, 40 * int(math.log10(top)) + 1)} - {1})]
    for ax, (_, runs) in zip(flat, shown, strict=False):
        for r in runs:
            ys = [r.timing.first_step_s + (n - 1) * r.timing.step_ms / 1e3 for n in steps]
            ax.plot(steps, ys, color=styles.color(label(r)), lw=2, label=label(r))
            ax.plot([1], [ys[0]], marker=styles.marker(label(r)), color=styles.color(label(r)), ms=6)
        for n, x, y in crossings:
            if not any(x is r for r in runs):
                continue
            t = x.timing.first_step_s + (n - 1) * x.timing.step_ms / 1e3
            if not any(x is b and y is a for _, a, b in leader_changes(runs)):
                ax.plot([n], [t], marker="o", color="#868e96", ms=4, zorder=4)  # a crossing off the front
                continue
            ax.plot([n], [t], marker="X", color="black", ms=8, zorder=5)
            ax.annotate(f"{label(x)} overtakes\n{label(y)} at {math.ceil(n):,} steps", (n, t),
                        textcoords="offset points", xytext=(-12, 14), ha="right", fontsize=8,
                        arrowprops={"arrowstyle": "-", "color": "#555", "lw": 0.8})
        ax.axvline(plan_steps, color="#adb5bd", ls=":", lw=1)
        ax.text(plan_steps, ax.get_ylim()[0], f" plan {plan_steps:,}", fontsize=7, color="#868e96",
                va="bottom")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("steps")
        ax.grid(True, which="major", alpha=0.3)
        ax.spines[["top", "right"]].set_visible(False)
        if vary:
            ax.set_title(shape_text(runs[0], vary), fontsize=9, loc="left")
    for line in axes:
        line[0].set_ylabel("cumulative wall time (s)")
    for ax in flat[:len(shown)]:
        ax.legend(fontsize=8, frameon=False, loc="lower right")
    fig.suptitle(plot.title, fontsize=11, x=0.01, ha="left")
    if len(groups) > len(shown):
        plot.caption += f" Showing the {len(shown)} configurations with most runs of {len(groups)}."
    plot.png = _png(fig)
    return plot


def _leader(runs: list[Record], n: float) -> Record:
    """The run with the least cumulative wall time after ``n`` steps."""
    return min(runs, key=lambda r: r.timing.first_step_s + (n - 1) * r.timing.step_ms / 1e3)


def leader_changes(runs: list[Record]) -> list[tuple[float, Record, Record]]:
    """Where the run with the least cumulative wall time changes: ``[(steps, previous, next), ...]``.

    Totals are lines in n (first step + (n-1) steps), so the fastest choice follows their lower envelope:
    from the quickest start, each change goes to a faster-stepping run at the earliest crossing.
    """
    ok = [r for r in runs if r.timing.first_step_s is not None and r.timing.step_ms is not None]
    if not ok:
        return []
    cur = min(ok, key=lambda r: (r.timing.first_step_s, r.timing.step_ms))
    at, out = 1.0, []
    while True:
        nxt = []
        for r in ok:
            if r.timing.step_ms < cur.timing.step_ms:
                n = break_even_steps(r, cur)
                if n is not None and math.isfinite(n) and n >= at:
                    nxt.append((n, r.timing.step_ms, r))
        if not nxt:
            return out
        n, _, r = min(nxt, key=lambda x: (x[0], x[1]))
        out.append((n, cur, r))
        cur, at = r, n


def _against(records: list[Record], styles: Styles, key: str, y: Callable[[Record], float | None],
             plot: Plot, ylabel: str, xlabel: str, logx: bool = True,
             style_of: Callable[[Record], str] = lambda r: "-") -> Plot:
    """One line per run label (and per value of the other varying shape keys) of ``y`` against ``key``."""
    ok = [r for r in _ok(records) if y(r) is not None]
    others = [k for k in varying(ok) if k != key]
    lines: dict[tuple, list[Record]] = {}
    for r in ok:
        lines.setdefault((label(r), *_shape(r, tuple(others))), []).append(r)
    lines = {k: v for k, v in lines.items() if len({r.field(key) for r in v}) > 1}
    if not lines:
        return plot
    fig, ax = _axes(plot.title, xlabel, ylabel)
    for (lab, *_), runs in sorted(lines.items(), key=lambda kv: str(kv[0])):
        runs = sorted(runs, key=lambda r: r.field(key))
        extra = f" ({shape_text(runs[0], others)})" if others else ""
        ax.plot([r.field(key) for r in runs], [y(r) for r in runs], marker=styles.marker(lab), ls=style_of(runs[0]),
                color=styles.color(lab), lw=1.8, label=lab + extra)
    if logx:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.legend(fontsize=8, frameon=False)
    plot.png = _png(fig)
    return plot


def step_vs(records: list[Record], styles: Styles, key: str) -> Plot:
    name = {"batch": "batch size", "seq": "sequence length"}[key]
    plot = Plot(f"step-vs-{key}", f"Step time against {name}",
                f"Median steady-state step time (ms) of each strategy as the {name} grows.")
    _against(records, styles, key, lambda r: r.timing.step_ms, plot, "step time (ms)", name)
    if plot.png is None:
        values = sorted({r.field(key) for r in _ok(records)} - {None})
        example = "4,8,16,32" if key == "batch" else "32,64,128"
        plot.note = (f"the runs share one {name} ({', '.join(map(str, values)) or 'none'}); "
                     f"`twinbench sweep --over {key}={example}` produces it")
    return plot


def compile_vs_depth(records: list[Record], styles: Styles) -> Plot:
    plot = Plot("compile-vs-depth", "Compile time against depth",
                "Compile time (s) as layers are added: an unrolled model (dashed) compiles every block, "
                "scan-layers (solid) compiles one block and loops over it. Where the framework reported no "
                "compile time, the first step's time is used.")

    def compile_time(r: dict) -> float | None:
        return r.compile.compile_s or r.timing.first_step_s

    _against(records, styles, "layers", compile_time, plot, "compile time (s)", "layers", logx=False,
             style_of=lambda r: "-" if "scan-layers" in r.run.strategy else "--")
    ok = _ok(records)
    if plot.png is None:
        plot.note = ("the runs share one depth; `twinbench sweep --over layers=2,4,8,12 "
                     "--strategies jit,scan-layers` produces it")
    elif not any("scan-layers" in r.run.strategy for r in ok):
        plot.caption += " (No scan-layers run here: add `--strategies jit,scan-layers` to compare.)"
    return plot


def scaling(records: list[Record], styles: Styles) -> Plot:
    plot = Plot("scaling", "Scaling against devices",
                "Throughput (tokens/s) against the number of devices; the dotted grey line is perfect "
                "linear scaling from each strategy's fewest-device run.")
    ok = _ok(records)
    _against(records, styles, "device_count", lambda r: r.speed.tokens_per_s, plot, "tokens/s", "devices")
    if plot.png is None:
        plot.note = ("all runs use one device count; `twinbench sweep --over devices=1,2,4 "
                     "--strategies mesh-dp,ddp` produces it")
        return plot
    if any(r.conditions.platform == "cpu" for r in ok):
        plot.caption += (" On CPU the devices are simulated and share the same cores: these figures speak "
                         "of correctness and overhead, not speed-up.")
    # redraw with the ideal line: one line per strategy and per value of the other varying keys (weak scaling
    # sweeps vary the batch with the devices: those points stay on one line only when batch/device is fixed)
    others = [k for k in varying(ok) if k not in ("device_count", "batch")]
    for per_device in (False, True):  # strong scaling (same global batch) first; weak scaling if none
        lines: dict[tuple, list[Record]] = {}
        for r in ok:
            if r.speed.tokens_per_s:
                b = r.run.batch / r.run.device_count if per_device else r.run.batch
                lines.setdefault((label(r), b, *_shape(r, tuple(others))), []).append(r)
        if any(len({r.run.device_count for r in v}) > 1 for v in lines.values()):
            break
    if per_device:
        plot.caption += " Weak scaling: the batch grows with the devices (same batch per device)."
    fig, ax = _axes(plot.title, "devices", "tokens/s")
    for (lab, *_), runs in sorted(lines.items(), key=lambda kv: str(kv[0])):
        runs = sorted(runs, key=lambda r: r.run.device_count)
        if len({r.run.device_count for r in runs}) < 2:
            continue
        xs = [r.run.device_count for r in runs]
        extra = f" (batch {runs[0].run.batch})" if len({r.run.batch for r in ok}) > 1 and not per_device else ""
        extra += f" ({shape_text(runs[0], others)})" if others else ""
        ax.plot(xs, [r.speed.tokens_per_s for r in runs], marker=styles.marker(lab), color=styles.color(lab),
                lw=1.8, label=lab + extra)
        base = runs[0]
        ax.plot(xs, [base.speed.tokens_per_s * x / base.run.device_count for x in xs], ls=":", color="#adb5bd")
    ax.set_xticks(sorted({r.run.device_count for r in ok}))
    ax.legend(fontsize=8, frameon=False)
    plot.png = _png(fig)
    return plot


def dp_payoff(records: list[Record], styles: Styles) -> Plot:
    from twinbench.report.scaling import PAYS, curves, payoff, pays_from

    plot = Plot("dp-payoff", "Where data parallelism pays",
                "Speed-up of n devices over one device on the same global batch (T(1, n b) / T(n, n b)), against "
                "the batch per device b. Above the dashed line at 1.0 the n devices finish a batch sooner; twinbench "
                f"says data parallelism pays from a speed-up of {PAYS}.")
    rows = payoff(records)
    lines = {k: pts for k, pts in curves(rows).items() if len(pts) > 1}
    if not lines:
        plot.note = ("no per-device batch sweep with one-device runs on the same global batches; `twinbench sweep "
                     "--over devices=1,4 --over batch=8,32,128 --strategies mesh-dp,ddp` produces it")
        return plot
    most = max(n for _, _, n in lines)
    fig, ax = _axes(plot.title, "batch per device", "speed-up over 1 device")
    for (fw, st, n), pts in sorted(lines.items()):
        lab = f"{fw}/{st}"
        ax.plot([b for b, _ in pts], [sp for _, sp in pts], marker=styles.marker(lab), color=styles.color(lab),
                lw=1.8, ls="-" if n == most else "--", label=f"{lab}, {n} devices")
    ax.axhline(1.0, ls="--", color="#868e96", lw=1)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({b for pts in lines.values() for b, _ in pts}))
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.legend(fontsize=8, frameon=False)
    paying = [f"{fw}/{st} on {n} devices from {b} per device" for (fw, st, n), b in pays_from(rows).items()
              if b is not None and (fw, st, n) in lines]
    plot.caption += (" It pays: " + "; ".join(paying) + "." if paying
                     else " It does not pay at any batch per device measured here.")
    if any(r.platform == "cpu" for r in rows):
        plot.caption += (" On CPU the devices are simulated and share the same cores: a speed-up there means the "
                         "simulated devices kept the cores busier than one device did, not that data "
                         "parallelism pays.")
    plot.png = _png(fig)
    return plot


def input_stall(records: list[Record], styles: Styles) -> Plot:
    plot = Plot("input-stall", "Input stall",
                "Share of wall time the training loop waited for its next batch (bar), with the median wait "
                "per step (ms) written on the bar.")
    ok = [r for r in _ok(records) if r.input.input_stall_pct is not None]
    if not ok:
        plot.note = ("no run measured its input pipeline; a run with the host input pipeline "
                     "(e.g. `--slow-input 5` on a BERT preset) records input_stall_pct and produces it")
        return plot
    vary = varying(ok)
    names = [label(r) + (f" ({shape_text(r, vary)})" if vary else "") for r in ok]
    fig, ax = _axes(plot.title, "input stall (% of wall time)", "",
                    size=(7.5, max(2.2, 0.45 * len(ok) + 1.2)))
    ys = range(len(ok))
    ax.barh(list(ys), [r.input.input_stall_pct for r in ok], color=[styles.color(label(r)) for r in ok])
    for i, r in zip(ys, ok, strict=True):
        wait = r.input.input_wait_ms
        text = f" {r.input.input_stall_pct:.1f}%" + (f"  (wait {wait:.2f} ms/step)" if wait is not None else "")
        ax.text(r.input.input_stall_pct, i, text, va="center", fontsize=8)
    ax.set_yticks(list(ys), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, min(100, max(5, max(r.input.input_stall_pct for r in ok) * 1.3)))
    plot.png = _png(fig)
    return plot


def _parity_failed(r: Record) -> bool:
    """A run of a user model whose port failed its parity check, or whose losses left torch eager's."""
    return r.parity.failed()


def losses(records: list[Record], styles: Styles) -> Plot:
    ok = [r for r in _ok(records) if r.loss.losses]
    mismatch = [label(r) for r in ok if _parity_failed(r)]
    claim = ("the twins learn the same thing" if not mismatch else
             f"NOT the same computation: {', '.join(mismatch)} failed the parity check against the torch model, so "
             "their curves are of another function")
    plot = Plot("loss", "Loss per step", f"Training loss of every step of each run: {claim} (warm-up steps "
                "included).")
    if not ok:
        plot.note = "no run recorded its losses"
        return plot
    vary = varying(ok)
    fig, ax = _axes(plot.title, "step", "loss")
    for r in ok:
        extra = f" ({shape_text(r, vary)})" if vary else ""
        ax.plot(range(1, len(r.loss.losses) + 1), r.loss.losses, color=styles.color(label(r)), lw=1.5,
                marker=styles.marker(label(r)), ms=3, alpha=0.85, label=label(r) + extra)
    if len(ok) <= 12:
        ax.legend(fontsize=8, frameon=False)
    plot.png = _png(fig)
    return plot


def all_plots(records: list[Record], plan_steps: int) -> list[Plot]:
    """Every plot of the report, in page order (omitted ones carry their note)."""
    styles = Styles(records)
    return [cumulative(records, styles, plan_steps), step_vs(records, styles, "batch"),
            step_vs(records, styles, "seq"), compile_vs_depth(records, styles), scaling(records, styles),
            dp_payoff(records, styles), input_stall(records, styles), losses(records, styles)]


def diff_ratios(pairs: list[Pair]) -> Plot:
    """``twinbench report NEW --against OLD``: each matched run's step-time ratio NEW/OLD with its 95% interval."""
    title = "Step time NEW / OLD, with 95% intervals over repeats"
    caption = ("One row per run matched between the two result sets; the point is the ratio of step times "
               "(above 1: NEW is slower), the bar its 95% interval over repeats (Welch's t on log per-repeat "
               "medians). A bar that crosses 1 is no detectable change; no bar: one repeat a side.")
    if not pairs:
        return Plot("diff", title, caption, note="no run matched between the two result sets")
    fig, ax = _axes(title, "NEW / OLD step time", "", size=(7.5, 0.5 * len(pairs) + 1.5))
    for i, p in enumerate(pairs):
        color = PALETTES["jax" if p.run.startswith("jax/") else "torch"][0]
        if p.ci_low is not None:
            ax.plot([p.ci_low, p.ci_high], [i, i], color=color, lw=3, alpha=0.6)
        ax.plot([p.ratio], [i], "o", color=color)
    ax.axvline(1.0, color="#495057", lw=1, ls="--")
    ax.set_yticks(range(len(pairs)), [p.run for p in pairs], fontsize=8)
    ax.invert_yaxis()
    return Plot("diff", title, caption, _png(fig))
