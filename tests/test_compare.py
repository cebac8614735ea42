"""`twinbench compare` end to end, and nothing lost: failures become rows, interrupts keep rows, resume.

Every run here is a real subprocess on the tiny preset (a few seconds each on the 2-core CPU).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import jsonschema
import pytest

from twinbench import runner
from twinbench.record import read_jsonl
from twinbench.spec import from_preset, validate

TINY = ["--preset", "tiny", "--steps", "6", "--warmup", "2"]


def twinbench(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "twinbench.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
def test_compare_gives_ok_records_for_the_first_strategies(tmp_path, records_unchanged):
    out, js = tmp_path / "run", tmp_path / "r.json"
    p = twinbench("compare", *TINY, "--framework", "torch,jax", "--strategies", "eager,naive,jit",
                  "--out", str(out), "--json", str(js))
    assert p.returncode == 0, p.stderr[-2000:]
    records = json.loads(js.read_text())
    assert [(r["framework"], r["strategy"], r["status"]) for r in records] == [
        ("torch", "eager", "ok"), ("jax", "naive", "ok"), ("jax", "jit", "ok")]
    records_unchanged(records, "compare_tiny")  # the same fields and losses as before the trainers were unified
    jit = records[2]
    assert jit["compiles_during_steps"] == 0 and jit["compile_s"] > 0
    for r in records:
        assert r["step_ms_p10"] <= r["step_ms"] <= r["step_ms_p90"]
        assert r["tokens_per_s"] == pytest.approx(4 * 32 / (r["step_ms"] / 1e3))
        assert r["flops_per_token"] > 6 * 100_000 and 0 < r["mfu"] < 1.5
        assert r["peak_mem_bytes"] > 0 and r["versions"] and len(r["losses"]) == 6
        assert r["load_avg_1m"] is not None and r["cpu_count"] >= 1  # the load when the run started
        assert r["peak_measured_at"] and r["peak_spread"] >= 0
    # the same weights and batches: both frameworks start from the same loss
    assert records[0]["loss_first"] == pytest.approx(records[2]["loss_first"], rel=1e-5)
    assert len(read_jsonl(out / "results.jsonl")) == 3
    schema = json.loads((Path(__file__).resolve().parents[1] / "docs" / "record.schema.json").read_text())
    for line in (out / "results.jsonl").read_text().splitlines():  # every record a run writes: the schema's
        jsonschema.validate(json.loads(line), schema)
    summary = (out / "summary.md").read_text()
    assert "jax/jit" in summary and r"6N + 12\*L\*d\*T" in summary  # Markdown-escaped: renders as 6N + 12*L*d*T
    assert "torch/eager" in p.stdout and "MFU" in p.stdout
    assert "GFLOP/s (spread " in p.stdout and "load: 1-minute load average" in p.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--heads", "3"], "--heads 3 does not divide --d-model 64"),
    (["--strategies", "warp"], "--strategies: unknown strategy 'warp'"),
    (["--framework", "mxnet"], "--framework: unknown framework 'mxnet'"),
    (["--preset", "huge"], "--preset: unknown value 'huge'"),
    (["--data", "/nonexistent/file.txt"], "--data /nonexistent/file.txt: no such file"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    p = twinbench("compare", "--preset", "tiny", *args)
    assert p.returncode == 2
    assert message in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_failures_become_rows_and_the_others_go_on(tmp_path):
    ok = validate(from_preset("tiny", {"steps": 3, "warmup": 1}, framework="torch", strategy="eager"))
    nan = validate(from_preset("tiny", {"steps": 3, "warmup": 1, "lr": 1e30}, framework="torch", strategy="eager"))
    slow = validate(from_preset("tiny", {"steps": 3, "warmup": 1, "seed": 5}, framework="jax", strategy="jit"))
    text = tmp_path / "gone.txt"
    text.write_text("some text " * 50)
    gone = validate(from_preset("tiny", {"steps": 3, "warmup": 1, "data": str(text)}, framework="torch",
                                strategy="eager"))
    text.unlink()  # the file vanishes after validation: the worker itself fails
    records = runner.run_many([nan, gone, ok], tmp_path, timeout=300)
    assert [r.status for r in records] == ["failed", "failed", "ok"]
    assert "loss became" in records[0].error and "nan" in records[0].error.lower()
    assert "no such file" in records[1].error
    timed_out = runner.run_one(slow, timeout=0.5)
    assert timed_out.status == "failed" and "timed out after 0.5 s" in timed_out.error
    assert len(read_jsonl(tmp_path / "results.jsonl")) == 3


def test_an_interrupt_while_the_worker_starts_still_kills_it(monkeypatch):
    """Ctrl-C landing inside ``Popen`` (the worker started, ``Popen`` not yet returned) stops the worker too."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers can only be set in the main thread")
    started: list[subprocess.Popen] = []
    real_popen = subprocess.Popen

    def popen(*args, **kwargs):
        started.append(real_popen(*args, **kwargs))
        signal.raise_signal(signal.SIGINT)  # the user's Ctrl-C, before Popen returns
        return started[-1]

    monkeypatch.setattr(subprocess, "Popen", popen)
    spec = validate(from_preset("tiny", {"steps": 3, "warmup": 1}, framework="torch", strategy="eager"))
    with pytest.raises(KeyboardInterrupt):  # SIGINT is Python's KeyboardInterrupt in the tests (conftest.py)
        runner.run_one(spec, timeout=60)
    (worker,) = started
    running = worker.poll() is None
    if running:
        os.killpg(worker.pid, signal.SIGKILL)
    assert not running, "the worker was left running after the interrupt"


def test_interrupted_compare_keeps_rows_and_resume_skips_them(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "twinbench.cli", "compare", *TINY, "--framework", "torch",
           "--strategies", "eager", "--seed", "1", "--out", str(out)]
    # first: one finished run
    assert subprocess.run(cmd, capture_output=True, timeout=300).returncode == 0
    first = read_jsonl(out / "results.jsonl")
    assert len(first) == 1
    # then a compare of two runs over the same directory, interrupted while its new run is going: it is
    # interrupted once its worker has started (seen by its spec file in the runner's temporary directory),
    # not after a fixed sleep, which on a busy machine can fall before the run starts and on a fast one after
    # it ends
    cmd2 = [*cmd[:-2], "--framework", "torch,jax", "--strategies", "eager,jit", "--resume", str(out)]
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen(cmd2, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "200", "TMPDIR": str(tmp)})
    deadline = time.monotonic() + 240

    def worker_started() -> bool:  # compare has a child that already runs the worker's code (exec done)
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        for pid in children.read_text().split() if children.exists() else []:
            with contextlib.suppress(OSError):
                if b"twinbench.worker" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return True
        return False

    while not worker_started() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the compare ended before its run could be interrupted"
    proc.send_signal(signal.SIGINT)  # the worker needs seconds to import jax: the run is still going
    out_text, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, f"stderr: {err}\nstdout: {out_text[-2000:]}"
    assert "--resume" in err and "Traceback" not in err
    assert read_jsonl(out / "results.jsonl") == first  # the finished row is intact, nothing torn
    # resume: the torch row is skipped (kept as is), only jax/jit runs
    p = subprocess.run(cmd2, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = read_jsonl(out / "results.jsonl")
    assert len(rows) == 2 and rows[0] == first[0] and rows[1]["strategy"] == "jit"


def test_torn_last_line_is_ignored(tmp_path):
    path = Path(tmp_path, "results.jsonl")
    path.write_text('{"run_id": "a", "status": "ok"}\n{"run_id": "b", "sta')
    assert [r["run_id"] for r in read_jsonl(path)] == ["a"]


def test_strategies_lists_each_with_a_line():
    p = twinbench("strategies")
    assert p.returncode == 0
    for name in ("eager", "naive", "jit"):
        assert name in p.stdout
