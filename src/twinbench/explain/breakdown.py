"""A run's step, attributed: phases x categories (and scopes) in milliseconds per step, from a trace."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

PHASES = ("input", "forward", "backward", "optimizer", "rest")
DISTURBED = 1.25  # a traced step this much slower than the fastest was disturbed (descheduled, preempted)


def undisturbed(durations: list[float]) -> list[int]:
    """The indices of the traced steps to attribute: those within ``DISTURBED`` x the fastest. A step that
    another process descheduled is slow in whichever op it was running; averaging it in would blame that op."""
    fastest = min(durations, default=0.0)
    return [i for i, d in enumerate(durations) if d <= DISTURBED * fastest]


@dataclass
class Breakdown:
    """Per-step milliseconds of one traced run. ``cells[phase][category]``; ``rest`` holds the step time no op
    covers (dispatch, Python, idle threads); ``other`` lists the largest uncategorized ops."""

    step_ms: float = 0.0
    cells: dict[str, dict[str, float]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(float)))
    scopes: dict[str, dict[str, float]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(float)))
    other: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    overlap: float = 1.0  # summed op time / the step's busy time (> 1: ops ran concurrently, scaled down)
    source: str = ""
    steps_traced: int = 0  # steps in the trace; those attributed (undisturbed) are the ``finish`` count
    steps_used: int = 0
    #: every attributed op as read (phase, category, ms, scope, name, detail), summed over the steps used and
    #: not yet divided: explain/ops.py groups them (FLOPs, shapes) and divides as ``finish`` did the cells
    ops: list[tuple[str, str, float, str, str, Any]] = field(default_factory=list)

    def add(self, phase: str, category: str, ms: float, scope: str = "", name: str = "", detail: Any = None) -> None:
        if phase == "optimizer" and category not in ("matmul", "collectives"):
            category = "optimizer"  # the update is one category, whatever its element-wise ops are
        self.ops.append((phase, category, ms, scope, name, detail))
        self.cells[phase][category] += ms
        if scope:
            self.scopes[scope][phase] += ms
        if category == "other" and name:
            self.other[name] += ms

    def phases(self) -> dict[str, float]:
        return {p: sum(self.cells.get(p, {}).values()) for p in PHASES}

    def categories(self) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for p in PHASES:
            for c, ms in self.cells.get(p, {}).items():
                if p != "rest" or c != "idle":
                    out[c] += ms
        return dict(out)

    def finish(self, steps: int, step_ms: float) -> Breakdown:
        """Divide sums over ``steps`` traced steps; scale ops down when they overlap; fill ``rest/idle``."""
        for table in (self.cells, self.scopes):
            for row in table.values():
                for k in row:
                    row[k] /= max(steps, 1)
        for k in self.other:
            self.other[k] /= max(steps, 1)
        busy = sum(sum(r.values()) for r in self.cells.values())
        if busy > step_ms > 0:
            self.overlap = busy / step_ms
            for table in (self.cells, self.scopes):
                for row in table.values():
                    for k in row:
                        row[k] /= self.overlap
            busy = step_ms
        self.step_ms = step_ms
        self.steps_used = steps
        self.cells["rest"]["idle"] += max(step_ms - busy, 0.0)
        return self

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"step_ms": round(self.step_ms, 4), "overlap": round(self.overlap, 3),
                             "source": self.source, "steps_traced": self.steps_traced,
                             "steps_used": self.steps_used}
        d["cells"] = {p: {c: round(v, 4) for c, v in row.items() if v} for p, row in self.cells.items()}
        d["scopes"] = {s: {p: round(v, 4) for p, v in row.items() if v} for s, row in self.scopes.items()}
        d["other"] = dict(sorted(((k, round(v, 4)) for k, v in self.other.items()), key=lambda kv: -kv[1])[:8])
        d["phases"] = {p: round(v, 4) for p, v in self.phases().items()}
        cats = self.categories()
        op_ms = sum(v for k, v in cats.items() if k != "idle")
        d["categorized_share"] = round(1 - cats.get("other", 0.0) / op_ms, 4) if op_ms else 0.0
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Breakdown:
        b = cls(step_ms=d.get("step_ms", 0.0), overlap=d.get("overlap", 1.0), source=d.get("source", ""),
                steps_traced=d.get("steps_traced", 0), steps_used=d.get("steps_used", 0))
        for p, row in d.get("cells", {}).items():
            for c, v in row.items():
                b.cells[p][c] = v
        for s, row in d.get("scopes", {}).items():
            for p, v in row.items():
                b.scopes[s][p] = v
        b.other.update(d.get("other", {}))
        return b
