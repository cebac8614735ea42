"""Putting a finding's printed fix into a copy of the script it read, and checking that the copy ran: shared by
the tests that run the fixes (test_doctor_fixes_run.py, and test_doctor_examples.py for the example whose run
under the doctor that file already makes)."""

from __future__ import annotations

import re
from pathlib import Path


def apply_decorators(fix: str, script: Path, out: Path, at: list[int] | None = None) -> Path:
    """Put each decorator the fix prints (``@...`` on its own line, after the ``file:line`` it belongs at, or at
    the lines ``at``) on the line above that definition, in place of a jit decorator already there."""
    pairs = [(int(line), deco) for _, line, deco in re.findall(r"^\s*(\S+\.py):(\d+)\n\s*(@.+)$", fix, re.M)]
    if at is not None:
        pairs = list(zip(at, re.findall(r"^\s*(@.+)$", fix, re.M), strict=True))
    assert pairs, fix
    lines = script.read_text().splitlines()
    for line, deco in sorted(pairs, reverse=True):
        idx = line - 1  # a decorated function's first line is its first decorator
        indent = re.match(r"\s*", lines[idx]).group(0)
        if lines[idx].strip().startswith("@") and "jit" in lines[idx]:
            lines[idx] = indent + deco
        else:
            lines.insert(idx, indent + deco)
    imports = [m for m in ("import functools", "from flax import nnx", "import jax") if m in fix]
    out.write_text("\n".join([*imports, *lines]) + "\n")
    return out


def script_ran(res: object) -> None:
    """The script ran to its end under the doctor: no exception, no non-zero exit, no timeout."""
    obs = res.observations  # type: ignore[attr-defined]
    assert obs.error is None, obs.error
    assert not res.timed_out and not obs.killed, res.output_tail[-2000:]  # type: ignore[attr-defined]
    assert "script-error" not in {f.id for f in res.findings}  # type: ignore[attr-defined]


def finding(res: object, fid: str) -> object:
    found = [f for f in res.findings if f.id == fid]  # type: ignore[attr-defined]
    assert found, [f.id for f in res.findings]  # type: ignore[attr-defined]
    return found[0]
