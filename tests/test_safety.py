"""Nothing lost, nothing run that the user did not ask for, one line and never a traceback on bad input.

Almost everything here is file and command-line handling: records are written by hand (tests/fixtures/
bad_results holds the bad files: binary garbage, JSON lists, wrong types, NaN, torn lines, non-positive step
times, minimal records, hostile text) and the commands run in this process with ``runner.run_one`` replaced
by a fake, so no training run is started. Two tests start real processes: a cheap child that stands for a
worker (kill -9 of its parent) and a script that forks and daemonizes (the doctor's process tree).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.explain.typed import plain
from twinbench import record as rec_mod
from twinbench import runner
from twinbench.cli import app
from twinbench.record import append_jsonl, as_record, for_spec, read_records, typed
from twinbench.spec import from_preset, validate

sys.path.insert(0, str(Path(__file__).parent / "report"))
import synthetic

BAD = Path(__file__).parent / "fixtures" / "bad_results"
ALL_BAD = ("garbage", "list_lines", "wrong_types", "nan", "zero_step")  # no usable record at all
CLI = CliRunner()


def results_dir(tmp_path: Path, name: str) -> Path:
    d = tmp_path / name
    d.mkdir()
    shutil.copy(BAD / f"{name}.jsonl", d / "results.jsonl")
    return d


def fake_record(spec, status="ok"):
    step = 10.0 if spec.framework == "torch" else 8.0
    if status != "ok":
        return for_spec(spec, status, error="boom")
    return for_spec(spec, "ok", n_params=1000, device="cpu", platform="cpu", compile_s=0.5,
                           first_step_s=0.6, step_ms=step, step_ms_p10=step, step_ms_p90=step, tokens_per_s=1e4,
                           peak_mem_bytes=2**20, compiles_during_steps=0, loss_first=5.0, loss_last=4.0,
                           losses=[5.0, 4.0], step_times_ms=[step, step])


@pytest.fixture
def fake_runs(monkeypatch):
    """runner.run_one replaced: each call is recorded and returns an ok record at once."""
    calls = []

    def run_one(spec, timeout, env=None):
        calls.append(spec)
        return fake_record(spec)

    monkeypatch.setattr(runner, "run_one", run_one)
    return calls


def one_line_error(result, code=2) -> str:
    text = result.output
    assert result.exit_code == code, text
    assert ("Traceback" not in text and result.exception is None) or isinstance(result.exception, SystemExit), text
    errors = [ln for ln in text.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, text
    return errors[0]


# ------------------------------------------------------------------------------------------- the one reader

@pytest.mark.parametrize("name", ALL_BAD)
def test_reader_skips_every_bad_line_and_says_why(name):
    problems: list[str] = []
    records, bad = read_records(BAD / f"{name}.jsonl", problems)
    assert records == [] and bad >= 1
    # the first few lines by name, then (past them) one line counting the rest by reason: bounded, whatever the file
    from twinbench.record import MAX_EXAMPLES

    assert len(problems) == min(bad, MAX_EXAMPLES) + (bad > MAX_EXAMPLES)
    assert all(p.startswith("line ") for p in problems[:MAX_EXAMPLES])


def test_reader_keeps_minimal_and_torn_files_usable():
    assert len(read_records(BAD / "minimal.jsonl")[0]) == 2
    records, bad = read_records(BAD / "torn.jsonl")
    assert len(records) == 1 and bad == 1


# ------------------------------------------------------------------- one line, never a traceback (commands)

@pytest.mark.parametrize("name", ALL_BAD)
def test_report_diff_explain_export_on_bad_files_end_in_one_line(tmp_path, name, fake_runs):
    d = results_dir(tmp_path, name)
    assert "no valid record" in one_line_error(CLI.invoke(app, ["report", str(d)]))
    assert "no twinbench records" in one_line_error(CLI.invoke(app, ["diff", str(d), str(d)]))
    assert "has no run" in one_line_error(CLI.invoke(app, ["explain", f"{d}:torch/eager", f"{d}:jax/jit",
                                                           "--out", str(tmp_path / "x")]))
    assert "saved its weights" in one_line_error(CLI.invoke(app, ["export", "--from", str(d), "--out",
                                                                  str(tmp_path / "hf")]))
    assert not fake_runs


@pytest.mark.parametrize("name", [*ALL_BAD, "torn"])
def test_resume_and_advise_onto_bad_files_skip_the_bad_lines(tmp_path, name, fake_runs):
    d = results_dir(tmp_path, name)
    r = CLI.invoke(app, ["compare", "--preset", "tiny", "--framework", "torch", "--strategies", "eager",
                         "--resume", str(d)])
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    assert "skipped" in r.output  # says it skipped lines that are not records
    lines = (d / "results.jsonl").read_bytes().split(b"\n")
    assert json.loads(lines[-2])["run"]["strategy"] == "eager"  # the new record on a line of its own
    a = CLI.invoke(app, ["advise", "--preset", "tiny", "--framework", "torch", "--strategies", "eager",
                         "--out", str(d)])
    assert "Traceback" not in a.output and a.exit_code in (0, 1), a.output


@pytest.mark.parametrize("name", ["minimal", "no_first_step", "torn"])
def test_report_on_minimal_records_and_missing_first_step(tmp_path, name):
    d = results_dir(tmp_path, name)
    r = CLI.invoke(app, ["report", str(d)])
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    assert (d / "report.html").exists() and (d / "report.md").exists()


def test_diff_nan_or_non_positive_times_fail_the_gate(tmp_path):
    good = tmp_path / "good"
    synthetic.write(good, [synthetic.record("torch", "eager"), synthetic.record("jax", "jit")])
    mixed = tmp_path / "mixed"
    shutil.copytree(good, mixed)
    with open(mixed / "results.jsonl", "a") as f:
        f.write((BAD / "nan.jsonl").read_text())
    r = CLI.invoke(app, ["diff", str(good), str(mixed), "--fail-above", "5"])
    assert "skipped 3 line(s)" in r.output and "nan" in r.output
    assert "cannot pass a gate" in one_line_error(r)
    zero = results_dir(tmp_path, "zero_step")
    assert "no twinbench records" in one_line_error(CLI.invoke(app, ["diff", str(good), str(zero)]))


def test_json_into_a_missing_folder_and_timeout_zero_fail_before_running(tmp_path, fake_runs):
    base = ["compare", "--preset", "tiny", "--framework", "torch", "--strategies", "eager", "--out",
            str(tmp_path / "o")]
    assert "no folder" in one_line_error(CLI.invoke(app, [*base, "--json", str(tmp_path / "nope" / "r.json")]))
    assert "--timeout" in one_line_error(CLI.invoke(app, [*base, "--timeout", "0"]))
    assert "--timeout" in one_line_error(CLI.invoke(app, ["sweep", "--over", "batch=1,2", "--timeout", "-1"]))
    good = tmp_path / "good"
    synthetic.write(good, [synthetic.record("torch", "eager")])
    assert "no folder" in one_line_error(CLI.invoke(app, ["diff", str(good), str(good), "--json",
                                                          str(tmp_path / "nope" / "d.json")]))
    assert not fake_runs


# ------------------------------------------------------------------------------------------------ safety

PAYLOAD = """
from pathlib import Path
Path(__file__).with_name("PWNED").write_text("ran")
def build(cfg):
    raise SystemExit("payload")
"""


def payload_dir(tmp_path: Path) -> tuple[Path, Path]:
    """A results folder sent by someone else: its records name their own model, a payload."""
    code = tmp_path / "payload.py"
    code.write_text(PAYLOAD)
    d = tmp_path / "sent"
    recs = []
    for fw, st in (("torch", "eager"), ("jax", "jit")):
        r = synthetic.record(fw, st)
        r["spec"]["user_model"] = f"{code}:build"
        r["spec"]["model"]["family"] = "user"
        r["weights_path"] = str(tmp_path / "w.safetensors")
        recs.append(r)
    synthetic.write(d, recs)
    (tmp_path / "w.safetensors").write_bytes(b"not safetensors")
    return d, code


def test_a_record_naming_user_code_never_runs_it(tmp_path, fake_runs):
    d, code = payload_dir(tmp_path)
    marker = code.with_name("PWNED")
    line = one_line_error(CLI.invoke(app, ["explain", f"{d}:torch/eager", f"{d}:jax/jit", "--out",
                                           str(tmp_path / "x")]))
    assert "code named by the record" in line and "--model" in line
    other = tmp_path / "mine.py"
    other.write_text("def build(cfg): ...\n")
    line = one_line_error(CLI.invoke(app, ["explain", f"{d}:torch/eager", f"{d}:jax/jit", "--model", str(other),
                                           "--out", str(tmp_path / "x")]))
    assert "you gave --model" in line  # another file than the record's is no permission either
    assert CLI.invoke(app, ["report", str(d)]).exit_code == 0
    assert CLI.invoke(app, ["diff", str(d), str(d)]).exit_code == 0
    assert "your own model" in one_line_error(CLI.invoke(app, ["export", "--from", str(d), "--out",
                                                               str(tmp_path / "hf")]))
    a = CLI.invoke(app, ["advise", "--preset", "tiny", "--framework", "torch", "--strategies", "eager", "--out",
                         str(d)])
    assert "Traceback" not in a.output, a.output
    assert all(not s.user.user_model for s in fake_runs)
    assert not marker.exists(), "a record's user_model was executed"


def test_explain_runs_a_records_model_only_when_the_user_names_the_same_file(tmp_path):
    from twinbench.explain import runs

    code = tmp_path / "m.py"
    code.write_text("def build(cfg): ...\n")
    spec = from_preset("tiny", {}, framework="torch", strategy="eager")

    spec = spec.evolve(user_model=f"{code}:build")
    said = runs.check_code("D:torch/eager", spec, str(code), None)
    assert said and "named on the command line" in said[0]


def test_a_re_run_never_takes_the_records_user_dir():
    """A record's user_dir (where its initial weights lie) is a path: a re-run writes its own from the model the
    user names, and never reads where the record points."""
    from twinbench.explain import runs

    spec = from_preset("tiny", {}, framework="torch", strategy="eager").evolve(user_model="/m.py:build",
                                                                                user_dir="/elsewhere/byo")
    taken, left = runs.spec_from_record("D:torch/eager", spec.to_dict())
    assert taken.user.user_model == "/m.py:build" and taken.user.user_dir == ""
    assert any("user_dir" in line for line in left), left


def test_report_links_only_files_and_escapes_markdown(tmp_path):
    d = results_dir(tmp_path, "hostile")
    assert CLI.invoke(app, ["report", str(d)]).exit_code == 0
    html = (d / "report.html").read_text()
    md = (d / "report.md").read_text()
    assert "href='javascript" not in html and 'href="javascript' not in html
    assert "<script>" not in html and "<script>" not in md
    import re

    assert not re.search(r"(?<!\\)\]\(javascript", md) and "![x](" not in md
    assert "&lt;script&gt;" in md and "not linked" in md
    summary = rec_mod.read_records(d / "results.jsonl")[0]
    from twinbench.report.table import markdown

    assert "<script>" not in markdown(summary, 100)


def test_jobs_folder_is_private_and_fresh_per_command(tmp_path):
    from twinbench.launch.jobs import private_folder

    a, b = private_folder(tmp_path / "jobs"), private_folder(tmp_path / "jobs")
    assert a != b and a.parent == b.parent == tmp_path / "jobs"
    for p in (a, tmp_path / "jobs"):
        assert (p.stat().st_mode & 0o777) == 0o700


# ------------------------------------------------------------------------------------------- nothing lost

def test_out_that_is_a_file_or_holds_a_results_directory_fails_before_any_run(tmp_path, fake_runs):
    f = tmp_path / "file"
    f.write_text("x")
    base = ["compare", "--preset", "tiny", "--framework", "torch", "--strategies", "eager"]
    assert "not a directory" in one_line_error(CLI.invoke(app, [*base, "--out", str(f)]))
    d = tmp_path / "d"
    (d / "results.jsonl").mkdir(parents=True)
    assert "not a file" in one_line_error(CLI.invoke(app, [*base, "--out", str(d)]))
    assert not fake_runs


def failing_writes(monkeypatch, fail_on: set[int], ending: str = "results.jsonl"):
    """Appends to results.jsonl (to any file whose name ends with ``ending``) fail (half the line written, then
    ENOSPC) on the given calls (1-based)."""
    real = rec_mod._write_all
    n = [0]

    def write_all(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").endswith(ending):
            n[0] += 1
            if n[0] in fail_on:
                real(fd, data[: len(data) // 2])
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd, data)

    monkeypatch.setattr(rec_mod, "_write_all", write_all)


def test_disk_full_keeps_every_record_and_the_next_runs_go_on(tmp_path, monkeypatch, fake_runs):
    monkeypatch.setenv("TWINBENCH_UNSAVED_DIR", str(tmp_path / "unsaved"))
    failing_writes(monkeypatch, {2})
    out = tmp_path / "o"
    r = CLI.invoke(app, ["compare", "--preset", "tiny", "--framework", "torch,jax", "--strategies",
                         "eager,compile,jit", "--out", str(out)])
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    assert len(fake_runs) == 3  # the run after the failed write still ran
    text = (out / "results.jsonl").read_text()
    assert text.endswith("\n") and all(json.loads(x) for x in text.splitlines())  # no torn line left
    kept = out / "results.jsonl.unsaved.jsonl"
    assert "kept in" in r.output and str(kept) in r.output.replace("\n", "")
    saved = read_records(out / "results.jsonl")[0] + read_records(kept)[0]
    assert sorted(x.run.strategy for x in saved) == ["compile", "eager", "jit"]


def test_a_resume_appends_back_what_a_full_disk_kept_beside_and_runs_only_the_rest(tmp_path, monkeypatch,
                                                                                  fake_runs):
    """The second record's append fails and is kept beside results.jsonl; the third's append and its write beside
    fail too (a torn line there; it is kept in the unsaved folder). --resume appends the kept record back and runs
    only the third again (it ran the two kept ones again before), leaving no torn line and no side file."""
    monkeypatch.setenv("TWINBENCH_UNSAVED_DIR", str(tmp_path / "unsaved"))
    failing_writes(monkeypatch, {2, 4, 5}, ending=".jsonl")  # results.jsonl, beside it, the unsaved folder
    out = tmp_path / "o"
    args = ["compare", "--preset", "tiny", "--framework", "torch,jax", "--strategies", "eager,compile,jit"]
    r = CLI.invoke(app, [*args, "--out", str(out)])
    assert r.exit_code == 1 and len(fake_runs) == 3, r.output
    kept = out / "results.jsonl.unsaved.jsonl"
    assert not kept.read_bytes().endswith(b"\n")  # torn
    assert [x.run.strategy for x in read_records(kept)[0]] == ["compile"]
    r = CLI.invoke(app, [*args, "--resume", str(out)])
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    assert [s.strategy.name for s in fake_runs[3:]] == ["jit"], r.output  # the one kept nowhere in the folder
    records, bad = read_records(out / "results.jsonl")
    assert sorted(x.run.strategy for x in records) == ["compile", "eager", "jit"] and bad == 0
    assert not kept.exists() and "1 torn line(s) left out" in r.output.replace("\n", " ")


def test_records_kept_beside_are_appended_once_and_stay_kept_when_the_disk_is_still_full(tmp_path, monkeypatch):
    from twinbench import results_dir

    out = tmp_path / "o"
    out.mkdir()
    one, two = (json.dumps(fake_record(from_preset("tiny", {}, framework="torch", strategy=s)).to_dict()) + "\n"
                for s in ("eager", "compile"))
    (out / "results.jsonl").write_text(one)
    kept = out / "results.jsonl.unsaved.jsonl"
    kept.write_text(two)

    def full(fd, data):
        os.write(fd, data[:10])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as m:
        m.setattr(results_dir, "write_all", full)
        assert "they stay there" in results_dir.recover_unsaved(out)
    assert (out / "results.jsonl").read_text() == one and kept.read_text() == two  # nothing torn, nothing lost
    (out / "results.jsonl").write_text(one + two)  # an earlier recovery appended them, then stopped
    assert "1 record(s)" in results_dir.recover_unsaved(out)
    assert (out / "results.jsonl").read_text() == one + two and not kept.exists()  # not appended twice
    assert results_dir.recover_unsaved(out) == ""


def test_unwritable_results_file_keeps_the_record_elsewhere(tmp_path, monkeypatch):
    monkeypatch.setenv("TWINBENCH_UNSAVED_DIR", str(tmp_path / "unsaved"))
    failing_writes(monkeypatch, {1})
    notes: list[str] = []
    runner.save_record(tmp_path / "results.jsonl", as_record({"framework": "torch", "strategy": "eager",
                                                              "status": "ok", "run_id": "r1"}), notes)
    assert len(notes) == 1 and "kept in" in notes[0]
    assert (tmp_path / "results.jsonl").read_text() == ""


def test_a_record_always_starts_on_a_new_line(tmp_path):
    path = tmp_path / "results.jsonl"
    shutil.copy(BAD / "torn.jsonl", path)
    append_jsonl(path, {"framework": "jax", "strategy": "jit", "status": "ok", "run_id": "new"})
    records, bad = read_records(path)
    assert [r.run.strategy for r in records] == ["eager", "jit"] and bad == 1


def test_killed_parent_takes_its_worker_with_it(tmp_path):
    """kill -9 of twinbench: the child (its own session, as a worker is started) ends too."""
    parent = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\n"
        "from twinbench import runner\n"
        "p = runner._start([sys.executable, '-c', 'from twinbench.lifeline import watch_parent; watch_parent(); "
        "import time; time.sleep(120)'], env=runner.child_env(runner.LOAD.reading()))\n"
        f"open({str(tmp_path / 'pid')!r}, 'w').write(str(p.pid))\n"
        "time.sleep(120)\n")])
    pid_file = tmp_path / "pid"
    deadline = time.monotonic() + 60
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    child = int(pid_file.read_text())
    assert runner_alive(child)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while runner_alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    alive = runner_alive(child)
    if alive:
        os.kill(child, signal.SIGKILL)
    assert not alive, "the child outlived its killed parent"


def runner_alive(pid: int) -> bool:
    from twinbench.lifeline import alive

    return alive(pid)


DAEMONS = """
import os, sys, time
if os.fork() == 0:
    time.sleep(60); os._exit(0)
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.write(w, f"{os.getpid()}\\n".encode()); time.sleep(60); os._exit(0)
    os._exit(0)
time.sleep(0.2)
open(sys.argv[1], "w").write(os.read(r, 100).decode())
"""


def test_script_run_leaves_no_forked_child_or_daemon(tmp_path):
    script = tmp_path / "daemons.py"
    script.write_text(DAEMONS)
    before = runner.descendants(os.getpid())
    run = runner.run_script([sys.executable, str(script), str(tmp_path / "pid")], tmp_path, 60)
    assert run.returncode == 0, run.output_tail
    daemon = int((tmp_path / "pid").read_text())
    assert not runner_alive(daemon), "the setsid daemon was left running"
    assert runner.descendants(os.getpid()) - before == set()


def test_a_terminated_script_runner_takes_the_script_with_it(tmp_path):
    """`twinbench doctor` sent SIGTERM (a job scheduler's stop) ends the user's script too: it used to leave it
    running, its process group orphaned."""
    import signal
    import subprocess
    import time

    pid_file = tmp_path / "pid"
    script = tmp_path / "hang.py"
    script.write_text("import os, sys, time\nopen(sys.argv[1], 'w').write(str(os.getpid()))\ntime.sleep(60)\n")
    code = ("import sys; from pathlib import Path; from twinbench import runner; "
            f"runner.run_script([sys.executable, {str(script)!r}, {str(pid_file)!r}], Path({str(tmp_path)!r}), 120)")
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 60
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        child = int(pid_file.read_text())
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(timeout=30) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 10
        while runner_alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not runner_alive(child), "the script outlived its runner"
    finally:
        parent.kill()


def test_a_second_command_into_a_busy_out_fails_and_the_summary_shows_every_run(tmp_path, fake_runs):
    import fcntl

    out = tmp_path / "o"
    base = ["compare", "--preset", "tiny", "--framework", "torch", "--out", str(out)]
    assert CLI.invoke(app, [*base, "--strategies", "eager"]).exit_code == 0
    assert CLI.invoke(app, [*base, "--strategies", "compile"]).exit_code == 0
    summary = (out / "summary.md").read_text()
    assert "torch/eager" in summary and "torch/compile" in summary
    fd = os.open(out / runner.LOCK, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        assert "another twinbench" in one_line_error(CLI.invoke(app, [*base, "--strategies", "eager"]))
    finally:
        os.close(fd)
    with open(out / "results.jsonl", "a") as f:  # the same configuration recorded twice (an older twinbench)
        f.write((out / "results.jsonl").read_text().splitlines()[0] + "\n")
    r = CLI.invoke(app, [*base, "--strategies", "eager"])
    assert "measured more than once" in r.output


def test_retry_failed_runs_the_failed_ones_again(tmp_path, fake_runs):
    spec = validate(from_preset("tiny", {}, framework="torch", strategy="eager"))
    out = tmp_path / "o"
    out.mkdir()
    append_jsonl(out / "results.jsonl", fake_record(spec, "failed").to_dict())
    base = ["compare", "--preset", "tiny", "--framework", "torch", "--strategies", "eager",
            "--resume", str(out)]
    assert CLI.invoke(app, base).exit_code == 1 and not fake_runs  # a plain resume keeps the failed row
    r = CLI.invoke(app, [*base, "--retry-failed"])
    assert r.exit_code == 0, r.output
    assert len(fake_runs) == 1
    assert "FAILED" not in (out / "summary.md").read_text()


# ----------------------------------------------------------------------------- every output says what it is

def test_parity_mismatch_names_the_parameters_exits_1_and_is_in_every_report(tmp_path, monkeypatch, fake_runs):
    import msgspec

    from twinbench.byo import plan
    from twinbench.record_sections import Parity

    parity = {"ok": False, "loss_torch": 1.0, "loss_jax": 1.2, "loss_rel": 0.2, "grad_rel": 0.38,
              "grad_worst": [["h.0.attn.c_attn.weight", 0.38], ["wte", 0.1]], "losses_torch": [1.0],
              "losses_jax": [1.2], "steps_abs": 0.2, "steps": 10,
              "tolerances": {"loss_rel": 1e-4, "grad_rel": 1e-3, "steps_abs": 1e-3}}

    def prepare(specs, out_dir, timeout):
        (out_dir / "byo").mkdir(parents=True, exist_ok=True)
        (out_dir / "byo" / "parity.json").write_text(json.dumps(parity))
        return specs, msgspec.convert(parity, Parity)

    monkeypatch.setattr(plan, "prepare", prepare)
    real = runner.run_one

    def run_one(spec, timeout, env=None):
        r = real(spec, timeout) if False else fake_record(spec)
        if spec.strategy.name == "port":
            r.parity = msgspec.convert(parity, Parity)
        return r

    monkeypatch.setattr(runner, "run_one", run_one)
    model, port = tmp_path / "m.py", tmp_path / "p.py"
    model.write_text("def build(cfg): ...\n")
    port.write_text("def build_jax(cfg): ...\n")
    out = tmp_path / "o"
    args = ["compare", "--preset", "tiny", "--model", str(model), "--jax-model", str(port), "--strategies",
            "torch:eager,jax:port", "--out", str(out)]
    r = CLI.invoke(app, args)
    assert "h.0.attn.c_attn.weight" in r.output
    assert "MISMATCH" in one_line_error(r, code=1)
    for name in ("summary.md", "report.md", "report.html"):
        assert "MISMATCH" in (out / name).read_text(), name
    assert "learn the same thing" not in (out / "report.md").read_text()
    assert CLI.invoke(app, [*args, "--allow-mismatch"]).exit_code == 0


def test_errors_are_whole_with_their_frame_and_cause():
    from twinbench.errors import error_line

    url = "https://example.org/" + "a" * 400
    try:
        try:
            raise KeyError("inner")
        except KeyError as e:
            raise ValueError(f"failed fetching {url}\nsecond line") from e
    except ValueError as e:
        line = error_line(e)
    assert url in line and "second line" not in line
    assert "test_safety.py" in line and "caused by KeyError" in line


def test_threads_are_stated_per_run_when_they_differ():
    from twinbench.report.table import conditions

    a, b = synthetic.record("torch", "eager", threads=1), synthetic.record("jax", "jit", threads=2)
    text = "\n".join(conditions(typed([a, b])))
    assert "torch/eager 1, jax/jit 2" in text and "for both frameworks" not in text


def test_explain_says_the_machine_was_busy_names_rows_and_never_prints_a_negative_phase(monkeypatch):
    from twinbench.explain import gap
    from twinbench.explain.breakdown import Breakdown

    def fake_trace(r):
        b = Breakdown(step_ms=10.0, steps_used=3, steps_traced=3, source="test")
        b.cells["forward"]["matmul"] = b.cells["backward"]["matmul"] = 5.0
        return b

    monkeypatch.setattr(gap, "read_trace", fake_trace)
    busy = synthetic.record("torch", "eager", warnings=["machine busy: 1.5 core(s) of 2 used by other processes"],
                            explain_timing={"forward": 6.0, "backward": 8.0, "optimizer": -184.9})
    quiet = synthetic.record("jax", "jit", explain_timing={"forward": 4.0, "backward": 4.0})
    e = plain(gap.explain_run(busy))
    assert "optimizer" not in e["timing"]
    assert any("machine busy" in n for n in e["notes"]) and any("optimizer not measured" in n for n in e["notes"])
    result = plain(gap.explain_pair(quiet, busy))
    # a busy machine is said, and refuses no row: its noise is measured (here it cannot be, and that is said)
    assert "measured on a busy machine: torch/eager" in result["summary"]
    assert "forward / matmul (+2.5 ms)" in result["summary"] and "noise is not measured" in result["summary"]


def test_compare_explain_section_is_in_report_md_too(tmp_path, monkeypatch):
    from twinbench.explain import command
    from twinbench.explain.side import Side
    from twinbench.report import explain as rexplain
    from twinbench.report import page

    trace = tmp_path / "t.json"
    trace.write_text("{}")
    recs = [synthetic.record("torch", "eager", explain_timing={"forward": 3.0, "optimizer": -1.0},
                             trace_path=str(trace))]
    monkeypatch.setattr(command, "explain_records", lambda rs: [Side(
        run="torch/eager", run_id=rs[0].run.run_id, step_ms=10.0, timing={"forward": 3.0, "optimizer": -1.0},
        trace={"forward": 4.0}, notes=["a note"], trace_path=str(trace))])
    assert rexplain.markdown_section(synthetic.typed(recs))
    synthetic.write(tmp_path / "r", recs)
    _, md_path, _ = page.write(tmp_path / "r")
    md = md_path.read_text()
    assert "Where the step time goes" in md and "not measured" in md and "-1.0" not in md


def test_doctor_lines_fit_the_run_and_say_each_finding_once():
    from twinbench.byo.plan import doctor_lines

    finding = {"severity": "info", "title": "compilation takes 60% of the run",
               "fix": "JAX: cache (nnx.scan / jax.lax.scan instead of a loop).\nPyTorch: compile each layer."}
    recs = [{"framework": "jax", "strategy": s, "spec": {}, "doctor": {"findings": [finding], "steps": 3}}
            for s in ("torchax", "torchax+remat")]
    lines = doctor_lines(recs)
    assert len(lines) == 1 and "jax/torchax, jax/torchax+remat" in lines[0]
    assert "PyTorch" not in lines[0] and "nnx" not in lines[0] and "jax.lax.scan" in lines[0]


def test_output_fits_100_columns_and_logs_one_line_per_run(tmp_path, monkeypatch, fake_runs):
    from rich.console import Console

    from twinbench import cli
    from twinbench.report.table import rich_table

    monkeypatch.delenv("COLUMNS")
    assert cli._width() == cli.NARROW == 100  # not a terminal: 100 columns unless COLUMNS says otherwise
    console = Console(width=100, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(rich_table(typed(synthetic.full_set()), 1000))
    assert max(len(x) for x in console.export_text().splitlines()) <= 100
    r = CLI.invoke(app, ["compare", "--preset", "tiny", "--framework", "torch,jax", "--strategies",
                         "eager,jit", "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    assert "run 1/2 torch/eager (tiny): ok" in r.output and "run 2/2 jax/jit (tiny): ok" in r.output
