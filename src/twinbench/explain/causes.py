"""Which gap rows explain may name as where a gap comes from.

A fusing compiler (XLA, for JAX and torchax programs; Inductor, for ``torch.compile``) puts an element-wise op,
a normalization and a reduction into one kernel, and that kernel is filed under one category. The same work
sits in ``backward / element-wise`` on an eager torch trace and in ``backward / normalization`` on a JAX one:
the two rows move in opposite directions, and neither difference is a difference of the programs. So where
either side fuses, a memory-bound row (element-wise, normalization, reductions, data movement) is named for
no more than its phase's memory-bound rows together confirm: its difference, capped at the sum of their
differences, and nothing when that sum goes the other way.

A row is named when this part carries at least :data:`NAMED_SHARE` of the gap (the largest row is named
always) and is larger than either trace's steps move from one to the next (the slowest attributed step less
the fastest): a difference smaller than that is not told apart from noise by one recording. Smaller rows are
in the table, not in the sentence. An idle row (host time no op covers: the loop's
Python, dispatch, and the profiler's own cost per op, which lands between ops) is never named as where the
gap comes from: a trace cannot tell those apart, only the loop timed without the profiler can.
"""

from __future__ import annotations

import re
from typing import Any

MEMORY_BOUND = ("element-wise", "normalization", "reductions", "data movement")
NAMED_SHARE = 0.10
#: kernel names of a torch.compile program (Inductor's Triton and C++ kernels)
_FUSED_KERNEL = re.compile(r"^(triton_|cpp_fused|fused_)|CompiledFunction")


def fuses(side: dict[str, Any]) -> bool:
    """Whether a run's kernels come from a fusing compiler: XLA (a JAX or torchax run), or Inductor."""
    if str(side.get("run", "")).startswith("jax"):
        return True
    return any(_FUSED_KERNEL.search(str(k.get("name", ""))) for k in side.get("kernels") or [])


def mark(a: dict[str, Any], b: dict[str, Any], table: list[dict[str, Any]]) -> None:
    """Give each category row (level 1) ``named_ms``: the part of its B-A that may be named (see the module),
    and for a memory-bound row capped by fusion, ``fused_with``: the rows of its phase that went the other way."""
    fused = fuses(a) or fuses(b)
    noise = max(a.get("step_spread_ms") or 0.0, b.get("step_spread_ms") or 0.0)
    phase_sum: dict[str, float] = {}
    for r in table:
        if r["level"] == 1 and _category(r) in MEMORY_BOUND:
            phase_sum[_phase(r)] = phase_sum.get(_phase(r), 0.0) + r["diff_ms"]
    for r in table:
        if r["level"] != 1:
            continue
        d = r["diff_ms"]
        r["named_ms"] = d
        if fused and _category(r) in MEMORY_BOUND:
            g = phase_sum.get(_phase(r), 0.0)
            r["named_ms"] = (1 if d >= 0 else -1) * min(abs(d), abs(g)) if d * g > 0 else 0.0
            if abs(r["named_ms"]) < abs(d) - 1e-9:
                r["fused_with"] = [o["row"] for o in table if o["level"] == 1 and _phase(o) == _phase(r)
                                   and _category(o) in MEMORY_BOUND and o["diff_ms"] * d < 0]
        if 0 < abs(r["named_ms"]) <= noise:
            r["named_ms"], r["within_noise_ms"] = 0.0, noise


def named(table: list[dict[str, Any]], gap: float, level: int, top: int = 3) -> list[dict[str, Any]]:
    """The rows at ``level`` a summary names, largest first in the gap's direction (see the module)."""
    sign = 1 if gap >= 0 else -1
    rows = sorted((r for r in table if r["level"] == level and not unattributed(r)),
                  key=lambda r: -sign * r.get("named_ms", r["diff_ms"]))
    keep = [r for r in rows if sign * r.get("named_ms", r["diff_ms"]) >= NAMED_SHARE * abs(gap) - 1e-9]
    return (keep or rows[:1])[:top]


def unattributed(r: dict[str, Any]) -> bool:
    """An idle row: host time between ops (see the module)."""
    return r["level"] == 1 and _category(r) == "idle"


def _phase(r: dict[str, Any]) -> str:
    return r["row"].split(" / ")[0]


def _category(r: dict[str, Any]) -> str:
    return r["row"].split(" / ")[-1]
