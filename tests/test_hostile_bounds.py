"""Nothing a folder, a file or a number says makes twinbench read, write, wait or grow without bound.

One test per hole, each run in this process (runner.run_one faked where a command would run), each failing on
the code before the fix: counts bounded from the machine before anything is built, one opener (FIFOs and links),
bounded reasons for bad lines, a record that never picks a path, ``--try --out NEWDIR``.
"""

from __future__ import annotations

import ast
import json
import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from twinbench import runner
from twinbench.cli import app
from twinbench.record import for_spec, read_records

sys.path.insert(0, str(Path(__file__).parent / "report"))
import synthetic
from test_hostile import one_line_error

CLI = CliRunner()
SRC = Path(__file__).resolve().parents[1] / "src" / "twinbench"


# ----------------------------------------------------------------------------------- 1. counts, from the machine
@pytest.mark.parametrize("args, flag", [
    (["--steps", str(10**30)], "--steps"),
    (["--repeats", str(10**9), "--dry-run"], "--repeats"),
    (["--repeats", str(10**9)], "--repeats"),
])
def test_a_count_no_host_can_keep_is_one_line_before_anything_is_built(args, flag, fake_runs):
    line = one_line_error(CLI.invoke(app, ["compare", "--framework", "torch", "--strategies", "eager", *args]))
    assert line.startswith(f"error: {flag} ") and "at most" in line and "available" in line, line
    assert not fake_runs


def test_a_sweep_grid_no_host_can_keep_is_one_line(fake_runs):
    many = ",".join(str(v) for v in range(1, 2001))
    line = one_line_error(CLI.invoke(app, ["sweep", "--framework", "torch", "--strategies", "eager", "--over",
                                           f"steps={many}", "--over", f"seed={many}"]))
    assert line.startswith("error: --over ") and "at most" in line, line
    # steps no host can keep, from --over, name --over (the refusal named a --steps never given)
    line = one_line_error(CLI.invoke(app, ["sweep", "--framework", "torch", "--strategies", "eager", "--over",
                                           f"steps=10,{10**30}"]))
    assert line.startswith("error: --over steps=1e+30: ") and "at most" in line, line
    line = one_line_error(CLI.invoke(app, ["sweep", "--framework", "torch", "--strategies", "eager", "--over",
                                           "batch=1,2", "--steps", str(10**30)]))
    assert line.startswith("error: --steps 1e+30: "), line
    assert not fake_runs


def test_the_lm_batches_are_made_as_the_steps_ask_for_them():
    """A run of 700,000 steps holds one batch, not 700,000 (the windows were built up front): the batches'
    memory does not grow with --steps, and step i's batch is the same whenever it is asked for."""
    import tracemalloc

    import numpy as np

    from twinbench.data import tasks
    from twinbench.spec import from_preset

    spec = from_preset("tiny", {"steps": 700_000, "batch": 8, "seq": 64}, framework="torch", strategy="eager")
    from twinbench.data.text import synthetic_corpus

    synthetic_corpus(seed=1234 + spec.train.seed)  # the corpus's bytes made once (cached), outside the count
    tracemalloc.start()
    data = tasks.run_data(spec)
    x, y = data.batches[123_456]
    held = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert held < 64 << 20, held  # the corpus and one batch; 700,000 windows of 8x65 int32 are 2.9 GB
    assert len(data.batches) == 700_000 and x.shape == (8, 64) and np.array_equal(x[:, 1:], y[:, :-1])
    assert np.array_equal(data.batches[123_456][0], x) and not np.array_equal(data.batches[0][0], x)
    assert sum(data.real_tokens[5:]) == (700_000 - 5) * 8 * 64


# -------------------------------------------------------------------------------------------- 2. one opener
def test_a_fifo_lock_or_json_never_hangs(tmp_path, fake_runs):
    out = tmp_path / "o"
    out.mkdir()
    os.mkfifo(out / ".twinbench.lock")
    line = one_line_error(CLI.invoke(app, ["compare", "--framework", "torch", "--strategies", "eager",
                                           "--out", str(out)]))
    assert ".twinbench.lock" in line and "FIFO" in line, line
    (out / "results.jsonl").write_text("")
    line = one_line_error(CLI.invoke(app, ["compare", "--framework", "torch", "--strategies", "eager",
                                           "--resume", str(out)]))
    assert "FIFO" in line, line
    fifo = tmp_path / "j.json"
    os.mkfifo(fifo)
    d = tmp_path / "r"
    synthetic.write(d, [synthetic.record("torch", "eager")])
    line = one_line_error(CLI.invoke(app, ["diff", str(d), str(d), "--json", str(fifo)]))
    assert "--json" in line and "FIFO" in line, line
    assert not fake_runs


def test_the_opener_refuses_links_at_every_component_and_what_is_not_a_file(tmp_path):
    from twinbench.folder_io import LinkRefused, NotRegular, open_file

    root, away = tmp_path / "root", tmp_path / "away"
    (root / "a" / "b").mkdir(parents=True)
    away.mkdir()
    (away / "f").write_text("secret")
    (root / "a" / "link").symlink_to(away)
    (root / "a" / "b" / "f").symlink_to(away / "f")
    for rel in ("a/link/f", "a/b/f"):
        with pytest.raises(LinkRefused):
            open_file(root / rel, "rb", root=root)
        with pytest.raises(LinkRefused):
            open_file(root / rel, "wb", root=root)
    assert (away / "f").read_text() == "secret"
    os.mkfifo(root / "fifo")
    for mode in ("rb", "wb", "ab", "r+b"):
        with pytest.raises(NotRegular, match="FIFO"):
            open_file(root / "fifo", mode)
    with pytest.raises(NotRegular):
        open_file(root / "a", "rb")
    with open_file(root / "a" / "b" / "g", "wb", root=root) as f:
        f.write(b"ok")
    assert (root / "a" / "b" / "g").read_bytes() == b"ok"


def test_a_trace_is_written_into_a_fresh_folder_reached_through_no_link(tmp_path):
    """The profiler writes by name; its folder is made new under components opened without following a
    link, so a link planted anywhere (past any number of entries) is refused or never reached."""
    from twinbench.folder_io import LinkRefused, fresh_dir

    traces, away = tmp_path / "traces", tmp_path / "away"
    traces.mkdir()
    away.mkdir()
    (traces / "run").mkdir()
    (traces / "run" / "trace.json").symlink_to(away / "stolen")
    got = fresh_dir(traces / "run")
    assert got == traces / "run.1" and not any(got.iterdir())
    (traces / "sub").symlink_to(away)
    with pytest.raises(LinkRefused):
        fresh_dir(traces / "sub" / "run")
    assert not any(away.iterdir())


#: the files allowed to open a file other than through folder_io's opener, each with why (every other module
#: routes its opens through folder_io.open_file / open_fd / read_file / write_text / write_file)
BARE_OPENS_ALLOWED = {
    "folder_io.py": "the opener itself",
    "load_meter.py": "twinbench's own history under its cache root, and /proc",
    "lifeline.py": "/proc",
    "measure/interference.py": "/proc",
    "measure/host.py": "/proc/cpuinfo",
    "measure/memory_readings.py": "/proc, and the worker's own sizes file",
    "measure/peak_cache.py": "twinbench's own peaks cache and its lock",
    "measure/peak.py": "the measuring child's own output file",
    "runner.py": "the spec and record files of a worker, in the runner's private temporary folder, and /proc",
    "worker.py": "the spec and record files its runner made for it",
    "launch/jobs.py": "submitit's job folder",
    "host_malloc.py": "twinbench's measured tunables file",
    "record_schema.py": "the schema written by the build (make)",
    "predict/calibration.py": "the package's own calibration data",
    "predict/command.py": "the measuring child's own output file",
    "explain/depth.py": "the child's own HLO files in explain's private folder",
    "explain/timing.py": "the worker's own HLO file",
    "explain/spill.py": "explain's own spill file in a private temporary folder",
    "explain/doctor_timing.py": "the doctor's own timing file beside its trace",
    "doctor/__init__.py": "the doctor's own files in its private folder",
    "doctor/bootstrap.py": "the doctor's own files in its private folder",
    "doctor/trace.py": "the doctor's own trace.json",
    "byo/family.py": "the prepared folder's files (written by twinbench's preparation)",
    "byo/parity.py": "the prepared folder's files",
    "byo/plan.py": "the prepared folder's files",
    "byo/prepare.py": "the prepared folder's files",
    "byo/run.py": "the prepared folder's files",
    "score.py": "the scoring children's own files in a private temporary folder",
    "cli/models.py": "the peaks cache files",
    "cli/doctor.py": "the doctor's probe file",
    "cli/common.py": "/dev/null, and check_dir's probe",
    "models/hf.py": "export's own output folder",
    "doctor/instruments_jax/facts.py": "/proc/meminfo",
    "doctor/instruments_jax/transfers.py": "a pipe the doctor made",
    "predict/user.py": "the prepared folder's files",
}
_OPENERS = {"open", "read_text", "read_bytes", "write_text", "write_bytes", "load", "fdopen"}


def _bare_opens(path: Path) -> list[int]:
    tree = ast.parse(path.read_text())
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else ""
        method = isinstance(f, ast.Attribute) and owner not in ("files", "folder_io", "common")
        if name == "open" or (method and name in ("read_text", "read_bytes", "write_text", "write_bytes",
                                                  "fdopen")) or (name == "load" and owner in ("np", "json")):
            lines.append(node.lineno)
    return lines


def test_every_file_twinbench_opens_goes_through_the_one_opener():
    """An AST scan: no module outside the allow-list calls open(), os.open, Path.open/read_text/read_bytes/
    write_text/write_bytes, gzip.open, np.load or json.load; the data, checkpoints, traces, side files, --json,
    locks and results files all go through folder_io's opener (a FIFO refused unwaited, links refused)."""
    bare = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel in BARE_OPENS_ALLOWED:
            continue
        if found := _bare_opens(path):
            bare[rel] = found
    assert not bare, f"files opened outside folder_io's opener: {bare}"
    assert all((SRC / rel).exists() for rel in BARE_OPENS_ALLOWED), "an allowed module no longer exists"


# ------------------------------------------------------------------------------------ 3. bounded bad lines
def test_bad_lines_keep_a_few_examples_and_counts_not_a_string_each(tmp_path):
    from twinbench.record import MAX_BAD_LINES, NotResults

    path = tmp_path / "results.jsonl"
    good = json.dumps(synthetic.record("torch", "eager"))
    n = MAX_BAD_LINES - 2
    path.write_text(good + "\n" + "".join(f"garbage {i}\n" if i % 2 else '{"run": 1}\n' for i in range(n)))
    problems: list[str] = []
    records, bad = read_records(path, problems)
    assert len(records) == 1 and bad == n
    assert len(problems) <= 6 and problems[0].startswith("line 2: ")
    assert problems[-1].startswith(f"{n:,} lines in all: {n // 2:,} ") and f"{n // 2:,} not JSON" in problems[-1]
    # 31 million bad lines (60 MB, under the size cap) are refused after the first 10,000, not read to the end
    path.write_text(good + "\n" + "x\n" * (3 * MAX_BAD_LINES))
    with pytest.raises(NotResults, match="not a results file twinbench wrote"):
        read_records(path, problems)
    line = one_line_error(CLI.invoke(app, ["diff", str(tmp_path), str(tmp_path)]))
    assert "10,000 of its first" in line


# ---------------------------------------------------------------------------------- 5. a record picks no path
def test_a_re_run_takes_no_file_the_record_names(tmp_path, fake_runs):
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours " * 100)
    d = tmp_path / "sent"
    recs = []
    for fw, st in (("torch", "eager"), ("jax", "jit")):
        r = synthetic.record(fw, st)
        r["spec"]["train"]["data"] = str(secret)
        recs.append(r)
    synthetic.write(d, recs)
    line = one_line_error(CLI.invoke(app, ["explain", f"{d}:torch/eager", f"{d}:jax/jit", "--out",
                                           str(tmp_path / "o")]))
    assert "--data FILE" in line and "never picks" in line, line
    assert not fake_runs
    mine = tmp_path / "mine.txt"
    mine.write_text("my own text " * 100)
    res = CLI.invoke(app, ["explain", f"{d}:torch/eager", f"{d}:jax/jit", "--out", str(tmp_path / "o"),
                           "--data", str(mine)])
    assert "Traceback" not in res.output, res.output
    assert fake_runs and all(s.train.data == str(mine.resolve()) for s in fake_runs), res.output


# -------------------------------------------------------------------------------------- 6. --try --out NEWDIR
def test_try_into_an_out_that_does_not_exist_yet(tmp_path, monkeypatch):
    """explain of records that need no re-run creates no --out before --try: the variant's folder is made with
    its parents (it was a FileNotFoundError traceback)."""
    from twinbench.explain import try_flag
    from twinbench.explain.result import Explained
    from twinbench.explain.side import Side
    from twinbench.spec import from_preset

    def run_one(spec, timeout, env=None):
        return for_spec(spec, "failed", error="not run in this test")

    monkeypatch.setattr(runner, "run_one", run_one)
    spec = from_preset("tiny", {}, framework="torch", strategy="eager")
    result = Explained(a=Side(run="torch/eager", step_ms=0.0), b=Side(run="torch/eager", step_ms=0.0),
                       specs=[spec.to_dict(), spec.to_dict()])
    out = tmp_path / "new" / "deeper"
    with pytest.raises(try_flag.TryError, match="the run failed"):
        try_flag.run(result, "B:layers=2", out, 60.0, lambda line: None)
    assert (out / "try-0" / "results.jsonl").is_file()


# ----------------------------------------------------------------------------- 4. readers bounded in time too
def test_a_stream_that_cannot_be_an_xplane_is_refused_from_its_first_kib(tmp_path):
    """256 KB of zeros gzipped as a profile (a minute of CPU before) and a profile whose head is an XSpace's
    but whose body is a gzip bomb: one line each, within the first KiB or at the ratio bound."""
    import gzip
    import time

    from twinbench.explain import xplane, xplane_stream
    from twinbench.explain.steps import TraceError

    zeros = tmp_path / "zeros.xplane.pb.gz"
    zeros.write_bytes(gzip.compress(bytes(256 << 10)))
    t0 = time.process_time()
    with pytest.raises(TraceError, match="not a JAX profile"):
        xplane_stream.Source(zeros).__enter__()
    assert time.process_time() - t0 < 2.0  # a bound on work, not a timing claim: it read one KiB
    assert xplane.check_head(b'{"traceEvents": []}') is not None
    assert xplane.check_head(bytes(1024)) is not None
    plane = b"\x12\x0b/device:CPU"  # XPlane.name
    assert xplane.check_head(b"\x0a" + bytes([len(plane)]) + plane) is None  # XSpace.planes[0]
    bomb = tmp_path / "bomb.xplane.pb.gz"
    body = b"\x0a" + bytes([len(plane)]) + plane + b"\x22\xff\xff\xff\x7f"  # then a 256 MiB "hostname"
    with gzip.open(bomb, "wb", compresslevel=1) as f:
        f.write(body)
        for _ in range(64):
            f.write(bytes(1 << 20))
    with pytest.raises(TraceError, match="times its compressed size"), xplane_stream.Source(bomb):
        pass


# ------------------------------------------------------------------------------------ 7. records read as data
def test_a_null_timing_is_not_measured_and_a_newer_schema_is_said():
    from twinbench.record import load

    rec = load(synthetic.record("torch", "eager")).to_dict()
    rec["explain"]["timing"] = None
    rec["schema_version"] = 10**400
    got = load(json.loads(json.dumps(rec)))
    assert not isinstance(got, str), got
    assert got.explain.timing == {}
    assert any("newer twinbench" in w and "~1e400" in w for w in got.warnings), got.warnings


def test_records_of_a_newer_schema_are_said_once_per_file_by_the_reader(tmp_path, capsys):
    """The note reaches the terminal (a record's own warnings are not printed by report or diff): once per file,
    whatever the number of such records, a 400-digit version shortened."""
    from twinbench.record import read_records

    recs = [synthetic.record("torch", "eager"), synthetic.record("jax", "jit")]
    recs[0]["schema_version"], recs[1]["schema_version"] = 3, int("9" * 400)
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    got, bad = read_records(path)
    err = capsys.readouterr().err
    assert len(got) == 2 and bad == 0 and err.count("note:") == 1, err
    assert "2 record(s) written by a newer twinbench" in err and len(err) < 400, err
    path.write_text(json.dumps(synthetic.record("torch", "eager")) + "\n")
    read_records(path)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("name, content, says", [
    ("claims.json", [{"claim": "C1", "verdict": " ", "runs": 5}], "runs"),
    ("claims.json", [{"claim": "C1", "verdict": 7}], "verdict"),
    ("claims.json", {"claim": "C1"}, "not a list"),
    ("advice.json", {"plan_steps": "abc"}, "plan_steps"),
    ("advice.json", {"plan_steps": [1]}, "plan_steps"),
    ("advice.json", {"plan_steps": 10**400}, "plan_steps"),
    ("advice.json", {"recommendation": "x"}, "recommendation"),
])
def test_report_reads_side_files_typed(tmp_path, name, content, says):
    d = tmp_path / "r"
    synthetic.write(d, [synthetic.record("torch", "eager"), synthetic.record("jax", "jit")])
    (d / name).write_text(json.dumps(content))
    line = one_line_error(CLI.invoke(app, ["report", str(d)]))
    assert name in line and says in line, line


def test_a_verdict_of_spaces_and_a_label_of_mathtext_are_text(tmp_path):
    d = tmp_path / "r"
    recs = [synthetic.record("torch", "eager"), synthetic.record("jax", "jit")]
    recs[1]["strategy"] = "jit$^{x}_$"
    synthetic.write(d, recs)
    (d / "claims.json").write_text(json.dumps([{"claim": "C1", "verdict": " ", "runs": ["torch/eager"]}]))
    res = CLI.invoke(app, ["report", str(d), "--plan-steps", "1000000000000"])
    assert res.exit_code == 0 and res.exception is None, res.output
    assert (d / "report.html").is_file() and any((d / "plots").glob("*.png"))
    line = one_line_error(CLI.invoke(app, ["report", str(d), "--plan-steps", "1" + "0" * 400]))
    assert "--plan-steps" in line and "~1e400" in line, line


@pytest.mark.parametrize("text", ["a\nerror: spoofed", "a\u2028error: spoofed", "a\rerror", "\u202eevil\u200f"])
def test_a_string_from_data_is_one_line_of_its_own_characters(text):
    from twinbench.folder_io import one_line, terminal
    from twinbench.record import load

    for clean in (one_line(text), terminal(text)):
        assert "\n" not in clean and "\r" not in clean and "\u2028" not in clean and "\u202e" not in clean
        assert "\u200f" not in clean
    rec = synthetic.record("torch", "eager")
    rec["device"] = text
    rec["warnings"] = [text]
    got = load(rec)
    assert "\n" not in got.run.device and "\u2028" not in got.run.device and "\n" not in got.warnings[0]


@pytest.mark.parametrize("args, says", [
    (["compare", "--lr", "1e308", "--framework", "torch", "--strategies", "eager"], "--lr"),
    (["predict", "--device", "h100", "--devices", str(10**30)], "--devices"),
    (["report", "x", "--plan-steps", str(10**13)], "--plan-steps"),
])
def test_absurd_values_are_one_line(args, says, fake_runs):
    line = one_line_error(CLI.invoke(app, args))
    assert line.startswith(f"error: {says}"), line
    assert len(line) < 200 and not fake_runs


def test_a_results_file_that_is_a_link_is_one_line_for_every_reader(tmp_path):
    real, d = tmp_path / "real", tmp_path / "d"
    synthetic.write(real, [synthetic.record("torch", "eager"), synthetic.record("jax", "jit")])
    d.mkdir()
    (d / "results.jsonl").symlink_to(real / "results.jsonl")
    for args in (["diff", str(d), str(d)], ["report", str(d)],
                 ["explain", f"{d}:torch/eager", f"{d}:jax/jit", "--out", str(tmp_path / "o")]):
        line = one_line_error(CLI.invoke(app, args))
        assert "symbolic link" in line, (args, line)


def test_an_error_naming_a_file_is_one_line_whatever_the_name(tmp_path):
    f = tmp_path / "a\x1b[31mb\nerror: spoofed.json"
    f.write_text("x")
    line = one_line_error(CLI.invoke(app, ["explain", str(f)]))
    assert "\x1b" not in line and "spoofed.json" in line


@pytest.mark.parametrize("command", ["compare", "explain"])
def test_a_traces_link_in_out_is_refused_where_it_is_opened_not_by_a_scan(tmp_path, monkeypatch, fake_runs, command):
    """The scan of --out for links stops at 20,000 entries: with it outrun (here: off), the traces folder is still
    opened through no link before any run, so no profiler writes through it."""
    from twinbench import results_dir

    monkeypatch.setattr(results_dir, "check_folder", lambda *a, **k: None)
    out, away = tmp_path / "o", tmp_path / "away"
    out.mkdir()
    away.mkdir()
    (out / "traces").symlink_to(away)
    args = (["compare", "--framework", "torch", "--strategies", "eager", "--explain", "--out", str(out)]
            if command == "compare" else ["explain", "torch:eager", "torch:eager", "--out", str(out)])
    line = one_line_error(CLI.invoke(app, args))
    assert "traces" in line and "symbolic link" in line, line
    assert not fake_runs and not any(away.iterdir())


def test_the_resume_an_interrupted_run_prints_works_before_any_run_ended(tmp_path, fake_runs):
    """A SIGTERM before any run ended leaves --out with its lock and no results.jsonl: the --resume command it
    printed must be taken (it was "no results.jsonl there")."""
    out = tmp_path / "o"
    out.mkdir()
    (out / ".twinbench.lock").write_text("")
    res = CLI.invoke(app, ["compare", "--framework", "torch", "--strategies", "eager", "--resume", str(out)])
    assert res.exit_code == 0 and fake_runs, res.output
    line = one_line_error(CLI.invoke(app, ["compare", "--resume", str(tmp_path / "empty")]))
    assert "no results.jsonl there" in line
