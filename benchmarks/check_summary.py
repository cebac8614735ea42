"""One page from an accelerator check's OUTDIR, whichever accelerator: `benchmarks/gpu_check.sh OUTDIR` or
`benchmarks/tpu_check.sh OUTDIR` (or their --dry-run on a CPU). Writes OUTDIR/NAME.json and OUTDIR/NAME.md, NAME
being the check's (gpu_check, tpu_check: the first line of its conditions.txt), and prints the page.

Per run (every twinbench record of the sitting, from OUTDIR/results.jsonl and each group's GROUP/results.jsonl,
and the Hugging Face Flax rows of jax_twin_vs_hf_flax.py): step time (p10-p90), tokens/s, MFU against the measured
and the datasheet peak, the attention kernel, compile (and, for a warm cache, how many programs came from it), peak
memory and where it comes from, status; then, where the check wrote them, the explain gap's largest rows
(explain.json) and each run's exit code (status.txt). Reads only the files the check wrote (data, never code).

    python benchmarks/check_summary.py OUTDIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from twinbench.record import read_jsonl  # every line in the flat layout, whatever its version

FIELDS = ("framework", "strategy", "preset", "batch", "seq", "status", "error", "device", "platform", "precision",
          "matmul_precision", "attention_impl", "attention_kernel", "step_ms", "step_ms_p10", "step_ms_p90",
          "tokens_per_s", "achieved_tflops", "peak_tflops", "mfu", "peak_tflops_datasheet", "mfu_datasheet",
          "compile_s", "first_step_s", "peak_mem_bytes", "peak_mem_source", "memory_breakdown", "versions",
          "loss_first", "loss_last", "n_params", "compile_cache", "compile_cache_hits", "compiles_total")
#: folders of OUTDIR that hold no run of the sitting's own (explain's re-runs are in explain.json)
NOT_GROUPS = {"traces", "explain", "compile-cache", "runs"}


def _lines(path: Path) -> list[dict[str, Any]]:
    return [row for row in read_jsonl(path) if isinstance(row, dict)]


def runs(out: Path) -> list[dict[str, Any]]:
    """Every run of the sitting: OUTDIR's own records (group "-"), then each group folder's in name order;
    twinbench records and HF rows alike. results.jsonl, appended as each run ends, keeps the runs of a command
    its timeout killed."""
    found = []
    groups = [out, *sorted(p for p in out.iterdir() if p.is_dir() and p.name not in NOT_GROUPS)]
    for group in groups:
        name = "-" if group == out else group.name
        for r in _lines(group / "results.jsonl"):
            if "which" in r:  # a jax_twin_vs_hf_flax.py child
                found.append({"group": name, "framework": "jax", "strategy": f"hf-flax ({r['which']})",
                              "status": "ok", "device": r.get("device"), "step_ms": r.get("step_ms"),
                              "compile_s": r.get("compile_s"), "versions": r.get("versions"), "loss_last": r.get("loss")})
            else:
                found.append({"group": name, **{k: r.get(k) for k in FIELDS}})
    return found


def explain_gap(out: Path, top: int = 8) -> dict[str, Any] | None:
    """The explain of the check (explain.json): the two runs, the gap, its ``top`` largest rows; None without one."""
    try:
        explain = json.loads((out / "explain.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(explain, dict) or "rows" not in explain:
        return None
    rows = sorted((r for r in explain["rows"] if r.get("level")), key=lambda r: -abs(r.get("diff_ms", 0.0)))
    return {"a": explain["a"]["run"], "b": explain["b"]["run"], "a_step_ms": explain["a"]["step_ms"],
            "b_step_ms": explain["b"]["step_ms"], "gap_ms": explain.get("gap_ms"), "summary": explain.get("summary"),
            "top_rows": rows[:top], "categorized": [explain["a"].get("categorized_share"),
                                                    explain["b"].get("categorized_share")]}


def check_name(conditions: str, rows: list[dict[str, Any]]) -> str:
    """The check's name: ``# gpu_check conditions`` -> ``gpu_check``; else from the runs' platform."""
    first = conditions.strip().splitlines()[0] if conditions.strip() else ""
    words = first.lstrip("# ").split()
    if words and words[0].endswith("_check"):
        return words[0]
    platforms = [r.get("platform") for r in rows if r.get("platform") not in (None, "cpu")]
    return f"{platforms[0] if platforms else 'cpu'}_check"


def summarize(out: Path) -> dict[str, Any]:
    read = lambda name: (out / name).read_text() if (out / name).is_file() else ""  # noqa: E731
    rows = runs(out)
    conditions = read("conditions.txt")
    return {"name": check_name(conditions, rows), "conditions": conditions, "runs": rows,
            "explain": explain_gap(out), "status": read("status.txt").splitlines()}


def _fmt(v: Any, spec: str = "") -> str:
    return "-" if v is None else format(v, spec)


def markdown(s: dict[str, Any]) -> str:
    title = s["name"].removesuffix("_check").upper() + " check"
    md = [f"# {title}", "", "```", s["conditions"].strip(), "```", "",
          "| group | run | attention | step ms (p10-p90) | tokens/s | TFLOP/s | MFU (measured peak) | "
          "MFU (datasheet) | compile s | peak mem GiB (source) | status |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in s["runs"]:
        name = f"{r['framework']}/{r['strategy']}" + (f" ({r['attention_impl']})" if r.get("attention_impl") else "")
        warm = (f" (warm cache: {r.get('compile_cache_hits')} of {r.get('compiles_total')} programs from it)"
                if r.get("compile_cache") == "warm" else "")
        mem = r.get("peak_mem_bytes")
        mem_s = f"{mem / 2**30:.2f} ({r.get('peak_mem_source') or '-'})" if mem else "-"
        error = str(r.get("error") or "").splitlines()[0][:120] if r.get("error") else ""
        status = r["status"] if not error else f"{r['status']}: {error}"
        spread = (f" ({_fmt(r.get('step_ms_p10'), '.1f')}-{_fmt(r.get('step_ms_p90'), '.1f')})"
                  if r.get("step_ms_p10") is not None else "")
        md.append(f"| {r['group']} | {name}{warm} | {r.get('attention_kernel') or '-'} | "
                  f"{_fmt(r.get('step_ms'), '.1f')}{spread} | {_fmt(r.get('tokens_per_s'), ',.0f')} | "
                  f"{_fmt(r.get('achieved_tflops'), '.1f')} | {_fmt(r.get('mfu'), '.1%')} of "
                  f"{_fmt(r.get('peak_tflops'), '.3g')} | {_fmt(r.get('mfu_datasheet'), '.1%')} of "
                  f"{_fmt(r.get('peak_tflops_datasheet'), '.3g')} | {_fmt(r.get('compile_s'), '.1f')} | {mem_s} | "
                  f"{status} |")
    g = s["explain"]
    if g:
        md += ["", f"## explain: {g['b']} - {g['a']} = {_fmt(g['gap_ms'], '+.1f')} ms per step "
                   f"({g['a_step_ms']:.1f} vs {g['b_step_ms']:.1f} ms)", "", "| row | A ms | B ms | B-A ms |",
               "|---|---|---|---|"]
        md += [f"| {r['row']} | {r['a_ms']:.2f} | {r['b_ms']:.2f} | {r['diff_ms']:+.2f} |" for r in g["top_rows"]]
        md += ["", str(g["summary"])]
    if s["status"]:
        md += ["", "Exit code of each run (a run that timed out has rc 124):", "", "```", *s["status"], "```"]
    return "\n".join(md) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python benchmarks/check_summary.py OUTDIR (a gpu_check.sh or tpu_check.sh output folder)",
              file=sys.stderr)
        return 2
    out = Path(argv[0])
    s = summarize(out)
    page = markdown(s)
    (out / f"{s['name']}.json").write_text(json.dumps(s, indent=1, default=str))
    (out / f"{s['name']}.md").write_text(page)
    print(page)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
