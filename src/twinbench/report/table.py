"""The compare table, in the terminal (rich) and as Markdown, with the conditions that make it a result."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from twinbench.measure.flops import FLOP_CONVENTION
from twinbench.report.breakeven import crossing_sentence, total_s

COLUMNS = ("run", "compile s", "1st step s", "step ms (p10-p90)", "tokens/s", "TFLOP/s", "MFU",
           "peak mem", "recompiles", "loss first→last", "total s @ plan")


def _f(v: float | None, fmt: str) -> str:
    return "—" if v is None else format(v, fmt)


#: Columns shown only when a run measured them (variable-length text, the input pipeline): header, cell.
OPTIONAL_COLUMNS: tuple[tuple[str, str, Any], ...] = (
    ("pad %", "pad_pct", lambda r: _f(r.get("pad_pct"), ".0f")),
    ("real tok/s", "real_tokens_per_s", lambda r: _f(r.get("real_tokens_per_s"), ",.0f")),
    ("compiles (loop)", "compiles_in_loop", lambda r: _f(r.get("compiles_in_loop"), "d")),
    ("wall s", "pad_pct", lambda r: _f(r.get("wall_s"), ".1f")),
    ("input wait ms", "input_shown", lambda r: _f(r.get("input_wait_ms"), ".2f")),
    ("input stall %", "input_shown", lambda r: _f(r.get("input_stall_pct"), ".1f")),
    ("acc first→last", "accuracy_last", lambda r: "—" if r.get("accuracy_last") is None
     else f"{r.get('accuracy_first') or 0:.2f}→{r['accuracy_last']:.2f}"),
)


def optional_columns(records: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """Columns of classification runs (padding, accuracy) when there are some; the input columns when a run
    used --slow-input or +prefetch, or is a classification run (its batches are made in the loop)."""
    ok = [r for r in records if r.get("status") == "ok"]
    inputs = any("prefetch" in r["strategy"].split("+") or field_value(r, "slow_input") or r.get("task") == "classify"
                 for r in ok)
    text = [r for r in ok if r.get("task") == "classify"]  # variable-length text: padding and accuracy columns
    shown = []
    for header, key, cell in OPTIONAL_COLUMNS:
        if (inputs if key == "input_shown" else any(r.get(key) is not None for r in text)):
            shown.append((header, cell))
    return shown


def fmt_bytes(n: float | None) -> str:
    """1536 -> '1.5 KiB'; None -> '—'."""
    if n is None:
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


#: Spec fields never used to tell rows apart (where things live, not what was measured).
_NOT_LABELS = {"framework", "strategy", "cache_dir", "trace_dir", "spec"}


def field_value(r: dict[str, Any], key: str) -> Any:
    """A run-spec field of a record: a record field, else the spec's model/train/top-level field."""
    if key in r and key not in _NOT_LABELS:
        return r[key]
    spec = r.get("spec") or {}
    for part in (spec.get("model") or {}, spec.get("train") or {}, spec):
        if key in part:
            return part[key]
    return None


def varying(records: list[dict[str, Any]]) -> list[str]:
    """Spec fields (and the cache state) whose values differ between the runs: a sweep's axes, ``--cache both``."""
    keys: list[str] = []
    for r in records:
        spec = r.get("spec") or {}
        for k in [*(spec.get("model") or {}), *(spec.get("train") or {}), *spec]:
            if k not in _NOT_LABELS and k not in ("model", "train", "precision") and k not in keys:  # +bf16 says it
                keys.append(k)
    if "compile_cache" not in keys:
        keys.append("compile_cache")
    # a field missing from some records (written by an older twinbench) does not tell runs apart
    return [k for k in keys if len({repr(v) for r in records if (v := field_value(r, k)) is not None}) > 1]


def label(r: dict[str, Any], vary: list[str] | tuple[str, ...] = ()) -> str:
    """``torch/compile``, with the varying fields when runs differ in more than strategy: ``layers=4 warm``."""
    extra = [str(field_value(r, k)) if k == "compile_cache" else f"{k}={field_value(r, k)}" for k in vary]
    return " ".join([f"{r['framework']}/{r['strategy']}", *extra])


def row(r: dict[str, Any], plan_steps: int, vary: list[str] | tuple[str, ...] = (),
        extra: list[tuple[str, Any]] | tuple = ()) -> list[str]:
    label_ = label(r, vary)
    if r.get("status") != "ok":
        return [f"{label_} FAILED", *["—"] * (len(COLUMNS) - 2), (r.get("error") or "")[:60], *["—"] * len(extra)]
    mfu = r.get("mfu")
    return [
        label_, _f(r["compile_s"], ".2f"), _f(r["first_step_s"], ".2f"),
        f"{r['step_ms']:.1f} ({r['step_ms_p10']:.1f}-{r['step_ms_p90']:.1f})",
        f"{r['tokens_per_s']:,.0f}", _f(r["achieved_tflops"], ".3f"), "—" if mfu is None else f"{mfu:.0%}",
        fmt_bytes(r["peak_mem_bytes"]), str(r["compiles_during_steps"]),
        f"{r['loss_first']:.3f}→{r['loss_last']:.3f}", _f(total_s(r, plan_steps), ".1f"),
        *[cell(r) for _, cell in extra],
    ]


def _model_name(r: dict[str, Any]) -> str:
    """``small preset``, or the user's own model (``--model FILE.py:build``, shaped by the preset)."""
    user = (r.get("spec") or {}).get("user_model")
    return f"{user} (--model) shaped by the {r['preset']} preset" if user else f"{r['preset']} preset"


def conditions(records: list[dict[str, Any]]) -> list[str]:
    """Lines stating what was compared and how, so the numbers are results and not just numbers."""
    ok = [r for r in records if r.get("status") == "ok"] or records
    if not ok:
        return []
    r = ok[0]
    lines = [
        f"model: {_model_name(r)}, {r['layers']} layers, d_model {r['d_model']}, {r['heads']} heads, "
        f"vocab {r['vocab']}, {(r.get('n_params') or 0) / 1e6:.2f} M params; batch {r['batch']} x seq {r['seq']}; "
        f"{r['steps']} steps, first {max(r['warmup'], 1)} excluded as warm-up",
        f"device: {r.get('device')} ({r.get('platform')}), {r.get('device_count')} device(s), "
        f"{r.get('threads')} CPU threads for both frameworks; precision {r['precision']}, "
        f"matmul {r.get('matmul_precision')}; compile cache "
        f"{' and '.join(dict.fromkeys(str(x.get('compile_cache')) for x in ok))}",
        f"FLOPs: {r.get('flops_convention') or FLOP_CONVENTION}",
    ]
    peaks = {}
    for x in ok:
        if x.get("peak_tflops"):
            peaks[x["framework"]] = x["peak_tflops"]
    if peaks:
        lines.append("MFU against the measured matmul peak of each framework on this device: " + ", ".join(
            f"{fw} {p * 1e3:.0f} GFLOP/s" for fw, p in peaks.items()))
    sheet = next((x["peak_tflops_datasheet"] for x in ok if x.get("peak_tflops_datasheet")), None)
    if sheet:
        lines.append(f"datasheet dense peak: {sheet:.0f} TFLOP/s (mfu_datasheet in the records)")
    vers = {}
    for x in ok:
        vers |= {k: v for k, v in (x.get("versions") or {}).items() if k != "platform"}
    if vers:
        lines.append("versions: " + ", ".join(f"{k} {v}" for k, v in sorted(vers.items())))
    return lines


def crossings(records: list[dict[str, Any]]) -> list[str]:
    """Break-even of every ok run against the first ok run (the baseline, torch/eager by default).

    Runs that differ in more than strategy (a sweep's points, cold and warm caches) are compared only within
    their group, and each sentence says which group.
    """
    vary = varying(records)
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r.get("status") == "ok":
            groups.setdefault(label(r, vary).partition(" ")[2], []).append(r)
    out = []
    for where, ok in groups.items():
        if len(ok) < 2:
            continue
        base = next((r for r in ok if (r["framework"], r["strategy"]) == ("torch", "eager")), ok[0])
        out += [f"[{where}] {s}" if where else s for r in ok if r is not base
                if (s := crossing_sentence(r, base))]
    return out


def rich_table(records: list[dict[str, Any]], plan_steps: int, title: str = "twinbench compare") -> Table:
    table = Table(title=title, header_style="bold", title_justify="left")
    extra = optional_columns(records)
    for c in [*COLUMNS, *(h for h, _ in extra)]:
        table.add_column(c.replace("plan", str(plan_steps)), justify="left" if c == "run" else "right")
    vary = varying(records)
    for r in records:
        style = None if r.get("status") == "ok" else "red"
        table.add_row(*row(r, plan_steps, vary, extra), style=style)
    return table


def markdown(records: list[dict[str, Any]], plan_steps: int, title: str = "twinbench compare") -> str:
    extra = optional_columns(records)
    cols = [c.replace("plan", str(plan_steps)) for c in [*COLUMNS, *(h for h, _ in extra)]]
    out = [f"# {title}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    vary = varying(records)
    out += ["| " + " | ".join(row(r, plan_steps, vary, extra)) + " |" for r in records]
    failed = [r for r in records if r.get("status") != "ok"]
    out += ["", *[f"- failed: {r['framework']}/{r['strategy']}: {r.get('error')}" for r in failed]]
    out += ["## Conditions", "", *[f"- {line}" for line in conditions(records)], ""]
    cross = crossings(records)
    if cross:
        out += ["## Break-even", "", *[f"- {c}" for c in cross], ""]
    return "\n".join(out)
