"""The streaming trace readers: a long trace made of a fixture's steps repeated gives the fixture's per-step
figures (plain or gzipped), ``--steps A:B`` explains a window of them, names are cut where they are read, and
what is parsed whole (HLO text) is refused over its cap before it is read. Fixtures: fixtures/README.md."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from twinbench.cli import app
from twinbench.explain import files, steps, torch_trace, trace_file
from twinbench.explain.steps import TraceError

FIX = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parents[2]


def _scaling() -> Any:
    """benchmarks/trace_scaling.py, whose generator makes the long traces (one generator for both)."""
    spec = importlib.util.spec_from_file_location("trace_scaling", ROOT / "benchmarks" / "trace_scaling.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


@pytest.fixture(scope="module")
def long_trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """h200_torch_compile_bf16 (3 steps) repeated twice: 6 steps, host events first, then the device's."""
    path = tmp_path_factory.mktemp("long") / "long.json"
    copies, _ = _scaling().make_trace("h200_torch_compile_bf16.json.gz", path, 2 * _copy_mb())
    return path, copies


def _copy_mb() -> float:
    raw = gzip.decompress((FIX / "h200_torch_compile_bf16.json.gz").read_bytes())
    events = json.loads(raw)["traceEvents"]
    return sum(len(json.dumps(e)) + 2 for e in events if e.get("ph") != "M") / 1e6


def _cells(b: Any) -> dict[tuple[str, str], float]:
    return {(p, c): v for p, row in b.cells.items() for c, v in row.items() if v}


def _close(a: dict[tuple[str, str], float], b: dict[tuple[str, str], float], step_ms: float) -> None:
    assert set(a) == set(b), (sorted(a), sorted(b))
    for k in a:
        assert abs(a[k] - b[k]) <= 1e-6 * step_ms, (k, a[k], b[k])


@pytest.mark.heavy  # reads a long trace or several fixtures: a few CPU-seconds
def test_a_long_trace_gives_the_per_step_figures_of_its_original(long_trace: tuple[Path, int]) -> None:
    path, copies = long_trace
    assert copies == 2
    original = torch_trace.read(str(FIX / "h200_torch_compile_bf16.json.gz"))
    long = torch_trace.read(str(path))
    assert long.steps_traced == 2 * original.steps_traced
    assert long.steps_used == 2 * original.steps_used  # the same step of each copy left out as disturbed
    assert long.step_ms == pytest.approx(original.step_ms, rel=1e-9)
    _close(_cells(long), _cells(original), original.step_ms)


@pytest.mark.heavy  # reads a long trace or several fixtures: a few CPU-seconds
def test_a_gzipped_trace_reads_as_its_plain_self(long_trace: tuple[Path, int], tmp_path: Path) -> None:
    path, _ = long_trace
    gz = tmp_path / "long.json.gz"
    with path.open("rb") as src, gzip.open(gz, "wb") as dst:
        dst.write(src.read())
    plain, packed = torch_trace.read(str(path)), torch_trace.read(str(gz))
    assert (packed.steps_traced, packed.step_ms) == (plain.steps_traced, plain.step_ms)
    assert _cells(packed) == _cells(plain)


@pytest.mark.heavy  # reads a long trace or several fixtures: a few CPU-seconds
def test_steps_window_explains_those_steps(long_trace: tuple[Path, int]) -> None:
    path, _ = long_trace
    original = torch_trace.read(str(FIX / "h200_torch_compile_bf16.json.gz"))
    second_copy = torch_trace.read(str(path), steps=(3, 6))  # the second copy's three steps
    assert second_copy.steps_traced == 3 and "steps 3 to 5 of 6" in second_copy.step_method
    assert second_copy.step_ms == pytest.approx(original.step_ms, rel=1e-9)
    _close(_cells(second_copy), _cells(original), original.step_ms)
    tail = torch_trace.read(str(path), steps=(4, 20))  # an end past the last step: cut there, and said
    assert tail.steps_traced == 2 and any("4 to 5 explained" in n for n in tail.notes)


@pytest.mark.parametrize(("window", "says"), [("5:2", "a window A:B"), ("x:3", "a window A:B"), ("3", "a window"),
                                              ("3:", "the trace has 3 steps")])
def test_a_bad_steps_window_is_one_line(window: str, says: str) -> None:
    res = CliRunner().invoke(app, ["explain", str(FIX / "pair_nanogpt_torch.json.gz"), "--steps", window])
    assert res.exit_code == 2 and says in res.output, res.output
    assert "Traceback" not in res.output


def test_steps_window_on_the_command_line_and_the_spread_said() -> None:
    res = CliRunner().invoke(app, ["explain", str(FIX / "pair_nanogpt_torch.json.gz"), "--steps", "1:3"])
    assert res.exit_code == 0, res.output
    assert "steps 1 to 2 of 3 (--steps)" in res.output and "spread" in res.output


def test_steps_for_runs_stays_the_number_of_training_steps(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["explain", "torch:eager", "jax:jit", "--steps", "1:3", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "number of training steps" in res.output, res.output


def test_steps_n_for_runs_reaches_the_spec(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from twinbench.explain import command

    seen: dict[str, Any] = {}

    def fake(run_a: str, run_b: str, preset: str, overrides: dict[str, Any], *rest: Any, **kw: Any) -> dict[str, Any]:
        seen.update(overrides)
        raise command.ExplainError("stopped before any run")

    monkeypatch.setattr(command, "explain", fake)
    res = CliRunner().invoke(app, ["explain", "torch:eager", "jax:jit", "--steps", "4", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "stopped before any run" in res.output, res.output
    assert seen["steps"] == 4


@pytest.mark.heavy  # reads a long trace or several fixtures: a few CPU-seconds
def test_a_jax_and_a_tpu_trace_take_a_window_too() -> None:
    whole = trace_file.read(str(FIX / "pair_nanogpt_jax.xplane.pb.gz"), hlo=str(FIX / "pair_nanogpt_jax.hlo.txt.gz"))
    _, _, two = trace_file.read(str(FIX / "pair_nanogpt_jax.xplane.pb.gz"),
                                hlo=str(FIX / "pair_nanogpt_jax.hlo.txt.gz"), steps=(0, 2))
    assert whole[2].steps_traced == 4 and two.steps_traced == 2
    _, _, tpu = trace_file.read(str(FIX / "tpu_v5e_jax_jit_bf16.xplane.pb.gz"), steps=(1, None))
    assert tpu.steps_traced == 1 and "steps 1 to 1 of 2" in tpu.step_method


def test_a_10_mb_name_is_cut_where_it_is_read(tmp_path: Path) -> None:
    big = "aten::" + "x" * 10_000_000
    ev = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "ts": 1000.0 * i, "dur": 900.0,
           "tid": 1} for i in range(4)]
    ev += [{"ph": "X", "cat": "cpu_op", "name": big if i == 1 else "aten::mm", "ts": 1000.0 * i + 10, "dur": 100.0,
            "tid": 1} for i in range(4)]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    b = torch_trace.read(str(p))
    assert max(len(t.name) for t in b.ops.values()) == torch_trace.MAX_NAME
    res = CliRunner().invoke(app, ["explain", str(p)])
    assert res.exit_code == 0 and max(map(len, res.output.splitlines())) < 400


def test_hlo_text_over_its_cap_is_refused_before_it_is_read(tmp_path: Path) -> None:
    huge = tmp_path / "step.hlo.txt"
    with huge.open("wb") as f:
        f.truncate(2 * 2**30)  # a sparse 2 GiB file: nothing is written, the reader must not read it
    with pytest.raises(TraceError, match="over the cap on a HLO text's size"):
        files.read_text(huge, "HLO text")


def test_a_stream_stops_at_its_cap_and_reads_what_gzip_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    body = b'{"traceEvents": [' + b" " * 3_000_000 + b"]}"
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(body[:1000]) + gzip.compress(body[1000:]))  # two members: one stream
    with files.stream(gz) as s:
        out = b"".join(iter(lambda: s.read(65536), b""))
    assert out == body
    monkeypatch.setenv("TWINBENCH_MAX_TRACE_MB", "1")
    with pytest.raises(TraceError, match="inflates past 1 MiB"), files.stream(gz) as s:
        while s.read(65536):
            pass


def test_within_finds_the_first_span_holding_a_time_as_a_scan_does() -> None:
    rng = random.Random(0)
    for _ in range(200):
        starts = sorted(rng.uniform(0, 100) for _ in range(rng.randint(1, 12)))
        spans = [(s, s + rng.choice([0.0, rng.uniform(0, 20)])) for s in starts]
        within = steps.Within(spans)
        for t in [rng.uniform(-5, 130) for _ in range(30)] + [e for _, e in spans] + starts:
            scan = next((i for i, (s, e) in enumerate(spans) if s <= t <= e), -1)
            assert within.first(t) == scan, (spans, t)


def test_the_reader_keeps_columns_not_the_parsed_events() -> None:
    ev = torch_trace.load(str(FIX / "hta_nccl_data.json.gz"))
    # one entry per kept event in each column, a name table far shorter than the events
    assert len(ev) == len(ev.ts) == len(ev.dur) == len(ev.extra) > 20_000
    assert len(ev.names) < len(ev) / 10
    assert os.path.getsize(FIX / "hta_nccl_data.json.gz") > 0
