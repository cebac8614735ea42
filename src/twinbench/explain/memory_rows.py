"""The two runs' memory breakdowns side by side (the records' ``memory_breakdown``, measure/memory.py): one
row per part (runtime, params, optimizer state, gradients, activations, temporaries, inputs, unaccounted),
A bytes, B bytes, B-A and its share of the gap between the two peaks, as the time rows are."""

from __future__ import annotations

from typing import Any

from twinbench.measure.device import PROCESS_RSS

PARTS = ("runtime", "params", "optimizer_state", "gradients", "activations", "temporaries", "inputs")
MiB = 2**20


def rows(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
    """None when either run has no breakdown (or only its error)."""
    if not a or not b or "parts" not in a or "parts" not in b:
        return None
    gap = float(b.get("peak_bytes", 0) - a.get("peak_bytes", 0))
    out = []
    names = [p for p in PARTS if p in a["parts"] or p in b["parts"]]
    names += [p for p in sorted(set(a["parts"]) | set(b["parts"])) if p not in names]
    for p in [*names, "unaccounted"]:
        va = a.get("unaccounted_bytes", 0) if p == "unaccounted" else a["parts"].get(p, 0)
        vb = b.get("unaccounted_bytes", 0) if p == "unaccounted" else b["parts"].get(p, 0)
        out.append({"row": p, "a_bytes": int(va), "b_bytes": int(vb), "diff_bytes": int(vb - va),
                    "share": (vb - va) / gap if gap else 0.0})
    top = max(out, key=lambda r: (1 if gap >= 0 else -1) * r["diff_bytes"])
    return {"a_peak_bytes": a.get("peak_bytes", 0), "b_peak_bytes": b.get("peak_bytes", 0), "gap_bytes": int(gap),
            "a_source": a.get("peak_source", ""), "b_source": b.get("peak_source", ""), "rows": out,
            "largest": top["row"]}


def sentence(mem: dict[str, Any], a_name: str, b_name: str) -> str:
    gap = mem["gap_bytes"]
    top = next(r for r in mem["rows"] if r["row"] == mem["largest"])
    more, less = (b_name, a_name) if gap >= 0 else (a_name, b_name)
    src = mem["a_source"] if mem["a_source"] == mem["b_source"] else f"{mem['a_source']} / {mem['b_source']}"
    out = (f"memory: {more}'s peak is {abs(gap) / MiB:.0f} MiB above {less}'s ({src}); the largest part of "
           f"it: {top['row']} {top['diff_bytes'] / MiB:+.0f} MiB ({top['share']:.0%})")
    more_source = mem["b_source"] if gap >= 0 else mem["a_source"]
    if top["row"] == "unaccounted" and more.startswith("jax/") and more_source == PROCESS_RSS:
        out += (" (a JAX run's peak RSS is often reached while XLA compiles, by the compiler's own memory: "
                "`--cache warm` measures a run that loads its programs instead of compiling them)")
    return out
