"""The compilation row: time a step spent compiling (XLA's backend compile and its tracing and lowering, a
``torch.compile`` frame's Dynamo and Inductor passes: :func:`taxonomy.compile_event`), never idle.

Each side's trace counts the compiles that started inside its attributed steps (:func:`breakdown.compile_time`);
where ``twinbench doctor --trace`` recorded the run, its log beside the trace (``compiles`` in its
``trace.json``: :func:`doctor_timing.compile_log`) says how many compiled over the whole run, how many steps ran,
why the step was traced again (JAX's ``jax_explain_cache_misses``: the argument and its shapes before and
after; Dynamo's recompiles) and the finding that says the fix. :func:`facts` is what a joined answer reads;
:func:`said` is the summary's words for the row.
"""

from __future__ import annotations

import re
from typing import Any

from twinbench.explain.taxonomy import COMPILATION

ROW = f"rest / {COMPILATION}"
_SHAPE = re.compile(r"at ([^,]+), now (\w+\[[\d,]*\])\S* and before (\w+\[[\d,]*\])")


def facts(e: dict[str, Any]) -> dict[str, Any]:
    """One explained side's compilation: ``ms`` a step (traced), ``traced_compiles`` in ``traced_steps``, and
    from the doctor's log where there is one: ``compiles`` over ``steps``, ``compile_s``, ``retraces``,
    ``cause`` (the most common), ``argument`` and ``shapes`` (now, before) of the first change it printed,
    ``axes`` (the dimensions that changed) and ``finding`` (its id). {} when it compiled nothing."""
    ms = (e.get("cells") or {}).get("rest", {}).get(COMPILATION, 0.0)
    log = (e.get("recorded") or {}).get("compiles") or {}
    if not ms and not log:
        return {}
    out: dict[str, Any] = {"ms": ms, "traced_compiles": int(e.get("compiles") or 0),
                           "traced_steps": int(e.get("steps_used") or 0)}
    for k in ("compiles", "steps", "compile_s", "retraces", "finding"):
        if k in log:
            out[k] = log[k]
    causes = log.get("causes") or {}
    if causes:
        out["cause"] = max(causes, key=lambda c: causes[c])
    for line in log.get("shapes") or []:
        m = _SHAPE.search(line)
        if m:
            out["argument"], out["shapes"] = m.group(1).strip(), [m.group(2), m.group(3)]
            out["axes"] = _axes(m.group(2), m.group(3))
            break
    return out


def _axes(now: str, before: str) -> list[int]:
    """The dimensions two shapes (``i32[32,55]``, ``i32[32,39]``) differ in; [] when their ranks differ."""
    a = [d for d in now[now.index("[") + 1:-1].split(",") if d]
    b = [d for d in before[before.index("[") + 1:-1].split(",") if d]
    return [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y] if len(a) == len(b) else []


def _named_axis(shape: str, dims: list[int]) -> str:
    """What a changing dimension is where the shape says it: axis 0 of any input is the batch; axis 1 of a
    two-dimensional integer input (token ids, ``i32[32,55]``) is the sequence length."""
    if dims == [0]:
        return ", the batch"
    if dims == [1] and re.match(r"^[iu]\d+\[\d+,\d+\]$", shape):
        return ", the sequence length"
    return ""


def said(row: dict[str, Any], a: dict[str, Any], b: dict[str, Any], pm: str = "") -> str:
    """The summary's words for the compilation row: ``compilation +10.3 s a step: 24 compiles in 60 steps,
    caused by the shape of ids (i32[32,55] against i32[32,39]: its dimension 1) (see the doctor's
    jax-recompile)`` for the side it is larger on; ``pm``: its uncertainty as printed (`` ±0.4``), in the
    row's unit."""
    d = row["diff_ms"]
    side = b if d >= 0 else a
    f = facts(side)
    u = row.get("uncertainty_ms")
    size = (f"{abs(d) / 1e3:.1f}" + (f" ±{u / 1e3:.1f}" if u is not None else "") + " s" if abs(d) >= 1000
            else f"{abs(d):.1f}{pm} ms")
    text = f"{COMPILATION} +{size} a step on {side['run']}"
    if not f:
        return text
    if f.get("compiles") is not None and f.get("steps"):
        text += f": {f['compiles']} compiles in {f['steps']} steps (twinbench doctor)"
    elif f["traced_compiles"]:
        text += f": {f['traced_compiles']} compiles in the {f['traced_steps']} traced steps"
    if f.get("shapes"):
        dims = f.get("axes") or []
        which = f": its dimension{'s' if len(dims) > 1 else ''} {', '.join(map(str, dims))}" if dims else ""
        which += _named_axis(f["shapes"][0], dims)
        text += f", caused by the shape of {f['argument']} ({f['shapes'][0]} against {f['shapes'][1]}{which})"
    elif f.get("cause"):
        text += f", caused by a changing {f['cause']}"
    if f.get("finding"):
        text += f" (see the doctor's {f['finding']})"
    return text
