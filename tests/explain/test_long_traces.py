"""A long torch trace, read in bounded memory, gives its original's per-step figures: fixtures repeated to ~20 steps
by benchmarks/trace_scaling.py's generator (the one that makes the 1 GB and 2 GB traces), read with chunks and
buckets small enough that the events go to disk, the host ops are walked bucket after bucket and the kernels
joined over several partitions. Fixtures and their sources: fixtures/README.md."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from twinbench.explain import gap, jax_trace, ops, spill, torch_trace, tpu_trace, xplane
from twinbench.explain.breakdown import Breakdown
from twinbench.explain.steps import TraceError

FIX = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parents[2]


def _scaling() -> Any:
    spec = importlib.util.spec_from_file_location("trace_scaling", ROOT / "benchmarks" / "trace_scaling.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def _long(name: str, steps: int, dst: Path) -> tuple[Path, int]:
    """``name`` repeated to about ``steps`` steps; (the trace, its copies)."""
    events = json.loads(gzip.decompress((FIX / name).read_bytes()))["traceEvents"]
    per_copy = sum(len(json.dumps(e)) + 2 for e in events if e.get("ph") != "M") / 1e6
    original_steps = torch_trace.read(str(FIX / name)).steps_traced
    copies, _ = _scaling().make_trace(name, dst, per_copy * steps / original_steps)
    return dst, copies


def _per_step(b: Breakdown, kind: str = "torch") -> dict[str, Any]:
    groups = ops.groups(gap.trace_record(kind), b, 1.0)
    return {"step_ms": b.step_ms, "overlap": b.overlap, "spread": b.step_spread, "device": b.device,
            "cells": {(p, c): v for p, row in b.cells.items() for c, v in row.items() if v},
            "ops": {k: (round(t.ms, 6), t.count, t.category) for k, t in b.ops.items()},
            "calls": sum(g.calls for g in groups), "gflops": sum(g.flops for g in groups) / 1e9,
            "gbytes": sum(g.bytes for g in groups) / 1e9}


def _same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a["device"] == b["device"] and set(a["cells"]) == set(b["cells"]) and set(a["ops"]) == set(b["ops"])
    for k in ("step_ms", "overlap", "spread", "calls", "gflops", "gbytes"):
        assert a[k] == pytest.approx(b[k], rel=1e-6, abs=1e-9), k
    for k, v in a["cells"].items():
        assert v == pytest.approx(b["cells"][k], rel=1e-6, abs=1e-9), k
    for k, (ms, count, cat) in a["ops"].items():
        assert (count, cat) == b["ops"][k][1:] and ms == pytest.approx(b["ops"][k][0], rel=1e-5, abs=1e-6), k


@pytest.mark.heavy  # a long trace made and read twice over: a few CPU-seconds (tests/tiers.py)
@pytest.mark.parametrize(("name", "part"), [("hta_amd_mi250_minitoy_train.json.gz", 23),
                                           ("pair_mnist_torch.json.gz", 301)])
def test_a_long_trace_read_in_buckets_gives_its_originals_per_step_figures(
        name: str, part: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU trace (its 16 kernels a copy joined to their launches over many partitions) and a CPU-only one
    (ops' self time), ~20 steps each."""
    original = torch_trace.read(str(FIX / name))
    path, copies = _long(name, 20, tmp_path / "long.json")
    monkeypatch.setattr(spill, "CHUNK", 97)  # rows in memory before they go to disk
    monkeypatch.setattr(spill, "PART", part)  # events a bucket or partition holds: many of them
    ev = torch_trace.load(str(path))
    try:
        assert ev.on_disk > len(ev) / 2  # the columns went to disk
    finally:
        ev.close()
    long = torch_trace.read(str(path))
    assert copies >= 6 and long.steps_traced == copies * original.steps_traced >= 18
    assert long.steps_used == copies * original.steps_used
    _same(_per_step(long), _per_step(original))


def test_the_spilled_columns_are_removed_once_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[str] = []

    def mkdtemp(prefix: str) -> str:
        made.append(str(tmp_path / f"{prefix}{len(made)}"))
        Path(made[-1]).mkdir()
        return made[-1]

    monkeypatch.setattr(spill.tempfile, "mkdtemp", mkdtemp)
    monkeypatch.setattr(spill, "CHUNK", 500)
    torch_trace.read(str(FIX / "pair_mnist_torch.json.gz"))
    with pytest.raises(TraceError, match="no device 7"):
        torch_trace.read(str(FIX / "pair_mnist_torch.json.gz"), device=7)
    assert len(made) == 2 and list(tmp_path.iterdir()) == []  # each read made its folder, and removed it


@pytest.mark.heavy  # a long profile made and read: a few CPU-seconds (tests/tiers.py)
def test_a_long_tpu_profile_read_a_field_at_a_time_gives_its_originals_per_step_figures(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A TPU profile's steps repeated (trace_scaling.py --xplane), gzipped as profiles are kept: the streamed
    reader gives its original's per-step figures, every step found, each step attributed as the line's events
    come (not the fallback that holds them all)."""
    name = "tpu_v5e_user_flax.xplane.pb.gz"
    original = jax_trace.read(str(FIX / name))
    streamed: list[bool] = []
    attribute = tpu_trace._attribute

    def spy(*a: Any, stream: bool) -> Any:
        streamed.append(stream)
        return attribute(*a, stream=stream)

    monkeypatch.setattr(tpu_trace, "_attribute", spy)
    raw = tmp_path / "long.xplane.pb"
    copies, _ = _scaling().make_xplane(name, raw, 0.04)
    path = tmp_path / "long.xplane.pb.gz"
    path.write_bytes(gzip.compress(raw.read_bytes()))
    long = jax_trace.read(str(path))
    assert copies >= 6 and long.steps_traced == copies * original.steps_traced >= 12
    assert long.steps_used == copies * original.steps_used
    _same(_per_step(long, "jax"), _per_step(original, "jax"))
    assert streamed == [True]


def test_an_unwritable_temporary_folder_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(prefix: str) -> str:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(spill.tempfile, "mkdtemp", refuse)
    with pytest.raises(TraceError, match="TMPDIR to a writable folder"):
        torch_trace.read(str(FIX / "pair_mnist_torch.json.gz"))


def test_a_tpu_line_out_of_time_order_is_attributed_as_one_in_order() -> None:
    """Streaming attributes a step once an op starts past its end; an op of a step already attributed (a line
    out of time order) is said (_Unsorted), and holding the ops then gives what the ordered line gives."""
    md = {i: xplane.EventMetadata(i, f"fusion.{i}", f"fusion.{i}", {"hlo_category": "loop fusion",
                                                                    "tf_op": f"jit(step)/jvp(m)/op{i}"})
          for i in range(3)}
    infos = {i: tpu_trace._Info(m) for i, m in md.items()}
    ordered = [(0, 1.0e6, 2.0e6), (1, 3.0e6, 1.0e6), (2, 5.0e6, 2.0e6), (0, 8.0e6, 1.0e6)]
    keep = [(0.0, 4.5e6), (4.5e6, 9.0e6)]

    def run(order: list[tuple[int, float, float]], stream: bool) -> Breakdown:
        b = Breakdown()
        busy, seen = tpu_trace._attribute(b, keep, (tpu_trace._Op(infos[i], s, d) for i, s, d in order), {}, stream)
        assert seen
        return b.finish(2, 4.5, busy_ms=busy / 2 / 1e6)

    want = run(ordered, stream=True)
    shuffled = [ordered[2], ordered[0], ordered[3], ordered[1]]
    with pytest.raises(tpu_trace._Unsorted):
        run(shuffled, stream=True)
    got = run(shuffled, stream=False)
    assert got.to_dict() == want.to_dict() and [r[:7] for r in got.raw] == [r[:7] for r in want.raw]
    assert want.cells["forward"] and sum(t.count for t in want.ops.values()) >= 3
