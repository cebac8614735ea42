"""Hostile input on the newer surfaces: one test per class of bad input (docs/bad-input.md).

Each class is fixed at its root, and each test here failed before its fix: a results folder that steers a
re-run (the record-to-run boundary), shapes no memory can hold (checked before anything is built), a trace
file read by its neighbours instead of its content, unbounded or corrupt decompression, files and folders a
user names that cannot be read or written, late validation, bad checkpoints and calibration files, absurd
numbers. Everything runs in this process; no training run starts (``runner.run_one`` is replaced by a fake).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
import zlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from twinbench import runner
from twinbench.cli import app
from twinbench.record import read_records

sys.path.insert(0, str(Path(__file__).parent / "report"))
import synthetic

CLI = CliRunner()
FIX = Path(__file__).parent / "explain" / "fixtures"
#: a place no one may write, root included (a read-only file system)
READ_ONLY = Path("/sys/twinbench-hostile")


def one_line_error(result, code: int = 2) -> str:
    text = result.output
    assert result.exit_code == code, text
    assert result.exception is None or isinstance(result.exception, SystemExit), text
    assert "Traceback" not in text, text
    errors = [ln for ln in text.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, text
    return errors[0]


# --------------------------------------------------------------------------------- the record-to-run boundary
def steering_results(tmp_path: Path) -> tuple[Path, Path]:
    """A results folder whose records would write outside --out, listen on a port and start processes."""
    elsewhere = tmp_path / "elsewhere"
    d = tmp_path / "sent"
    recs = []
    for fw, st in (("torch", "eager"), ("jax", "jit")):
        r = synthetic.record(fw, st)
        r["spec"].update(save_weights=str(elsewhere / "weights"), cache_dir=str(elsewhere / "cache"),
                         trace_dir=str(elsewhere / "traces"), num_processes=2, process_id=0,
                         coordinator="0.0.0.0:45679", devices=2, strategy=st)
        r["spec"]["train"]["batch"] = 8
        recs.append(r)
    synthetic.write(d, recs)
    return d, elsewhere


def test_a_re_run_takes_from_a_record_only_what_defines_the_measurement(tmp_path, fake_runs):
    d, elsewhere = steering_results(tmp_path)
    res = CLI.invoke(app, ["explain", f"{d}:torch/eager", f"{d}:jax/jit", "--out", str(tmp_path / "o")])
    assert "Traceback" not in res.output, res.output
    assert len(fake_runs) == 2, res.output
    for s in fake_runs:
        assert s.output.save_weights == "" and s.launch.coordinator == "" and s.launch.num_processes == 1 and s.launch.process_id == -1
        assert not s.host.cache_dir.startswith(str(elsewhere)) and not s.output.trace_dir.startswith(str(elsewhere))
        assert s.launch.devices == 2 and s.model.layers == 4  # what defines the measurement is the record's
    assert not elsewhere.exists()
    assert "not taken from the record: cache_dir, coordinator, num_processes, process_id, save_weights" in res.output


def test_a_re_run_uses_a_path_the_user_names_on_the_command_line(tmp_path, fake_runs):
    d, _ = steering_results(tmp_path)
    mine = tmp_path / "mine"
    CLI.invoke(app, ["explain", f"{d}:torch/eager", f"{d}:jax/jit", "--out", str(tmp_path / "o"),
                     "--save-weights", str(mine)])
    assert fake_runs and all(s.output.save_weights == str(mine) for s in fake_runs)


# -------------------------------------------------------------------------------- sizes before anything is built
@pytest.fixture
def host_16_gib(monkeypatch):
    """A CPU-only host with 16 GiB available, whatever machine runs the tests."""
    from twinbench import limits
    from twinbench.measure import memory

    monkeypatch.setattr(memory, "host_available_bytes", lambda: 16 * 2**30)
    monkeypatch.setattr(limits, "_accelerator_here", lambda: False)


def test_the_lower_bound_refuses_only_what_cannot_fit():
    from twinbench import limits
    from twinbench.config import SpecError
    from twinbench.spec import from_preset

    small = from_preset("tiny", {}, framework="torch", strategy="eager")
    huge = from_preset("tiny", {"layers": 100000}, framework="torch", strategy="eager")
    assert limits.step_lower_bound(small) < 2**22 < 64 * 2**30 < limits.step_lower_bound(huge)
    limits.check_host([small], available=2**30)
    with pytest.raises(SpecError, match="layers=100000"):
        limits.check_host([huge], available=16 * 2**30)

    limits.check_host([huge.evolve(no_preflight=True)], available=16 * 2**30)  # the user's call


def test_a_shape_no_memory_holds_is_refused_before_any_run(tmp_path, fake_runs, host_16_gib):
    base = ["--preset", "tiny", "--layers", "100000"]
    line = one_line_error(CLI.invoke(app, ["compare", *base, "--strategies", "torch:eager,jax:jit", "--out",
                                           str(tmp_path / "o")]))
    assert "layers=100000" in line and "GiB" in line and "available" in line
    assert not (tmp_path / "o").exists()
    line = one_line_error(CLI.invoke(app, ["sweep", "--over", "batch=1,1000000000", "--preset", "tiny",
                                           "--strategies", "torch:eager", "--out", str(tmp_path / "s")]))
    assert "batch=1000000000" in line
    line = one_line_error(CLI.invoke(app, ["predict", *base, "--strategies", "jax:jit", "--device", "tpu-v5e"]))
    assert "tpu-v5e" in line and "no program was read" in line
    assert not fake_runs


def test_a_300_digit_size_is_refused_in_one_readable_line(tmp_path, fake_runs, host_16_gib):
    line = one_line_error(CLI.invoke(app, ["compare", "--preset", "tiny", "--vocab", "9" * 300, "--strategies",
                                           "torch:eager", "--out", str(tmp_path / "o")]))
    assert len(line) < 400 and "GiB" in line


def test_threads_beyond_the_cores_and_nan_learning_rates_are_refused_at_parse_time(tmp_path, fake_runs):
    base = ["compare", "--preset", "tiny", "--strategies", "torch:eager", "--out", str(tmp_path / "o")]
    assert "cores" in one_line_error(CLI.invoke(app, [*base, "--threads", "100000"]))
    for flag, value in (("--lr", "nan"), ("--lr", "inf"), ("--weight-decay", "nan"), ("--slow-input", "inf")):
        assert flag in one_line_error(CLI.invoke(app, [*base, flag, value]))
    assert not fake_runs


# ------------------------------------------------------------------------------------- trace files by content
def test_a_torch_trace_beside_an_unrelated_xplane_is_read_as_torch(tmp_path):
    from twinbench.explain import trace_file

    t = tmp_path / "torch_run.json.gz"
    shutil.copy(FIX / "hta_triton_example.json.gz", t)
    (tmp_path / "other_job.xplane.pb").write_bytes(b"\x0a\x03abc")
    kind, path, _ = trace_file.resolve(str(t))
    assert (kind, path) == ("torch", t)
    res = CLI.invoke(app, ["explain", str(t)])
    assert res.exit_code == 0 and "torch:" in res.output and "other_job" not in res.output, res.output


def test_jax_own_chrome_export_stands_for_the_profile_of_its_host_beside_it(tmp_path):
    from twinbench.explain import files, trace_file

    shutil.copy(FIX / "tpu_v5e_jax_jit_bf16.xplane.pb.gz", tmp_path / "host.xplane.pb.gz")
    shutil.copy(FIX / "h200_jax_jit_bf16.xplane.pb.gz", tmp_path / "other.xplane.pb.gz")
    export = tmp_path / "host.trace.json.gz"
    export.write_bytes(gzip.compress(json.dumps({"displayTimeUnit": "ns", "traceEvents": [
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/host:CPU"}}]}).encode()))
    assert files.kind(export) == "jax-chrome"
    assert trace_file.resolve(str(export))[:2] == ("jax", tmp_path / "host.xplane.pb.gz")
    assert files.kind(FIX / "h200_torch_eager_bf16.json.gz") == "chrome"


def test_a_gzip_bomb_stops_at_the_cap_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("TWINBENCH_MAX_TRACE_MB", "8")
    bomb = tmp_path / "bomb.json.gz"
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    with bomb.open("wb") as f:
        f.write(c.compress(b'{"traceEvents": ['))
        for _ in range(64):
            f.write(c.compress(b" " * 2**20))
        f.write(c.flush())
    assert bomb.stat().st_size < 2**20
    line = one_line_error(CLI.invoke(app, ["explain", str(bomb)]))
    assert "inflates past 8 MiB" in line


def _trace(events: list[dict]) -> bytes:
    return json.dumps({"schemaVersion": 1, "traceEvents": events}).encode()


def _steps(ts: object = 0, dur: object = 100.0) -> list[dict]:
    ev = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "ts": 1000.0 * i, "dur": 900.0,
           "tid": 1} for i in range(4)]
    ev += [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1000.0 * i + 10, "dur": 100.0, "tid": 1}
           for i in range(4)]
    ev[5]["ts"], ev[5]["dur"] = ts if ts != 0 else ev[5]["ts"], dur
    return ev


@pytest.mark.parametrize(("name", "content", "says"), [
    ("corrupt.json.gz", lambda: bytes(b ^ (0xFF if 12 < i < 40 else 0) for i, b in
                                      enumerate(gzip.compress(_trace(_steps()) * 50))), "corrupt gzip"),
    ("truncated.json.gz", lambda: gzip.compress(_trace(_steps()))[:-30], "truncated gzip"),
    ("text_ts.json", lambda: _trace(_steps(ts="soon")), "not a time"),
    ("huge_dur.json", lambda: _trace(_steps(dur=1e308)), "not a time"),
    ("binary.json", lambda: b"\x00\x01\x02 not json", "not a trace"),
    ("list.json", lambda: b"[1, 2, 3]", "no steps found"),
])
def test_every_bad_trace_is_one_line(tmp_path, name, content, says):
    p = tmp_path / name
    p.write_bytes(content())
    line = one_line_error(CLI.invoke(app, ["explain", str(p)]))
    assert says in line and "inf" not in line.split(says)[0].split(str(p))[-1]


def test_a_binary_hlo_beside_a_record_and_a_folder_for_a_file_are_one_line(tmp_path):
    from twinbench.explain import files
    from twinbench.explain.steps import TraceError

    hlo = tmp_path / "step.hlo.txt"
    hlo.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(TraceError, match="binary, not UTF-8"):
        files.read_text(hlo, "compiled HLO text")
    with pytest.raises(TraceError, match="a folder, not a"):
        files.read_bytes(tmp_path)
    from twinbench.explain import gap

    r = synthetic.record("jax", "jit")
    r.update(trace_path=str(tmp_path / "x.trace.json.gz"), explain_hlo_path=str(hlo))
    with pytest.raises(TraceError, match="binary"):
        gap.read_trace(r)


# -------------------------------------------------------------------------- places a user names, checked first
def test_unwritable_cache_trace_and_weights_folders_fail_before_any_run(tmp_path, fake_runs):
    f = tmp_path / "a_file"
    f.write_text("x")
    out = tmp_path / "o"
    base = ["compare", "--preset", "tiny", "--strategies", "torch:eager", "--out", str(out)]
    assert "a file, not a folder" in one_line_error(CLI.invoke(app, [*base, "--cache-dir", str(f)]))
    assert "cannot write there" in one_line_error(CLI.invoke(app, [*base, "--cache-dir", str(f / "sub")]))
    assert "--trace" in one_line_error(CLI.invoke(app, [*base, "--trace", str(READ_ONLY)]))
    assert "--save-weights" in one_line_error(CLI.invoke(app, [*base, "--save-weights", str(READ_ONLY)]))
    assert "--cache-dir" in one_line_error(CLI.invoke(app, ["sweep", "--over", "batch=1,2", *base[1:], "--cache-dir",
                                                            str(READ_ONLY)]))
    assert not out.exists() and not fake_runs  # --out not even created, let alone left holding its lock


def test_export_into_a_file_or_a_read_only_place_is_one_line(tmp_path):
    f = tmp_path / "a_file"
    f.write_text("x")
    assert "a file, not a folder" in one_line_error(CLI.invoke(app, ["export", "--preset", "tiny", "--out", str(f)]))
    assert "cannot write there" in one_line_error(CLI.invoke(app, ["export", "--preset", "tiny", "--out",
                                                                   str(READ_ONLY)]))


def test_try_and_depths_are_checked_before_any_run(tmp_path, fake_runs):
    base = ["explain", "torch:eager", "jax:jit", "--preset", "tiny", "--out", str(tmp_path / "o")]
    assert "A:FLAG or B:FLAG" in one_line_error(CLI.invoke(app, [*base, "--try", "C:threads=1"]))
    assert "not a int" in one_line_error(CLI.invoke(app, [*base, "--try", "B:threads=many"]))
    assert "no spec option" in one_line_error(CLI.invoke(app, [*base, "--try", "B:nope=1"]))
    assert "layer counts" in one_line_error(CLI.invoke(app, [*base, "--depths", "2,x"]))
    torch_only = ["explain", "torch:eager", "torch:compile", "--preset", "tiny", "--out", str(tmp_path / "o")]
    assert "neither side is a JAX run" in one_line_error(CLI.invoke(app, [*torch_only, "--depths", "2,4"]))
    assert not fake_runs


def test_truncated_init_from_weights_fail_once_before_any_run(tmp_path, fake_runs):
    ck = tmp_path / "ck"
    assert CLI.invoke(app, ["export", "--preset", "tiny", "--out", str(ck)]).exit_code == 0
    st = ck / "model.safetensors"
    st.write_bytes(st.read_bytes()[: st.stat().st_size // 2])
    line = one_line_error(CLI.invoke(app, ["compare", "--init-from", str(ck), "--strategies", "torch:eager,jax:jit",
                                           "--out", str(tmp_path / "o")]))
    assert "model.safetensors is truncated" in line
    assert not fake_runs


# ----------------------------------------------------------------------------------------- predict --calibrate
def _calibration(tmp_path: Path, **change) -> Path:
    r = synthetic.record("jax", "jit")
    r.update({"device": "TPU v5 lite", "platform": "tpu", "preset": "tiny", "batch": 8, "seq": 32, **change})
    r["spec"]["preset"] = "tiny"
    d = tmp_path / f"cal{len(list(tmp_path.glob('cal*')))}"
    return synthetic.write(d, [r])


def test_a_calibration_file_with_no_usable_record_or_a_bad_value_names_file_and_line(tmp_path):
    base = ["predict", "--preset", "tiny", "--strategies", "jax:jit", "--device", "tpu-v5e", "--calibrate"]
    empty = _calibration(tmp_path, status="failed")
    assert "no usable record" in one_line_error(CLI.invoke(app, [*base, str(empty)]))
    bad = _calibration(tmp_path, preset="no-such-preset")
    line = one_line_error(CLI.invoke(app, [*base, str(bad)]))
    assert f"{bad} line 1" in line and "no-such-preset" in line
    huge = _calibration(tmp_path, batch=10**9)
    line = one_line_error(CLI.invoke(app, [*base, str(huge)]))
    assert f"{huge} line 1" in line and "batch=1000000000" in line
    text = _calibration(tmp_path, batch="eight")
    line = one_line_error(CLI.invoke(app, [*base, str(text)]))
    assert f"{text} line 1: batch is a str" in line and "no usable record" in line


def test_predict_timeout_ends_a_hanging_model_in_one_line_and_removes_its_temp_folder(tmp_path, monkeypatch):
    import tempfile

    model = tmp_path / "hangs.py"
    model.write_text("import time\ntime.sleep(3600)\n")
    seen = []
    monkeypatch.setattr(runner, "run_module",
                        lambda module, args, timeout: seen.append(timeout) or (124, f"timed out after {timeout:g} s"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    line = one_line_error(CLI.invoke(app, ["predict", "--model", f"{model}:build", "--strategies", "torch:eager",
                                           "--device", "tpu-v5e", "--timeout", "3"]))
    assert seen == [3.0] and "timed out after 3 s" in line
    assert not list(tmp_path.glob("twinbench-predict-*"))


# ------------------------------------------------------------------------------------------------ absurd numbers
def test_nan_and_300_digit_numbers_in_records_read_as_null(tmp_path):
    r = synthetic.record("torch", "eager")
    r.update(tokens_per_s=10**300, n_params=10**310, explain_timing={"forward": float("nan"), "backward": 1.0})
    bad = synthetic.record("jax", "jit")
    bad["step_ms"] = 1e300
    path = synthetic.write(tmp_path / "r", [r, bad])
    recs, skipped = read_records(path)
    assert skipped == 1 and len(recs) == 1
    assert recs[0].speed.tokens_per_s is None and recs[0].run.n_params is None
    assert recs[0].explain.timing == {"forward": None, "backward": 1.0}
    assert CLI.invoke(app, ["report", str(path.parent)]).exit_code == 0
    md = (path.parent / "report.md").read_text()
    assert "0" * 40 not in md.replace(",", "") and "nan" not in md.lower().replace("nanogpt", "")


# ==================================================================== a results folder is data (folder_io.py)
def _importing_model(tmp_path: Path) -> tuple[Path, Path]:
    """A model file that leaves a marker when imported: a folder that names it must never run it."""
    marker = tmp_path / "imported"
    model = tmp_path / "planted.py"
    model.write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\ndef build(): ...\n")
    return model, marker


def _claims_folder(tmp_path: Path, settings: object) -> Path:
    d = tmp_path / "sent-claims"
    d.mkdir(exist_ok=True)
    (d / "claims-settings.json").write_text(json.dumps(settings))
    return d


def test_claims_resume_imports_no_model_its_folder_names(tmp_path, fake_runs):
    model, marker = _importing_model(tmp_path)
    d = _claims_folder(tmp_path, {"quick": True, "only": "C6", "model": f"{model}:build"})
    line = one_line_error(CLI.invoke(app, ["claims", "--resume", str(d)]))
    assert "--model" in line and "give --model again" in line
    other = tmp_path / "other.py"
    other.write_text("def build(): ...\n")
    line = one_line_error(CLI.invoke(app, ["claims", "--resume", str(d), "--model", f"{other}:build"]))
    assert "is not the model its claims ran" in line
    assert not marker.exists() and not fake_runs


def test_claims_resume_takes_no_path_from_its_folder(tmp_path, fake_runs):
    elsewhere = tmp_path / "elsewhere"
    d = _claims_folder(tmp_path, {"quick": True, "only": "C1", "repeats": 1, "trace": str(elsewhere)})
    res = CLI.invoke(app, ["claims", "--resume", str(d)])
    assert "Traceback" not in res.output, res.output
    assert fake_runs and all(not s.output.trace_dir for s in fake_runs), res.output
    assert not elsewhere.exists()


@pytest.mark.parametrize(("settings", "says"), [
    ({"repeats": "3"}, "repeats is \"3\" (str), not an int"),
    ({"only": ["C1"]}, "only is [\"C1\"] (list), not a str"),
    ({"plan_steps": 1.5}, "plan_steps is 1.5 (float), not an int"),
    ([1, 2], "is not a claims run's settings"),
])
def test_claims_settings_of_the_wrong_type_are_one_line(tmp_path, fake_runs, settings, says):
    d = _claims_folder(tmp_path, settings)
    assert says in one_line_error(CLI.invoke(app, ["claims", "--resume", str(d)]))
    assert not fake_runs


def test_claims_settings_left_empty_take_the_command_lines(tmp_path, fake_runs):
    d = _claims_folder(tmp_path, {"plan_steps": None, "repeats": None})
    res = CLI.invoke(app, ["claims", "--resume", str(d), "--plan"])
    assert res.exit_code == 0 and "Traceback" not in res.output, res.output


def _linked(tmp_path: Path) -> tuple[Path, Path]:
    """A results folder of two records, and a folder outside it its links may point into."""
    d = tmp_path / "sent"
    synthetic.write(d, [synthetic.record("torch", "eager"), synthetic.record("jax", "jit")])
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep")
    return d, outside


@pytest.mark.parametrize("name", ["report.html", "report.md", "plots"])
def test_report_writes_nothing_through_a_link_its_folder_holds(tmp_path, name):
    d, outside = _linked(tmp_path)
    (d / name).symlink_to(outside if name == "plots" else outside / "precious.txt")
    line = one_line_error(CLI.invoke(app, ["report", str(d)]))
    assert f"{d / name}: a symbolic link" in line
    assert (outside / "precious.txt").read_text() == "keep" and sorted(os.listdir(outside)) == ["precious.txt"]


@pytest.mark.parametrize("name", ["results.jsonl", "summary.md", ".twinbench.lock"])
def test_compare_resume_writes_nothing_through_a_link_its_folder_holds(tmp_path, fake_runs, name):
    d, outside = _linked(tmp_path)
    target = outside / "precious.txt"
    if name == "results.jsonl":
        target = outside / "results.jsonl"
        (d / name).rename(target)
    (d / name).symlink_to(target)
    before = target.read_bytes()
    line = one_line_error(CLI.invoke(app, ["compare", "--preset", "tiny", "--strategies", "torch:eager",
                                           "--resume", str(d)]))
    assert f"{d / name}: a symbolic link" in line
    assert target.read_bytes() == before and not fake_runs


def test_the_writer_refuses_a_link_below_its_folder_and_writes_whole_files(tmp_path):
    from twinbench import folder_io

    d, outside = _linked(tmp_path)
    (d / "sub").symlink_to(outside)
    with pytest.raises(folder_io.LinkRefused, match="sub: a symbolic link"):
        folder_io.write_file(d, "sub/x.png", b"png")
    with pytest.raises(folder_io.LinkRefused, match="sub: a symbolic link"):
        folder_io.make_dir(d, "sub/deeper")
    os.link(outside / "precious.txt", d / "hard.txt")
    with pytest.raises(folder_io.LinkRefused, match="other hard links"):
        folder_io.open_append(d / "hard.txt")
    folder_io.write_file(d, "hard.txt", "replaced")  # written beside and renamed: the other name keeps its file
    assert (outside / "precious.txt").read_text() == "keep" and (d / "hard.txt").read_text() == "replaced"
    assert sorted(os.listdir(outside)) == ["precious.txt"]


def _sparse_results(tmp_path: Path, size: int) -> Path:
    d = tmp_path / "big"
    d.mkdir()
    with open(d / "results.jsonl", "wb") as f:
        f.truncate(size)  # sparse: no disk, but every byte reads as NUL
    return d


def test_a_2_gb_results_file_is_refused_from_its_size(tmp_path):
    import resource

    d = _sparse_results(tmp_path, 2 * 2**30)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for args in (["report", str(d)], ["diff", str(d), str(d)], ["explain", f"{d}:torch/eager", f"{d}:jax/jit"],
                 ["export", "--from", str(d), "--out", str(tmp_path / "e")],
                 ["predict", "--preset", "tiny", "--strategies", "jax:jit", "--device", "tpu-v5e", "--calibrate",
                  str(d / "results.jsonl")],
                 ["compare", "--preset", "tiny", "--strategies", "torch:eager", "--resume", str(d)]):
        line = one_line_error(CLI.invoke(app, args))
        assert "2.0 GB, over the 256 MB" in line, (args, line)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 200 * 2**10  # KiB: no file was held


def test_a_line_or_a_name_too_long_is_skipped_and_a_long_string_cut(tmp_path, monkeypatch):
    from twinbench import folder_io

    monkeypatch.setattr(folder_io, "MAX_LINE", 2**20)
    ok = synthetic.record("torch", "eager", error="e" * (folder_io.MAX_STRING * 4))
    long_name = synthetic.record("jax", "jit")
    long_name["strategy"] = "jit" * 10**5
    path = synthetic.write(tmp_path / "r", [ok, long_name])
    with path.open("ab") as f:
        f.write(b"\x00" * (8 * 2**20) + b"\n")  # one line over the cap, no newline for 8 MB
    problems: list[str] = []
    recs, bad = read_records(path, problems)
    assert bad == 2 and len(recs) == 1
    assert "strategy is a 300000-character string" in problems[0] and "a line of over 1 MB" in problems[1]
    assert len(recs[0].error) == folder_io.MAX_STRING + 3


def test_a_rejected_record_says_why_where_it_was_asked_for(tmp_path, fake_runs):
    bad = synthetic.record("torch", "eager")
    bad["step_ms"] = 1e300
    d = synthetic.write(tmp_path / "r", [bad, synthetic.record("jax", "jit")]).parent
    line = one_line_error(CLI.invoke(app, ["explain", f"{d}:torch/eager", f"{d}:jax/jit"]))
    assert "has no run torch/eager" in line and "line 1: step_ms is 1e+300" in line
    assert not fake_runs


def test_terminal_escapes_in_a_record_never_reach_the_terminal(tmp_path):
    r = synthetic.record("torch", "eager", failed="\x1b[2K\rerror: spoofed \x1b]8;;http://x\x07link")
    path = synthetic.write(tmp_path / "r", [r, synthetic.record("jax", "jit")])
    recs, _ = read_records(path)
    assert recs[0].error == "[2Kerror: spoofed ]8;;http://xlink"
    from twinbench.folder_io import terminal

    assert terminal("a\x1b[31mb\nc\u202ed" + "x" * 500, 20) == "a[31mb cd" + "x" * 8 + "..."


# ============================================================================ the same input, the same path
def _sides(tmp_path: Path) -> list[str]:
    d = synthetic.write(tmp_path / "r", [synthetic.record("torch", "eager"), synthetic.record("jax", "jit")]).parent
    return ["explain", f"{d}:torch/eager", f"{d}:jax/jit", "--out", str(tmp_path / "o")]


@pytest.mark.parametrize(("flag", "says"), [
    (["--try", "B:layers=100000"], "--try B:layers=100000: --preset small with layers=100000"),
    (["--try", "B:lr=nan"], "--lr must be > 0 and at most fp32"),
    (["--try", "B:batch=1e23"], "batch='1e23' is not a int"),
    (["--try", "B:init_from=/tmp"], "init_from is not varied by --try"),
    (["--try", "B:save_weights=/tmp/w"], "save_weights is not varied by --try"),
    (["--try", "B:data=/no/such/file.txt"], "--data /no/such/file.txt"),
    (["--try", "A:--xla_cpu_foo=true"], "an XLA flag changes JAX runs only; side A is torch/eager"),
    (["--depths", "2,100000"], "--depths 100000:"),
])
def test_a_variant_passes_compares_checks_before_any_run(tmp_path, fake_runs, host_16_gib, flag, says):
    line = one_line_error(CLI.invoke(app, [*_sides(tmp_path), *flag]))
    assert says in line
    assert not fake_runs


def test_explain_interrupted_in_its_own_runs_exits_130_in_one_line(tmp_path, monkeypatch):
    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "run_one", interrupted)
    line = one_line_error(CLI.invoke(app, _sides(tmp_path)), code=130)
    assert line.startswith("error: interrupted")


def test_predict_names_what_it_covers_for_a_strategy_it_does_not_read(tmp_path):
    for s in ("jax:pmap", "jax:mesh-fsdp", "jax:naive", "torch:ddp", "torch:fsdp"):
        line = one_line_error(CLI.invoke(app, ["predict", "--preset", "tiny", "--strategies", s, "--device",
                                               "tpu-v5e"]))
        assert "predict reads one device's program of jax: jit" in line, line


def test_doctor_refuses_a_trace_folder_with_an_older_profile_and_bounds_its_python(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    trace = tmp_path / "trace"
    (trace / "plugins" / "profile").mkdir(parents=True)
    line = one_line_error(CLI.invoke(app, ["doctor", str(script), "--trace", str(trace)]))
    assert "not empty (holds plugins)" in line
    silent = tmp_path / "never-answers"
    silent.write_text("#!/bin/sh\nsleep 600\n")
    silent.chmod(0o755)
    line = one_line_error(CLI.invoke(app, ["doctor", str(script), "--python", str(silent), "--timeout", "1"]))
    assert "did not answer within 1 s" in line


@pytest.mark.parametrize("value", ["inf", "1e308"])
def test_an_endless_timeout_is_one_line(tmp_path, fake_runs, value):
    for cmd in (["compare", "--strategies", "torch:eager"], ["sweep", "--over", "batch=1,2"], ["advise"],
                ["claims", "--only", "C1"], ["score", "--init-from", "ck", "--data", "d.txt"],
                ["predict", "--device", "tpu-v5e", "--model", "x.py:build"]):
        line = one_line_error(CLI.invoke(app, [*cmd, "--timeout", value, "--out", str(tmp_path / "o")]
                                         if cmd[0] not in ("score", "predict") else [*cmd, "--timeout", value]))
        assert "--timeout" in line and "a week" in line, (cmd, line)
    assert not fake_runs


def test_claims_with_a_model_whose_check_fails_is_one_line(tmp_path, fake_runs, monkeypatch):
    from twinbench.byo import plan as byo_plan
    from twinbench.config import SpecError

    def fails(*a, **k):
        raise SpecError("--model x.py:build: build() returned a str, not a torch.nn.Module")

    monkeypatch.setattr(byo_plan, "prepare", fails)
    model = tmp_path / "m.py"
    model.write_text("def build(): return 'no'\n")
    line = one_line_error(CLI.invoke(app, ["claims", "--quick", "--only", "C6", "--model", f"{model}:build",
                                           "--out", str(tmp_path / "o")]))
    assert "returned a str" in line and not fake_runs
    assert not (tmp_path / "o").exists()  # an --out made for the run is not left behind (empty, or with byo/)
    (tmp_path / "mine").mkdir()  # one the user made stays, as it was
    one_line_error(CLI.invoke(app, ["claims", "--quick", "--only", "C6", "--model", f"{model}:build", "--out",
                                    str(tmp_path / "mine")]))
    assert (tmp_path / "mine").is_dir() and not any((tmp_path / "mine").iterdir())


def test_stdout_on_a_full_device_is_one_line(monkeypatch, capsys):
    import errno

    class Full:
        def write(self, s):
            raise OSError(errno.ENOSPC, "No space left on device")

        def flush(self):
            pass

        def fileno(self):
            raise OSError(errno.EBADF, "no fd")

        def isatty(self):
            return False

    monkeypatch.setattr(sys, "stdout", Full())
    with pytest.raises(SystemExit) as e:
        app(["strategies"])
    assert e.value.code == 2
    assert capsys.readouterr().err.strip() == "error: cannot write the output: No space left on device"


def test_claims_checks_its_trace_folder_and_takes_outs_lock_for_its_probes(tmp_path, fake_runs, monkeypatch):
    out = tmp_path / "o"
    line = one_line_error(CLI.invoke(app, ["claims", "--quick", "--only", "C1", "--trace", str(READ_ONLY), "--out",
                                           str(out)]))
    assert line.startswith("error: --trace") and not fake_runs
    probed = []
    monkeypatch.setattr(runner, "run_module", lambda *a, **k: probed.append(a) or (1, "not run here"))
    out.mkdir()
    with runner.out_lock(out):  # another twinbench writing there now
        line = one_line_error(CLI.invoke(app, ["claims", "--quick", "--only", "C21", "--out", str(out)]))
    assert "another twinbench" in line and not probed


def test_a_refused_export_leaves_no_out_and_reads_no_device(tmp_path):
    d = tmp_path / "saved"
    r = synthetic.record("torch", "eager", weights_path="/dev/zero")
    synthetic.write(d, [r])
    out = tmp_path / "new-out"
    line = one_line_error(CLI.invoke(app, ["export", "--from", str(d), "--out", str(out)]))
    assert "/dev/zero is not a regular file" in line and not out.exists()


def test_another_protobuf_named_xplane_is_one_line(tmp_path):
    pb = tmp_path / "run.xplane.pb"
    pb.write_bytes(b"\x08\x96\x01\x12\x04name")  # a valid protobuf message, not an XSpace
    line = one_line_error(CLI.invoke(app, ["explain", str(pb)]))
    assert f"{pb}: not a trace explain reads" in line or "not a readable profile" in line or "not a JAX profile" in line
