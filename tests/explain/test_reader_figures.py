"""The trace readers give the same figures as before they streamed: every fixture's step, its steps, its phase x
category cells, its op count, top ops and the FLOPs, bytes and calls the op groups count.

The expected values in reader_figures.json were taken from the previous reader (the whole file parsed into
Python objects, before the streaming readers), one entry per fixture in tests/explain/fixtures; a reader change
that moves any figure beyond rounding fails here. Two changes since, each deliberate: the torch traces' bytes
(``gbytes``) no longer count a view op (``aten::select``, ``as_strided``...) as moving its whole input, and the
VAE pairs and the LSTM pair, added after the readers streamed, are pinned from the streaming reader (the LSTM pair with
its fused recurrent layers counted as matmuls), and the torch traces' element-wise row counting only ops named as
pointwise (views and bookkeeping such as ``aten::item`` moved to data movement, an unknown op to other), and a
JAX convolution's FLOPs counted as XLA's cost analysis counts them, its dimensions read from its ``dim_labels``
(the Flax MNIST pair: 1.6226 GFLOP a step, where the kernel's largest dimension taken for its output features
halved two of its five convolutions). The recompile pair (issue 73) is pinned as compilation became a row.
Fixtures and their sources: fixtures/README.md."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from twinbench.explain import gap, ops, trace_file

FIX = Path(__file__).parent / "fixtures"
EXPECTED: dict[str, dict[str, Any]] = json.loads((Path(__file__).parent / "reader_figures.json").read_text())


def _hlo(name: str) -> str | None:
    """The compiled HLO text each JAX fixture was pinned with (the same HLO for the no-block variant)."""
    if name == "h200_jax_jit_bf16.xplane.pb.gz":
        return str(FIX / "h200_jax_jit_bf16.hlo.txt.gz")
    if name.startswith(("pair_", "recompile_")) and "_jax" in name:
        return str(FIX / f"{name.split('_jax')[0]}_jax.hlo.txt.gz")
    return None


def figures(name: str) -> dict[str, Any]:
    """The figures pinned for one fixture, as the reader gives them now (the same rounding as when pinned)."""
    h = _hlo(name)
    kind, _, b = trace_file.read(str(FIX / name), hlo=h)
    d = b.to_dict()
    groups = ops.groups(gap.trace_record(kind, b.hlo_path), b, 1.0)
    return {
        "hlo": bool(h), "step_ms": round(b.step_ms, 4), "steps_traced": b.steps_traced, "steps_used": b.steps_used,
        "overlap": round(b.overlap, 4), "spread": round(b.step_spread, 4), "categorized": d["categorized_share"],
        "device": b.device,
        "cells": {p: {c: round(v, 4) for c, v in sorted(row.items()) if round(v, 4)}
                  for p, row in sorted(d["cells"].items()) if row},
        "n_ops": len(b.ops), "gflops": round(sum(g.flops for g in groups) / 1e9, 4),
        "gbytes": round(sum(g.bytes for g in groups) / 1e9, 4), "calls": round(sum(g.calls for g in groups), 2),
        "top": [[o["name"][:80], o["phase"], o["category"], round(o["ms"], 4), o["count"]] for o in d["ops"][:5]],
    }


def _same(got: Any, want: Any, where: str) -> None:
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), (where, sorted(got), sorted(want))
        for k in want:
            _same(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (where, got, want)
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _same(g, w, f"{where}[{i}]")
    elif isinstance(want, float):  # within rounding: the pinned values are rounded to 4 decimals
        assert math.isclose(got, want, rel_tol=1e-4, abs_tol=2e-4), (where, got, want)
    else:
        assert got == want, (where, got, want)


def test_every_fixture_is_pinned() -> None:
    # explain_v0_*: explain's own JSON of an earlier version (read by tests/explain/test_explain_unit.py), not a trace
    traces = {f.name for f in FIX.glob("*.gz") if ".hlo." not in f.name and not f.name.startswith("explain_")}
    assert traces == set(EXPECTED)


@pytest.mark.heavy  # every fixture read whole: a CPU-second or two each (tests/tiers.py)
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_reader_gives_the_pinned_figures(name: str) -> None:
    _same(figures(name), EXPECTED[name], name)


def test_an_xla_cpu_profile_without_its_hlo_is_refused_with_its_figures(tmp_path: Path) -> None:
    """SYNTHETIC cells: an XLA:CPU profile whose ops are named only by fusion (mostly 'other', mostly 'rest') is
    one line giving how much was categorized and put in a phase, idle left out of both; one named by its HLO is
    read."""
    from twinbench.explain import jax_trace
    from twinbench.explain.breakdown import Breakdown
    from twinbench.explain.steps import TraceError

    b = Breakdown()
    b.cells["rest"]["other"], b.cells["rest"]["idle"], b.cells["forward"]["matmul"] = 6.0, 50.0, 4.0
    with pytest.raises(TraceError, match=r"\(40% of op time categorized, 40% in a phase\)"):
        jax_trace._needs_hlo(b, tmp_path / "x.xplane.pb")
    b.cells["backward"]["matmul"] = 60.0  # 64 of 70 ms categorized and in a phase: read
    jax_trace._needs_hlo(b, tmp_path / "x.xplane.pb")
