"""The compare table, in the terminal (rich) and as Markdown, with the conditions that make it a result."""

from __future__ import annotations

from typing import Any

import msgspec
from rich.markup import escape
from rich.table import Table

from twinbench import host_malloc, tasks
from twinbench.config import DEFAULT_FAMILY
from twinbench.folder_io import terminal
from twinbench.machine import HIGH_LOAD, MAX_SPREAD
from twinbench.measure import page_faults, platforms
from twinbench.measure.device import matmul_label, platform_name
from twinbench.measure.memory import summary as memory_summary
from twinbench.measure.peak_cache import cache_note, provenance
from twinbench.models.family import flops_convention
from twinbench.record import CONDITION_WARNINGS, Record, varying
from twinbench.report.breakeven import crossing_sentence, total_s
from twinbench.report.escape import md

COLUMNS = ("run", "compile s", "1st step s", "step ms (p10-p90)", "tokens/s", "TFLOP/s", "MFU",
           "peak mem", "recompiles", "loss first→last", "total s @ plan")


def _f(v: float | None, fmt: str) -> str:
    return "—" if v is None else format(v, fmt)


#: Columns shown only when a run measured them (variable-length text, the input pipeline): header, cell.
OPTIONAL_COLUMNS: tuple[tuple[str, str, Any], ...] = (
    ("pad %", "pad_pct", lambda r: _f(r.input.pad_pct, ".0f")),
    ("real tok/s", "real_tokens_per_s", lambda r: _f(r.input.real_tokens_per_s, ",.0f")),
    ("compiles (loop)", "compiles_in_loop", lambda r: _f(r.compile.compiles_in_loop, "d")),
    ("wall s", "pad_pct", lambda r: _f(r.timing.wall_s, ".1f")),
    ("input wait ms", "input_shown", lambda r: _f(r.input.input_wait_ms, ".2f")),
    ("input stall %", "input_shown", lambda r: _f(r.input.input_stall_pct, ".1f")),
    ("acc first→last", "accuracy_last", lambda r: "—" if r.loss.accuracy_last is None
     else f"{r.loss.accuracy_first or 0:.2f}→{r.loss.accuracy_last:.2f}"),
)


def _variable(r: Record) -> bool:
    """Whether a record's task is variable-length text (tasks/; a task name no task has: no)."""
    task = tasks.of(r.run.task)
    return bool(task and task.variable_length)


def optional_columns(records: list[Record]) -> list[tuple[str, Any]]:
    """Columns of classification runs (padding, accuracy) when there are some; the input columns when a run
    used --slow-input or +prefetch, or is a classification run (its batches are made in the loop)."""
    ok = [r for r in records if r.status == "ok"]
    inputs = any("prefetch" in r.run.strategy.split("+") or field_value(r, "slow_input") or _variable(r)
                 for r in ok)
    text = [r for r in ok if _variable(r)]  # variable-length text: padding and accuracy columns
    shown = []
    for header, key, cell in OPTIONAL_COLUMNS:
        if (inputs if key == "input_shown" else any(r.value(key) is not None for r in text)):
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


def field_value(r: Record, key: str) -> Any:
    """A run-spec field of a record (``Record.value``)."""
    return r.value(key)


def label(r: Record, vary: list[str] | tuple[str, ...] = ()) -> str:
    """``torch/compile``, with the varying fields when runs differ in more than strategy (``Record.label``)."""
    return r.label(vary)


def row(r: Record, plan_steps: int, vary: list[str] | tuple[str, ...] = (),
        extra: list[tuple[str, Any]] | tuple = ()) -> list[str]:
    label_ = label(r, vary)
    if r.status != "ok":
        return [f"{label_} {str(r.status or 'failed').upper()}", *["—"] * (len(COLUMNS) - 2), (r.error or "")[:60], *["—"] * len(extra)]
    mfu = r.speed.mfu
    step = _f(r.timing.step_ms, ".1f")
    if r.timing.step_ms_p10 is not None and r.timing.step_ms_p90 is not None:
        step += f" ({r.timing.step_ms_p10:.1f}-{r.timing.step_ms_p90:.1f})"
    loss = "—" if r.loss.loss_first is None or r.loss.loss_last is None else \
        f"{r.loss.loss_first:.3f}→{r.loss.loss_last:.3f}"
    total = total_s(r, plan_steps) if r.timing.step_ms is not None and r.timing.first_step_s is not None else None
    return [
        label_, _f(r.compile.compile_s, ".2f"), _f(r.timing.first_step_s, ".2f"), step,
        _f(r.speed.tokens_per_s, ",.0f"), _f(r.speed.achieved_tflops, ".3f"), _mfu(mfu),
        fmt_bytes(r.memory.peak_mem_bytes), _f(r.compile.compiles_during_steps, "d"), loss, _f(total, ".1f"),
        *[cell(r) for _, cell in extra],
    ]


#: an MFU past the peak it is measured against: the peak, not the run, is wrong (a matmul peak measured while
#: other processes held cores reads low), so no share of it is printed
OVER_PEAK = "over peak"


def _mfu(mfu: float | None) -> str:
    return "—" if mfu is None else OVER_PEAK if mfu > 1.0 else f"{mfu:.0%}"


def _model_name(r: Record) -> str:
    """``small preset``, or the user's own model (``--model FILE.py:build``, shaped by the preset)."""
    spec = r.run_spec()
    user = spec.user.user_model if spec is not None else ""
    preset = "?" if r.run.preset is None else r.run.preset
    return f"{user} (--model) shaped by the {preset} preset" if user else f"{preset} preset"


def _device_text(r: Record) -> str:
    """The device and the machine: "Intel Xeon (AVX-512, AMX) (cpu)"; "NVIDIA H200 (gpu), host Intel Xeon (...)"."""
    platform, host = platform_name(r.conditions.platform), r.conditions.host_cpu
    if platform and not platforms.get(platform).accelerator and host:
        return f"{host} (cpu)"
    return f"{r.run.device} ({platform})" + (f", host {host}" if host else "")


def conditions(records: list[Record]) -> list[str]:
    """Lines stating what was compared and how, so the numbers are results and not just numbers."""
    ok = [r for r in records if r.status == "ok"] or records
    if not ok:
        return []
    r = ok[0]
    m = {k: "?" if v is None else v for k, v in msgspec.structs.asdict(r.run).items()}  # not recorded: "?"
    lines = [
        f"model: {_model_name(r)}, {m['layers']} layers, d_model {m['d_model']}, {m['heads']} heads, "
        f"vocab {m['vocab']}, {(r.run.n_params or 0) / 1e6:.2f} M params; batch {m['batch']} x seq {m['seq']}; "
        f"{m['steps']} steps, first {max(r.run.warmup or 0, 1)} excluded as warm-up",
        f"device: {_device_text(r)}, {r.run.device_count} device(s), "
        f"{_threads_text(ok)}; precision {m['precision']}, "
        f"matmul {_matmul_text(ok)}; compile cache "
        f"{' and '.join(dict.fromkeys(str(x.run.compile_cache) for x in ok))}",
        f"FLOPs: {r.speed.flops_convention or flops_convention(r.value('family') or DEFAULT_FAMILY)}",
    ]
    vary = varying(records)  # the lines name each run as its row does (``jax/jit warm``, ``jax/jit layers=8``)
    kernels = {label(x, vary): x.conditions.attention_kernel for x in ok if x.conditions.attention_kernel}
    if kernels:
        by_kernel: dict[str, list[str]] = {}
        for run, kernel in kernels.items():
            by_kernel.setdefault(kernel, []).append(run)
        lines.append("attention kernel: " + "; ".join(f"{k} ({', '.join(runs)})" for k, runs in by_kernel.items()))
    lines += _async_lines(ok, vary)
    peaks: dict[tuple[str, str], Record] = {}  # by framework AND dtype: bf16 rows have their own peak
    for x in ok:
        if x.speed.peak_tflops:
            peaks[(x.run.framework, _dtype(x))] = x
    if peaks:
        mixed = len({dt for _, dt in peaks}) > 1
        lines.append("MFU against the measured matmul peak of each framework on this device: " + ", ".join(
            _peak_text(f"{fw} {dt}" if mixed else fw, x) for (fw, dt), x in peaks.items())
            + (f"; {cache_note()}" if any(x.speed.peak_measured_at for x in peaks.values()) else ""))
    if any((x.speed.mfu or 0.0) > 1.0 for x in ok):
        lines.append(f"MFU '{OVER_PEAK}': a run went faster than the matmul peak it is set against, so that peak "
                     "was measured low (while other processes held cores): twinbench peak --remeasure on a quiet "
                     "machine")
    lines += _load_lines(records)
    lines += _host_lines(ok, vary)
    lines += [f"memory {label(x, vary)}"
              f"{' (attention ' + x.run.attention_impl + ')' if _attention_unsaid(x, vary) else ''}: "
              f"{memory_summary(x.memory.breakdown)}" for x in ok if (x.memory.breakdown or {}).get("parts")]
    sheets = {_dtype(x): x.speed.peak_tflops_datasheet for x in ok if x.speed.peak_tflops_datasheet}
    if sheets:
        lines.append("datasheet dense peak: " + ", ".join(f"{v:.0f} TFLOP/s {dt}" for dt, v in sheets.items())
                     + " (mfu_datasheet in the records)")
    lines += _platform_lines(ok, vary)
    vers = {}
    for x in ok:
        vers |= {k: v for k, v in (x.conditions.versions or {}).items() if k != "platform"}
    if vers:
        lines.append("versions: " + ", ".join(f"{k} {v}" for k, v in sorted(vers.items())))
    return lines


def _attention_unsaid(x: Record, vary: list[str]) -> bool:
    """A run's attention option is not the default and its label does not already say it."""
    return x.run.attention_impl != "default" and "attention_impl" not in vary


def _platform_lines(ok: list[Record], vary: list[str]) -> list[str]:
    """A warning when the runs ran on different platforms (torch on the CPU beside JAX on a GPU or TPU): their
    times do not compare. Where a framework that ran on the CPU has no build (torch on a TPU), it names the way
    that framework gets onto the chip (``Platform.routes``)."""
    names = sorted({str(platform_name(x.conditions.platform)) for x in ok if x.conditions.platform})  # cuda = gpu
    if len(names) <= 1:
        return []
    line = (f"warning: these runs ran on different platforms ({', '.join(names)}): "
            + "; ".join(f"{label(x, vary)} on {platform_name(x.conditions.platform)}" for x in ok)
            + f". Their times do not compare (did a framework miss {platforms.accelerator_words(names)}?)")
    off = {x.run.framework for x in ok if not platforms.get(x.conditions.platform).accelerator}
    routes: dict[str, set[str]] = {}  # a framework that ran off the accelerator -> how it gets onto one there
    for n in names:
        for fw, route in platforms.get(n).routes.items():
            if fw in off:
                routes.setdefault(fw, set()).add(route)
    for fw, ways in sorted(routes.items()):
        line += f"; {fw} runs on {platforms.accelerator_words(names)} through " + "; ".join(sorted(ways))
    return [line]


def print_table(console: Any, table: Table) -> None:
    """Print a table whole: on a terminal at the terminal's width (rich folds what does not fit); elsewhere
    (a CI log, a pipe, a remote job) at the table's natural width, so that no header or cell is cut to "…"."""
    if console.is_terminal:
        console.print(table)
        return
    from rich.measure import Measurement

    natural = Measurement.get(console, console.options.update_width(10_000), table).maximum
    width = console.width
    console.width = max(width, natural)
    try:
        console.print(table)
    finally:
        console.width = width


#: the unsynchronised window's step time is shown when it differs from the per-step median by more than this
ASYNC_MATERIAL = 0.05


def _async_lines(ok: list[Record], vary: list[str]) -> list[str]:
    """``step_ms_async`` of the runs where it differs materially from ``step_ms``: the per-step times sync after
    every step, so a launch-bound run (torch eager on a GPU) pays its launch latency in each; the window does not."""
    diff = [x for x in ok if x.timing.step_ms_async and x.timing.step_ms
            and abs(x.timing.step_ms_async / x.timing.step_ms - 1) > ASYNC_MATERIAL]
    if not diff:
        return []
    return ["step ms without a sync per step (the steady steps again, back to back, synchronised at both ends "
            "only: step_ms_async): " + "; ".join(
                f"{label(x, vary)} {x.timing.step_ms_async:.1f} ms "
                f"({x.timing.step_ms_async / x.timing.step_ms - 1:+.0%} vs the per-step median)" for x in diff)]


def _matmul_text(ok: list[Record]) -> str:
    """``fp32 (no TF32) (torch fp32_precision=ieee; jax_default_matmul_precision=highest)``: the precision of
    the runs' fp32 matmuls, and the setting each framework was given for it."""
    given = list(dict.fromkeys(str(x.conditions.matmul_precision) for x in ok if x.conditions.matmul_precision))
    labels = " and ".join(dict.fromkeys(str(matmul_label(m)) for m in given)) or "None"
    settings = [m.split(";", 1)[1].strip() for m in given if ";" in m]
    return labels + (f" ({'; '.join(settings)})" if settings else "")


def _threads_text(ok: list[Record]) -> str:
    """``2 CPU threads for every run``, or each run's own count when they differ."""
    counts = {f"{x.run.framework}/{x.run.strategy}": x.conditions.threads for x in ok}
    cpu = "host CPU" if any(platforms.get(x.conditions.platform).accelerator for x in ok) else "CPU"
    if len(set(counts.values())) <= 1:
        return f"{next(iter(counts.values()), None)} {cpu} threads for every run"
    return f"{cpu} threads per run: " + ", ".join(f"{k} {v}" for k, v in counts.items())


def _dtype(r: Record) -> str:
    """The matmul dtype a run's peak was measured in: bf16 for bf16 runs (``--precision bf16`` or ``+bf16``)."""
    return "bf16" if r.run.precision == "bf16" or "bf16" in r.run.strategy.split("+") else "fp32"


def _peak_text(framework: str, r: Record) -> str:
    """``torch 165 GFLOP/s (spread 3%, measured 2026-12-03 07:10 UTC, 2.0 h ago)``; a GPU's ``672 TFLOP/s``."""
    text = f"{framework} {fmt_flops(r.speed.peak_tflops)}"
    if r.speed.peak_measured_at is None:  # a record of an older twinbench: nothing more is known
        return text
    return f"{text} (spread {r.speed.peak_spread or 0:.0%}, {provenance(r.speed.peak_measured_at)})"


def fmt_flops(tflops: float) -> str:
    """A FLOP rate a reader takes in at a glance: CPU-sized peaks in GFLOP/s (``165 GFLOP/s``), from 1 TFLOP/s
    on in TFLOP/s with three significant digits (``1.23 TFLOP/s``, ``67.0 TFLOP/s``, ``672 TFLOP/s``)."""
    if tflops < 1:
        return f"{tflops * 1e3:.0f} GFLOP/s"
    digits = 2 if tflops < 10 else 1 if tflops < 100 else 0
    return f"{tflops:.{digits}f} TFLOP/s"


def _load_lines(records: list[Record]) -> list[str]:
    """The machine's load when the runs started, and the warnings about the conditions, once each."""
    loads = [r for r in records if r.conditions.load_avg_1m is not None]
    out = []
    if loads:
        out.append(f"load: 1-minute load average {_span([r.conditions.load_avg_1m for r in loads])} when the runs started, "
                   f"on {loads[0].conditions.cpu_count} core(s)")
        ext = [r.conditions.load_avg_1m_external for r in loads if r.conditions.load_avg_1m_external is not None]
        if any(r.conditions.load_avg_1m_external not in (None, r.conditions.load_avg_1m) for r in loads):
            out[-1] += f"; {_span(ext)} without what twinbench's own ended runs still add to it"
    busy = [r for r in records if any(w.startswith(CONDITION_WARNINGS[0]) for w in r.warnings or [])]
    measured = [r for r in loads if r.conditions.interference_cores is not None]
    if measured:
        out.append("other processes during the timed steps (measured): "
                   f"{_span([r.conditions.interference_cores for r in measured])} core(s) busy")
    if busy and any(r.conditions.interference_cores is not None for r in busy):
        worst = max(r.conditions.interference_cores or 0 for r in busy)
        out.append(f"warning: machine busy: in {len(busy)} of {len(records)} run(s) other processes kept up to "
                   f"{worst:.2f} core(s) busy during the timed steps; their timings are not reliable")
    elif busy:
        per_core = max((r.conditions.load_avg_1m_external or r.conditions.load_avg_1m or 0) / (r.conditions.cpu_count or 1)
                       for r in busy)
        out.append(f"warning: machine busy: {len(busy)} of {len(records)} run(s) started with more than {HIGH_LOAD} "
                   f"load per core from other processes (up to {per_core:.2f}); their timings are not reliable")
    peaks: dict[str, list[str]] = {}
    for r in records:
        if r.status != "ok" or not r.speed.peak_tflops:
            continue
        why = peaks.setdefault(r.run.framework, [])
        spread, load = r.speed.peak_spread, r.speed.peak_load_per_core
        if spread is not None and spread > MAX_SPREAD and "repeats" not in " ".join(why):
            why.append(f"its repeats disagree by {spread:.0%} (above {MAX_SPREAD:.0%})")
        if load is not None and load > HIGH_LOAD and "busy" not in " ".join(why):
            why.append(f"it was measured on a busy machine ({load:.2f} load per core)")
        if r.speed.peak_device_shared and "GPU" not in " ".join(why):
            why.append(f"it was measured while {r.speed.peak_device_shared} other process(es) used the GPU")
    shared = [r for r in records if r.conditions.device_shared]
    if shared:
        out.append(f"warning: device shared: in {len(shared)} of {len(records)} run(s) other processes (up to "
                   f"{max(r.conditions.device_shared for r in shared)}) held a context on the run's GPU(s) around the timed "
                   "steps; their timings are not reliable")
    out += [f"warning: the {fw} matmul peak is not to be trusted: {' and '.join(why)}, so its MFU is uncertain; "
            "`twinbench peak --remeasure` on an idle machine" for fw, why in peaks.items() if why]
    return out


def _host_lines(ok: list[Record], vary: list[str]) -> list[str]:
    """The host allocator the runs had (``GLIBC_TUNABLES``, host_malloc.py), and every run whose steady steps
    spent a material share of their CPU time in the kernel faulting fresh pages (measure/page_faults.py)."""
    measured = [x for x in ok if x.conditions.page_faults_per_step is not None]
    if not measured:  # records of an older twinbench
        return []
    settings = {label(x, vary): x.conditions.glibc_tunables or "glibc's own" for x in measured}
    if len(set(settings.values())) == 1:
        value = next(iter(settings.values()))
        out = [f"host allocator: {_tunables_text(value)} for every run"
               + (" (--host-malloc tuned; 'system' keeps glibc's own)" if value != "glibc's own" else "")]
    else:
        out = ["host allocator per run: " + "; ".join(f"{k} {_tunables_text(v)}" for k, v in settings.items())]
    out += [f"page faults: {label(x, vary)} {page_faults.describe(x.conditions.page_faults_per_step, x.conditions.kernel_cpu_share)} over its steady steps: the step is given fresh "
            "memory, which the kernel zeroes, every time "
            + (f"(under GLIBC_TUNABLES={x.conditions.glibc_tunables}; with "
               f"GLIBC_TUNABLES={x.conditions.glibc_tunables}:{':'.join(host_malloc.KEEP_FREED)} set, glibc keeps freed "
               "memory for reuse, at the cost of the process keeping the most it ever held)"
               if x.conditions.glibc_tunables else "(--host-malloc tuned, the default, sets glibc's malloc to avoid it)")
            for x in measured if page_faults.costly(x.conditions.kernel_cpu_share, x.conditions.page_faults_per_step,
                                                    x.conditions.fault_cpu_share)]
    return out


def _tunables_text(value: str) -> str:
    return value if value == "glibc's own" else f"GLIBC_TUNABLES={value}"


def _span(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.2f}" if lo == hi else f"{lo:.2f}-{hi:.2f}"


def median_repeats(records: list[Record], vary: list[str]) -> list[Record]:
    """One record per configuration: of its repeats (``compare --repeats``), the one with the median step time
    (the lower middle of an even count). Records without repeats are returned as they are."""
    if "repeat" not in vary:
        return records
    rest = [k for k in vary if k != "repeat"]
    by: dict[str, list[Record]] = {}
    for r in records:
        by.setdefault(label(r, rest), []).append(r)
    return [sorted(rs, key=lambda r: r.timing.step_ms)[(len(rs) - 1) // 2] for rs in by.values()]


def crossings(records: list[Record]) -> list[str]:
    """Break-even of every ok run against the first ok run (the baseline, torch/eager by default).

    Runs that differ in more than strategy (a sweep's points, cold and warm caches) are compared only within
    their group, and each sentence says which group. Repeats of a configuration are one run: its median repeat.
    """
    ok = [r for r in records if r.status == "ok"]
    vary = varying(ok)
    if "repeat" in vary:
        ok, vary = median_repeats(ok, vary), [k for k in vary if k != "repeat"]
    groups: dict[str, list[Record]] = {}
    for r in ok:
        groups.setdefault(label(r, vary).partition(" ")[2], []).append(r)
    out = []
    for where, runs in groups.items():
        if len(runs) < 2:
            continue
        base = next((r for r in runs if (r.run.framework, r.run.strategy) == ("torch", "eager")), runs[0])
        out += [f"[{where}] {s}" if where else s for r in runs if r is not base
                if (s := crossing_sentence(r, base))]
    return out


def rich_table(records: list[Record], plan_steps: int, title: str = "twinbench compare") -> Table:
    table = Table(title=title, header_style="bold", title_justify="left")
    extra = optional_columns(records)
    for c in [*COLUMNS, *(h for h, _ in extra)]:
        table.add_column(c.replace("plan", str(plan_steps)), justify="left" if c == "run" else "right")
    vary = varying(records)
    for r in records:
        style = None if r.status == "ok" else "red"
        # a cell is text from a record: no markup, no control characters, cut (folder_io.terminal)
        table.add_row(*(escape(terminal(c)) for c in row(r, plan_steps, vary, extra)), style=style)
    return table


def markdown(records: list[Record], plan_steps: int, title: str = "twinbench compare") -> str:
    extra = optional_columns(records)
    cols = [c.replace("plan", str(plan_steps)) for c in [*COLUMNS, *(h for h, _ in extra)]]
    out = [f"# {title}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    vary = varying(records)
    out += ["| " + " | ".join(md(c) for c in row(r, plan_steps, vary, extra)) + " |" for r in records]
    failed = [r for r in records if r.status != "ok"]
    out += ["", *[f"- {md(r.status)}: {md(r.run.framework)}/{md(r.run.strategy)}: {md(r.error)}"
                  for r in failed]]
    out += ["## Conditions", "", *[f"- {md(line)}" for line in conditions(records)], ""]
    cross = crossings(records)
    if cross:
        out += ["## Break-even", "", *[f"- {md(c)}" for c in cross], ""]
    return "\n".join(out)
