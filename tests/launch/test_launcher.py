"""--launcher local (submitit's LocalExecutor, the code path of --launcher slurm): the same records as the
default launcher, a killed job becomes a failed row that --resume completes, Ctrl-C leaves no job running;
--dry-run and bad options."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from twinbench.launch import JobOptions, shape
from twinbench.launch.jobs import describe
from twinbench.measure.interference import _children
from twinbench.plan import run_spec
from twinbench.record import read_jsonl

TB = [sys.executable, "-m", "twinbench.cli"]
TINY = ["--preset", "tiny", "--steps", "4", "--warmup", "1", "--timeout", "240"]
#: what differs between two runs of the same spec whatever launched them: timings, conditions, where it ran
VARYING = {"compile_s", "first_step_s", "step_ms", "step_ms_p10", "step_ms_p90", "step_ms_mean", "step_times_ms",
           "step_ms_async",
           "tokens_per_s", "achieved_tflops", "mfu", "mfu_datasheet", "wall_s", "peak_mem_bytes", "load_avg_1m",
           "load_avg_1m_external", "cpu_count", "interference_cores", "cpu_busy_per_core", "interference_window_s",
           "page_faults_per_step", "kernel_cpu_share",
           "warnings", "peak_tflops", "peak_measured_at", "peak_spread", "peak_load_per_core", "input_wait_ms",
           "input_stall_pct", "real_tokens_per_s", "spec", "launcher", "job_id", "job_nodes", "launcher_state",
           "memory_breakdown"}


def _compare(out: Path, *extra: str, strategies: str = "torch:eager,torch:eager+bf16") -> subprocess.CompletedProcess:
    return subprocess.run([*TB, "compare", *TINY, "--strategies", strategies, "--out", str(out), *extra],
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow  # two tiny runs
def test_local_launcher_gives_the_records_of_the_default_one(tmp_path):
    one = "torch:eager+bf16"  # every field of its record but the varying ones must come back the same
    default = _compare(tmp_path / "default", strategies=one)
    local = _compare(tmp_path / "local", "--launcher", "local", strategies=one)
    assert default.returncode == 0 and local.returncode == 0, local.stderr[-2000:]
    a, b = read_jsonl(tmp_path / "default" / "results.jsonl"), read_jsonl(tmp_path / "local" / "results.jsonl")
    assert len(a) == len(b) == 1
    for x, y in zip(a, b, strict=True):
        differ = sorted(k for k in x.keys() | y.keys() if k not in VARYING and x.get(k) != y.get(k))
        assert differ == [], f"{x['strategy']}: {[(k, x.get(k), y.get(k)) for k in differ]}"
    assert all(r["launcher"] == "local" and r["job_id"] and r["job_nodes"] for r in b)
    assert all(r["launcher"] is None for r in a)


def _wait_for_job(jobs: Path, timeout: float = 120) -> int:
    """The pid of the first job (LocalExecutor's job id is its controller's process id) once the run's worker
    has started (controller -> task process -> worker)."""
    end = time.time() + timeout
    while time.time() < end:
        logs = sorted(jobs.glob("*/*_0_log.out")) if jobs.exists() else []  # a folder per command
        if logs:
            pid = int(logs[0].name.split("_")[0])
            if len(_tree(pid)) >= 3:
                return pid
        time.sleep(0.2)
    pytest.fail("no job started")


def _tree(pid: int) -> list[int]:
    """``pid`` and every process below it (LocalExecutor: its controller, the task process, the worker)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += _children(p)
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_killed_job_is_a_failed_row_and_resume_completes_it(tmp_path):
    out = tmp_path / "r"
    slow = ["--steps", "60", "--slow-input", "50"]  # >= 3 s of steps: the job is still running when it is killed
    proc = subprocess.Popen([*TB, "compare", *TINY, *slow, "--strategies", "torch:eager", "--out", str(out),
                             "--launcher", "local"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    job = _wait_for_job(out / "jobs")
    for pid in _tree(job):  # the node died under the job: every process of it at once
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.communicate(timeout=120)
    rows = read_jsonl(out / "results.jsonl")
    assert len(rows) == 1 and rows[0]["status"] == "failed" and rows[0]["launcher_state"], rows
    assert f"job {rows[0]['job_id']}" in rows[0]["error"]
    again = subprocess.run([*TB, "compare", *TINY, *slow, "--strategies", "torch:eager", "--resume", str(out),
                            "--launcher", "local"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    rows = read_jsonl(out / "results.jsonl")
    assert [r["status"] for r in rows] == ["failed", "ok"] and rows[0]["run_id"] == rows[1]["run_id"]


@pytest.mark.slow
def test_ctrl_c_cancels_the_job_and_leaves_no_process(tmp_path):
    out = tmp_path / "c"
    proc = subprocess.Popen([*TB, "compare", *TINY, "--steps", "400", "--strategies", "torch:eager,jax:jit",
                             "--out", str(out), "--launcher", "local"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    job = _wait_for_job(out / "jobs")
    tree = _tree(job)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err, err[-2000:]  # one line, not submitit's traceback
    time.sleep(0.5)
    assert [pid for pid in tree if _alive(pid)] == []
    assert not (out / "results.jsonl").exists() or all(r["status"] == "ok" for r in read_jsonl(out / "results.jsonl"))


def test_dry_run_of_a_two_node_job(tmp_path):
    res = subprocess.run([*TB, "compare", "--preset", "tiny", "--strategies", "torch:ddp,jax:mesh-fsdp", "--devices",
                          "16", "--batch", "16", "--launcher", "slurm", "--gpus-per-node", "8", "--partition", "gpu",
                          "--time", "30", "--slurm-option", "constraint=h100", "--dry-run", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    lines = [x for x in res.stdout.splitlines() if x.strip()]
    assert len(lines) == 2 and not (tmp_path / "results.jsonl").exists()
    for line in lines:
        assert "2 node(s), 1 task(s) per node, 8 GPU(s) per node, time 30 min" in line
        assert "devices 16, 2 process(es)" in line
        assert "--nodes=2 --ntasks-per-node=1 --time=30" in line and "--partition=gpu" in line
        assert "--constraint=h100" in line and "--exclusive" in line


def test_job_shape():
    spec = run_spec("tiny", "jax", "mesh-fsdp", {"devices": 16, "batch": 16})
    assert shape(spec, JobOptions(launcher="slurm", gpus_per_node=8)).nodes == 2
    assert shape(spec, JobOptions(launcher="slurm", gpus_per_node=16)).nodes == 1
    assert "1 node(s), 1 task(s) per node, 0 GPU(s)" in describe(spec, JobOptions(launcher="local"), 60)


@pytest.mark.parametrize(("args", "message"), [
    (["--launcher", "slurm", "--slurm-option", "Bad Key=1", "--dry-run"], "--slurm-option 'Bad Key=1'"),
    (["--launcher", "slurm"], "submitit finds no `sbatch`"),
    (["--launcher", "moon"], "--launcher moon: allowed: process, local, slurm"),
    (["--partition", "gpu"], "need --launcher slurm"),
])
def test_bad_launcher_options_are_one_line_and_exit_2(args, message, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no sbatch here, whatever the machine has
    res = subprocess.run([*TB, "compare", "--preset", "tiny", *args], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and message in res.stderr and "Traceback" not in res.stderr
