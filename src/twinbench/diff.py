"""``twinbench diff OLD NEW``: did a change make training faster or slower, beyond the noise?

Two sets of results (results directories or ``results.jsonl`` files) are matched run by run on *what* ran:
every spec field declared to say so (``config.Identity.CONFIG``: framework, strategy with its modifiers and
options, model family and shape, the training, precision, devices and task); never the run id or the time, and
not the conditions (threads, versions, XLA flags, machine), which are what a diff is usually about and are
listed under the table instead.

**The statistics.** The unit of replication is the repeat: one process, one run (``compare --repeats N``). The
steps of one run are correlated (same compiled program, same allocator state, same machine minute) and a
shared host's speed drifts between processes by more than the steps of one run vary, so an interval built
from pooled steps is far too narrow and would call every drift a regression. Each repeat contributes its
median step time; the step-time ratio NEW/OLD is ``exp(mean log NEW - mean log OLD)`` and its 95% confidence
interval is Welch's t interval on the log medians (``scipy.stats.ttest_ind(equal_var=False)``), exponentiated.
The verdict is *slower* when the whole interval lies above 1, *faster* when below, else *no detectable change*.
With one repeat on either side there is no estimate of the between-process noise: the ratio is shown and the
verdict says it cannot separate the code from drift.

``--fail-above PCT`` makes it a CI gate: exit 1 when a matched run is slower by more than PCT percent with the
interval's lower end above ``1 + PCT/100``; otherwise 0.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twinbench.config import DEFAULT_FAMILY, Identity
from twinbench.measure.device import platform_name
from twinbench.record import FLAT, Record, condition_warnings, read_records, skipped_note
from twinbench.spec import IDENTITY
from twinbench.spec_sections import flat_spec

METHOD = ("per-repeat median step times; ratio NEW/OLD = exp(mean log NEW - mean log OLD); 95% CI: Welch's t "
          "interval on the log medians (scipy.stats.ttest_ind, equal_var=False), exponentiated")
CONFIDENCE = 0.95
SLOWER, FASTER, SAME, SINGLE = "slower", "faster", "no detectable change", "one repeat a side: cannot separate code from drift"
#: what a run is, for matching: the spec's fields declared to say what ran (a record field of the same name where
#: the record has one, else its spec's)
MATCH_FIELDS = tuple(k for k, kind in IDENTITY.items() if kind is Identity.CONFIG)
#: the record field that says a spec field where the names differ (a record without its spec: hand-made, old)
RECORD_NAME = {"devices": "device_count"}
#: the match fields a run's name shows (describe); any other that differs between runs is added to it
SHOWN = ("framework", "strategy", "family", "layers", "d_model", "batch", "seq", "precision", "devices")
#: conditions listed under the table when the two sides differ in them: the record's, then the spec's fields
#: declared conditions (config.Identity.CONDITION) that no record field already says
CONDITION_FIELDS = ("versions", "xla_flags", "threads", "device", "host_cpu", "platform", "matmul_precision",
                    "compile_cache", "peak_tflops", "load_avg_1m_external", "interference_cores")
CONDITION_FIELDS += tuple(k for k, kind in IDENTITY.items() if kind is Identity.CONDITION
                          and k not in CONDITION_FIELDS)
#: two runs whose losses differ by more than this (relative, any step) did not compute the same thing
LOSS_RTOL = 1e-4
#: one side's measured interference (cores other processes kept busy) this much above the other's is reported
INTERFERENCE_GAP = 0.25


class DiffError(ValueError):
    """Input that cannot be diffed: the message is one line, fit to print."""


def load(path: Path, skipped: list[str] | None = None) -> list[Record]:
    """The twinbench records of a results directory or a ``results.jsonl`` file (one line error otherwise);
    ``skipped`` (when given) receives a line saying how many lines were not records, and why the first was."""
    path = Path(path)
    file = path / "results.jsonl" if path.is_dir() else path
    if not file.is_file():
        raise DiffError(f"{path}: no such results directory or file" if not path.exists()
                        else f"{path}: no results.jsonl there (run `twinbench compare --out {path}`)")
    problems: list[str] = []
    try:
        records, bad = read_records(file, problems)
    except OSError as e:
        raise DiffError(f"{file}: cannot read it ({e})") from None
    if not records:
        raise DiffError(f"{file}: no twinbench records in it" + (f" ({bad} line(s) that are not; first: "
                                                                 f"{problems[0]})" if bad else ""))
    if bad and skipped is not None:
        skipped.append(skipped_note(file, bad, problems))
    return records


def identity(r: Record) -> tuple:
    """What a record ran, for matching across result sets: each of :data:`MATCH_FIELDS` from the record's field of
    that name, else from its spec decoded (``Record.run_spec``: a field its spec lacks, made before the field
    existed, has its declared default); a spec that does not decode is read as it is."""
    decoded = r.run_spec()
    spec = decoded.flat() if decoded is not None else flat_spec(r.spec)
    merged = dict(spec)  # the flat form's fields, its model's and train's beside them (model's first)
    for section in ("train", "model"):
        part = merged.pop(section, None)
        merged |= part if isinstance(part, dict) else {}
    out = []
    for k in MATCH_FIELDS:
        name = RECORD_NAME.get(k, k)
        v = r.field(name) if name in FLAT else None
        out.append(merged.get(k) if v is None else v)
    return tuple(out)


def describe(key: tuple, vary: tuple[str, ...] | list[str] = ()) -> str:
    """A run's name: its framework and strategy, shape, and any match field of ``vary`` its name does not show."""
    d = dict(zip(MATCH_FIELDS, key, strict=True))
    shape = f"{d['family'] or DEFAULT_FAMILY} L{d['layers']} d{d['d_model']} b{d['batch']}x{d['seq']} {d['precision']}"
    devices = f", {d['devices']} devices" if (d["devices"] or 1) > 1 else ""
    extra = "".join(f" {k}={d[k]}" for k in vary if k not in SHOWN)
    return f"{d['framework']}/{d['strategy']} ({shape}{devices}){extra}"


def _varying(keys: list[tuple]) -> list[str]:
    """The match fields whose values differ between these runs (a name shows them)."""
    return [k for i, k in enumerate(MATCH_FIELDS) if len({repr(key[i]) for key in keys}) > 1]


def repeat_medians(records: list[Record]) -> list[float]:
    """The median step time (ms) of each repeat: recomputed from ``step_times_ms`` where the record has them."""
    out = []
    for r in records:
        times = r.timing.step_times_ms
        out.append(statistics.median(times) if times else r.timing.step_ms)
    return [float(x) for x in out if x]


@dataclass
class Interval:
    ratio: float
    low: float | None  # None: no interval (one repeat on a side)
    high: float | None

    def verdict(self) -> str:
        if self.low is None or self.high is None:
            return SINGLE
        if self.low > 1.0:
            return SLOWER
        if self.high < 1.0:
            return FASTER
        return SAME


def ratio_interval(old: list[float], new: list[float], confidence: float = CONFIDENCE) -> Interval:
    """NEW/OLD step-time ratio with Welch's t interval on log per-repeat medians (see the module docstring)."""
    from scipy import stats

    lo, ln = [math.log(x) for x in old], [math.log(x) for x in new]
    ratio = math.exp(statistics.fmean(ln) - statistics.fmean(lo))
    if len(lo) < 2 or len(ln) < 2:
        return Interval(ratio, None, None)
    if statistics.pvariance(lo) == 0 and statistics.pvariance(ln) == 0:  # identical repeats: a point
        return Interval(ratio, ratio, ratio)
    ci = stats.ttest_ind(ln, lo, equal_var=False).confidence_interval(confidence)
    return Interval(ratio, math.exp(ci.low), math.exp(ci.high))


def _median(records: list[Record], key: str) -> float | None:
    vals = [v for r in records if isinstance(v := r.field(key), (int, float))]
    return statistics.median(vals) if vals else None


def _loss_gap(old: list[Record], new: list[Record]) -> float | None:
    """Largest relative difference between the two sides' loss trajectories (first repeat of each), or None."""
    a, b = old[0].loss.losses, new[0].loss.losses
    n = min(len(a), len(b))
    if not n:
        return None
    return max(abs(x - y) / max(abs(x), 1e-12) for x, y in zip(a[:n], b[:n], strict=True))


@dataclass
class Delta:
    """A metric's median on each side (None where no record of the side has it)."""

    old: float | None
    new: float | None


@dataclass
class Pair:
    run: str
    old_ms: list[float]
    new_ms: list[float]
    ratio: float
    ci_low: float | None
    ci_high: float | None
    verdict: str
    deltas: dict[str, Delta] = field(default_factory=dict)  # compile_s, first_step_s, peak_mem_bytes, mfu
    loss_gap: float | None = None
    losses_agree: bool | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class Diff:
    method: str
    pairs: list[Pair]
    only_old: list[str]
    only_new: list[str]
    failed: list[str]  # matched runs without an ok record on one side
    conditions: list[str]  # how the two sides' conditions differ

    def gate(self, fail_above_pct: float) -> list[Pair]:
        """The pairs that fail ``--fail-above PCT``: slower, with the interval's lower end above 1 + PCT/100."""
        return [p for p in self.pairs if p.verdict == SLOWER and p.ci_low is not None
                and p.ci_low > 1 + fail_above_pct / 100]


def _versions(records: list[Record]) -> dict[str, set[str]]:
    """Every version each library had in these records: ``{"jax": {"0.10.2"}, ...}``."""
    out: dict[str, set[str]] = {}
    for r in records:
        for name, v in (r.conditions.versions or {}).items():
            out.setdefault(name, set()).add(v)
    return out


def _condition(r: Record, k: str) -> Any:
    """A condition of a record as compared (a record field, else its spec's): the platform by its one name
    (torch's "cuda" is JAX's "gpu")."""
    v = r.field(k) if k in FLAT else r.value(k)
    return platform_name(v) if k == "platform" else v


def _conditions(old: list[Record], new: list[Record]) -> list[str]:
    out = []
    for k in CONDITION_FIELDS:
        if k == "versions":
            vo, vn = _versions(old), _versions(new)
            for name in sorted(set(vo) | set(vn)):
                if vo.get(name) != vn.get(name):
                    out.append(f"{name}: {', '.join(sorted(vo.get(name, {'-'})))} -> "
                               f"{', '.join(sorted(vn.get(name, {'-'})))}")
            continue
        so = sorted({json.dumps(v) for r in old if (v := _condition(r, k)) is not None})
        sn = sorted({json.dumps(v) for r in new if (v := _condition(r, k)) is not None})
        if k in ("load_avg_1m_external", "interference_cores", "peak_tflops"):
            fo, fn = [r.field(k) for r in old if r.field(k) is not None], [r.field(k) for r in new if r.field(k) is not None]
            if fo and fn:
                mo, mn = statistics.median(fo), statistics.median(fn)
                if abs(mn - mo) > (0.05 * max(mo, mn) if k == "peak_tflops" else 0.2):
                    out.append(f"{k}: {min(fo):.3g}-{max(fo):.3g} -> {min(fn):.3g}-{max(fn):.3g}")
            continue
        if so != sn:
            out.append(f"{k}: {', '.join(str(json.loads(x)) for x in so) or '-'} -> "
                       f"{', '.join(str(json.loads(x)) for x in sn) or '-'}")
    busy = [s for s, recs in (("OLD", old), ("NEW", new))
            if any(w.startswith("machine busy") for r in recs for w in condition_warnings(r))]
    if busy:
        out.append(f"warning: runs of {' and '.join(busy)} were measured on a busy machine; their ratios mix code "
                   "and interference")
    return out


def diff(old: list[Record], new: list[Record]) -> Diff:
    """Match OLD and NEW records on what ran and compare every matched run (see the module docstring)."""
    groups_old: dict[tuple, list[Record]] = {}
    groups_new: dict[tuple, list[Record]] = {}
    for recs, groups in ((old, groups_old), (new, groups_new)):
        for r in recs:
            groups.setdefault(identity(r), []).append(r)
    common = [k for k in groups_old if k in groups_new]
    vary = _varying([*groups_old, *groups_new])
    if not common:
        raise DiffError("no run of OLD matches a run of NEW (framework, strategy and its options, model shape, "
                        f"training, devices): OLD has {', '.join(sorted({describe(k, vary) for k in groups_old}))}; "
                        f"NEW has {', '.join(sorted({describe(k, vary) for k in groups_new}))}")
    pairs, failed = [], []
    for k in common:
        o = [r for r in groups_old[k] if r.status == "ok"]
        n = [r for r in groups_new[k] if r.status == "ok"]
        if not o or not n:
            failed.append(f"{describe(k, vary)}: no ok run in {'OLD' if not o else 'NEW'}")
            continue
        om, nm = repeat_medians(o), repeat_medians(n)
        iv = ratio_interval(om, nm)
        deltas = {key: Delta(_median(o, key), _median(n, key))
                  for key in ("compile_s", "first_step_s", "peak_mem_bytes", "mfu")}
        gap = _loss_gap(o, n)
        notes = []
        io, inn = _median(o, "interference_cores"), _median(n, "interference_cores")
        if io is not None and inn is not None and abs(io - inn) > INTERFERENCE_GAP:
            notes.append(f"other processes kept {io:.2f} core(s) busy during OLD's timed steps and {inn:.2f} during "
                         "NEW's: the ratio mixes code and interference")
        pairs.append(Pair(describe(k, vary), om, nm, iv.ratio, iv.low, iv.high, iv.verdict(), deltas, gap,
                          None if gap is None else gap <= LOSS_RTOL, notes))
    only_old = sorted(describe(k, vary) for k in groups_old if k not in groups_new)
    only_new = sorted(describe(k, vary) for k in groups_new if k not in groups_old)
    return Diff(METHOD, pairs, only_old, only_new, failed, _conditions(old, new))


def lines(d: Diff) -> list[str]:
    """The lines under the table: method, unmatched runs, differing conditions, loss disagreements, notes."""
    out = [f"method: {d.method}"]
    for p in d.pairs:
        if p.losses_agree is False:
            out.append(f"warning: {p.run}: loss trajectories differ (up to {p.loss_gap:.2e} relative, above "
                       f"{LOSS_RTOL:g}): the two sides did not compute the same thing")
        out += [f"note: {p.run}: {n}" for n in p.notes]
    out += [f"only in OLD (not compared): {r}" for r in d.only_old]
    out += [f"only in NEW (not compared): {r}" for r in d.only_new]
    out += [f"not compared: {f}" for f in d.failed]
    out += ["conditions that differ: " + "; ".join(d.conditions)] if d.conditions else \
        ["conditions: the same on both sides (versions, flags, threads, device, peak, load)"]
    return out


def fmt_ratio(p: Pair) -> str:
    if p.ci_low is None:
        return f"{p.ratio:.3f}"
    return f"{p.ratio:.3f} [{p.ci_low:.3f}, {p.ci_high:.3f}]"


def table(d: Diff, old: Path | str, new: Path | str) -> Any:
    """The terminal table of a diff (rich): per matched run, both step times, the ratio with its interval,
    the verdict and the other metrics old -> new."""
    from rich.table import Table

    from twinbench.report.table import fmt_bytes

    table = Table(title=f"twinbench diff {old} -> {new}")
    for col in ("run", "OLD step ms", "NEW step ms", "NEW/OLD [95% CI]", "verdict", "compile s", "1st step s",
                "peak mem", "MFU", "losses"):
        table.add_column(col, justify="left" if col in ("run", "verdict") else "right")

    def pair(x: Delta, fmt: Callable[[float], str]) -> str:
        o, n = x.old, x.new
        return f"{fmt(o)} -> {fmt(n)}" if o is not None and n is not None else "-"

    colors = {SLOWER: "red", FASTER: "green"}
    for p in d.pairs:
        ms = lambda v: f"{statistics.median(v):.1f} ({len(v)}x)"  # noqa: E731
        verdict = f"[{colors[p.verdict]}]{p.verdict}[/]" if p.verdict in colors else p.verdict
        table.add_row(p.run, ms(p.old_ms), ms(p.new_ms), fmt_ratio(p), verdict,
                      pair(p.deltas["compile_s"], lambda v: f"{v:.2f}"),
                      pair(p.deltas["first_step_s"], lambda v: f"{v:.2f}"),
                      pair(p.deltas["peak_mem_bytes"], fmt_bytes),
                      pair(p.deltas["mfu"], lambda v: f"{v:.0%}"),
                      "same" if p.losses_agree else ("differ" if p.losses_agree is False else "-"))
    return table
