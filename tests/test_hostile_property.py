"""The promise of docs/bad-input.md, for every reader of a folder, on inputs Hypothesis makes up.

Hostile records (valid ones with fields changed to any JSON value: text with terminal escapes, NaN, 400-digit
integers, nested lists; garbage and torn lines), claims settings files, torch traces; folders that hold links
out of themselves and records that name a model to import and places to write. Every command that reads them
must exit 0, or 2 with one ``error:`` line and no traceback; import nothing; write nothing outside the folders
it was given. Everything runs in this process (typer's CliRunner); ``runner.run_one`` is a fake that fails, so
no training starts. A small number of examples with a deadline each: the quick tier runs it.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from twinbench import runner
from twinbench.cli import app
from twinbench.record import FLAT, Record, for_spec
from twinbench.record_sections import SECTIONS

sys.path.insert(0, str(Path(__file__).parent / "report"))
import synthetic

CLI = CliRunner()
FIELDS = sorted({*FLAT, *Record.__struct_fields__} - set(SECTIONS))  # a record's fields by their flat names
#: the deadline of one example (all its commands): a bound on time, not a measurement
QUICK = settings(max_examples=5, deadline=20_000, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

hostile_text = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["\x1b[2K\rerror: spoofed", "[bold red]markup[/]", "../../outside", "torch", "eager", "jax",
                     "jit", "ok", "failed", "\u202eevil", "x" * 300]),
)
numbers = st.one_of(st.integers(min_value=-(10**20), max_value=10**20), st.sampled_from([10**400, -(10**400)]),
                    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e300, 0, -1, 0.0]))
leaf = st.one_of(hostile_text, numbers, st.booleans(), st.none())
json_value = st.recursive(leaf, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(hostile_text, inner,
                                                                                               max_size=3),
                          max_leaves=8)


def _json(v: object) -> str:
    return json.dumps(v, allow_nan=True)


@st.composite
def hostile_line(draw: st.DrawFn, marker_model: str, elsewhere: str) -> str:
    """One line of a results.jsonl: a real record with fields changed, garbage, or a torn record."""
    kind = draw(st.sampled_from(["changed", "changed", "steering", "garbage", "torn"]))
    if kind == "garbage":
        return draw(st.binary(max_size=40)).decode(errors="replace").replace("\n", " ")
    rec = synthetic.record(*draw(st.sampled_from([("torch", "eager"), ("jax", "jit")])))
    if kind == "steering":  # a record that names code to import and places to write
        rec["spec"].update(user_model=marker_model, user_jax_model=marker_model, save_weights=elsewhere,
                           trace_dir=elsewhere, cache_dir=elsewhere, user_dir=elsewhere)
        rec.update(trace_path=elsewhere, weights_path=elsewhere, explain_hlo_path=elsewhere)
    for name, value in draw(st.dictionaries(st.sampled_from(FIELDS), json_value, max_size=4)).items():
        rec[name] = value
    line = _json(rec)
    return line[: draw(st.integers(1, max(1, len(line) - 1)))] if kind == "torn" else line


class Sandbox:
    """A results folder beside a folder its links point into (and a model that leaves a marker when imported):
    what the commands may not touch is checked unchanged after every example."""

    def __init__(self, root: Path) -> None:
        self.root, self.d, self.outside = root, root / "sent", root / "outside"
        self.d.mkdir()
        self.outside.mkdir()
        (self.outside / "precious.txt").write_text("keep")
        self.marker = root / "imported"
        self.model = root / "planted.py"
        self.model.write_text(f"import pathlib\npathlib.Path({str(self.marker)!r}).write_text('ran')\n"
                              "def build(): ...\ndef build_jax(): ...\n")
        self.elsewhere = str(self.outside / "written-here")

    def link(self, names: list[str]) -> None:
        for name in names:
            (self.d / name).symlink_to(self.outside if name == "plots" else self.outside / "precious.txt")

    def untouched(self) -> None:
        assert not self.marker.exists(), "a file a folder names was imported"
        assert sorted(p.name for p in self.outside.iterdir()) == ["precious.txt"], "written outside the folder"
        assert (self.outside / "precious.txt").read_text() == "keep", "written through a link"


def promise(result, args: list[str]) -> None:
    """Exit 0, or 2 with one error line; never a traceback."""
    text = result.output
    assert result.exit_code in (0, 2), (args, text)
    assert result.exception is None or isinstance(result.exception, SystemExit), (args, text)
    assert "Traceback" not in text, (args, text)
    if result.exit_code == 2:
        assert len([ln for ln in text.splitlines() if ln.startswith("error:")]) == 1, (args, text)
    assert "\x1b" not in text, (args, "a terminal escape from the data reached the output")


@pytest.fixture
def failing_runs(monkeypatch):
    """Every run a command would start fails at once (no training), and is counted."""
    started = []

    def run_one(spec, timeout, env=None):
        started.append(spec)
        return for_spec(spec, "failed", error="not run in this test")

    monkeypatch.setattr(runner, "run_one", run_one)
    monkeypatch.setattr(runner, "run_module", lambda *a, **k: started.append(a) or (1, "not run in this test"))
    from twinbench.report import plots

    def no_raster(fig):  # the plots are built from the records; only their rasterising (the slow part) is skipped
        plots.plt.close(fig)
        return b"\x89PNG"

    monkeypatch.setattr(plots, "_png", no_raster)
    return started


@QUICK
@given(data=st.data())
def test_every_reader_of_a_hostile_results_folder_keeps_the_promise(data, failing_runs):
    with tempfile.TemporaryDirectory() as tmp:
        box = Sandbox(Path(tmp))
        lines = data.draw(st.lists(hostile_line(f"{box.model}:build", box.elsewhere), min_size=1, max_size=5))
        (box.d / "results.jsonl").write_text("\n".join(lines) + "\n")
        if data.draw(st.booleans()):
            (box.d / "claims.json").write_text(_json(data.draw(json_value)))
        box.link(data.draw(st.lists(st.sampled_from(["report.html", "report.md", "plots", "summary.md"]),
                                    unique=True, max_size=2)))
        for args in (["diff", str(box.d), str(box.d)], ["report", str(box.d)],
                     ["explain", f"{box.d}:torch/eager", f"{box.d}:jax/jit", "--out", str(box.root / "o")],
                     ["export", "--from", str(box.d), "--out", str(box.root / "e")]):
            promise(CLI.invoke(app, args), args)
        box.untouched()


@QUICK
@given(data=st.data())
def test_a_hostile_claims_settings_file_keeps_the_promise(data, failing_runs):
    with tempfile.TemporaryDirectory() as tmp:
        box = Sandbox(Path(tmp))
        allowed = ["quick", "only", "preset", "plan_steps", "repeats", "device", "model", "jax_model", "trace"]
        settings_ = data.draw(st.one_of(
            json_value,
            st.dictionaries(st.sampled_from(allowed), json_value | st.sampled_from([f"{box.model}:build",
                                                                                   box.elsewhere]), max_size=5)))
        (box.d / "claims-settings.json").write_text(_json(settings_))
        args = ["claims", "--resume", str(box.d), "--plan"]
        promise(CLI.invoke(app, args), args)
        box.untouched()
        assert not failing_runs


@st.composite
def hostile_trace(draw: st.DrawFn) -> bytes:
    """A torch profiler trace: real-looking steps and ops, any of their fields replaced by any JSON value."""
    events = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "ts": 1000.0 * i, "dur": 900.0,
               "tid": 1, "pid": 1} for i in range(4)]
    events += [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1000.0 * i + 10, "dur": 100.0, "tid": 1,
                "pid": 1} for i in range(4)]
    for _ in range(draw(st.integers(0, 3))):
        ev = events[draw(st.integers(0, len(events) - 1))]
        ev[draw(st.sampled_from(["ph", "cat", "name", "ts", "dur", "tid", "args"]))] = draw(json_value)
    top = {"schemaVersion": 1, "traceEvents": events}
    return _json(draw(st.sampled_from([top, events, top["traceEvents"][:1]]))).encode()


@QUICK
@given(trace=hostile_trace())
def test_a_hostile_trace_keeps_the_promise(trace):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "run.json")
        path.write_bytes(trace)
        args = ["explain", str(path)]
        promise(CLI.invoke(app, args), args)


#: a number as a user may type one: huge, negative, inf, nan, empty, 400 digits, a float where an int goes
typed_number = st.one_of(st.integers(min_value=-(10**12), max_value=10**40).map(str),
                         st.sampled_from(["", "inf", "-inf", "nan", "1e308", "1e30", "0", "-1", "1" + "0" * 400,
                                          "0.5", "abc", "  3", "1_000"]),
                         st.floats(allow_nan=True, allow_infinity=True).map(repr))
#: the numeric options of a measuring command, each a count that reaches an allocation or a value a run takes
NUMERIC = ["--steps", "--warmup", "--batch", "--seq", "--layers", "--d-model", "--heads", "--vocab", "--repeats",
           "--lr", "--weight-decay", "--threads", "--timeout", "--devices", "--scan-k", "--slow-input", "--d-ff",
           "--context", "--accum-steps", "--plan-steps"]
#: the options only some commands take (the others' parsers refuse them: a usage message, not the promise tested)
ONLY = {"--repeats": {"compare"}, "--plan-steps": {"compare", "sweep"}}


@settings(max_examples=12, deadline=20_000, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(options=st.dictionaries(st.sampled_from(NUMERIC), typed_number, min_size=1, max_size=3),
       command=st.sampled_from(["compare", "sweep", "advise", "explain"]))
def test_any_number_on_the_command_line_keeps_the_promise(options, command, failing_runs):
    """Exit 0 or 2 with one line, for any numbers in any of the numeric options of every command that runs
    (explain's run mode too): nothing is built for a count no host can keep (``--steps`` 10^40 or ``--repeats``
    10^30 are refused in one line before any spec of them exists). The runs a command would start are faked
    (they fail at once)."""
    with tempfile.TemporaryDirectory() as tmp:
        args = [command, "--framework", "torch", "--strategies", "eager", "--out", str(Path(tmp, "o"))]
        if command == "sweep":
            args += ["--over", "seed=1,2"]
        if command == "explain":
            args = [command, "torch:eager", "jax:jit", "--out", str(Path(tmp, "o"))]
        for flag, value in options.items():
            if command not in ONLY.get(flag, {command}):
                continue
            args += [flag, value]
        result = CLI.invoke(app, args)
        text = result.output
        assert result.exit_code in (0, 1, 2), (args, text)  # 1: the faked runs failed
        assert result.exception is None or isinstance(result.exception, SystemExit), (args, text)
        assert "Traceback" not in text, (args, text)
        if result.exit_code == 2 and "Usage:" not in text:  # the parser's own usage message is its own
            assert len([ln for ln in text.splitlines() if ln.startswith("error:")]) == 1, (args, text)


@QUICK
@given(advice=json_value, claims=json_value, plan=st.sampled_from([None, "0", "1", "1000000000000", "1" + "0" * 13]))
def test_any_side_file_beside_the_records_keeps_the_promise(advice, claims, plan, failing_runs):
    """claims.json and advice.json of any content (typed readers: a field of another type is one line)."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp, "r")
        synthetic.write(d, [synthetic.record("torch", "eager"), synthetic.record("jax", "jit")])
        (d / "advice.json").write_text(_json(advice))
        (d / "claims.json").write_text(_json(claims))
        args = ["report", str(d), *(["--plan-steps", plan] if plan else [])]
        promise(CLI.invoke(app, args), args)


@st.composite
def folder_shape(draw: st.DrawFn) -> list[tuple[str, str]]:
    """What a results folder holds where twinbench reads or writes: (relative path, kind) with kind a FIFO, a
    link out of the folder, a folder, or a file; at any depth, under any of the names twinbench uses."""
    names = ["results.jsonl", ".twinbench.lock", "summary.md", "report.html", "plots", "traces", "claims.json",
             "advice.json", "plots/cumulative.png", "traces/run", "try-0", "try-0/results.jsonl",
             "results.jsonl.unsaved.jsonl", "report.md", "traces/run/deeper/x", "try-0/traces/run", "probes"]
    return draw(st.lists(st.tuples(st.sampled_from(names), st.sampled_from(["fifo", "link", "dir", "file"])),
                         min_size=1, max_size=3, unique_by=lambda t: t[0]))


#: a folder's entries the link scan reads, made small here so a crowd of a few entries outruns it (the real bound,
#: 20,000, costs seconds of files to pass): what is planted past it must still be refused where it is opened
SCAN = 4


@settings(max_examples=10, deadline=20_000, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(shape=folder_shape(), command=st.sampled_from(["compare-out", "compare-resume", "report", "diff", "sweep"]),
       crowd=st.tuples(st.sampled_from(["", "traces", "plots", "try-0"]), st.integers(0, 3 * SCAN)))
def test_any_folder_shape_keeps_the_promise_and_never_waits(shape, command, crowd, failing_runs, monkeypatch):
    """FIFOs and links where twinbench reads or writes, at any depth, among many entries (more than the link scan
    reads): one line or a normal run, never a wait on a FIFO (a blocking open would hang this test) and nothing
    written through a link."""
    from twinbench import folder_io

    monkeypatch.setattr(folder_io, "MAX_ENTRIES", SCAN)
    with tempfile.TemporaryDirectory() as tmp:
        box = Sandbox(Path(tmp))
        synthetic.write(box.d, [synthetic.record("torch", "eager"), synthetic.record("jax", "jit")])
        where, many = crowd
        (box.d / where).mkdir(parents=True, exist_ok=True)
        for i in range(many):
            (box.d / where / f"entry{i:03d}").write_text("")
        for rel, kind in shape:
            p = box.d / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            if p.is_dir() and not p.is_symlink():
                continue
            p.unlink(missing_ok=True)
            if kind == "fifo":
                import os

                os.mkfifo(p)
            elif kind == "link":
                p.symlink_to(box.outside if rel in ("plots", "traces", "try-0") else box.outside / "precious.txt")
            elif kind == "dir":
                p.mkdir()
            else:
                p.write_text("not what twinbench wrote\n")
        base = ["--framework", "torch", "--strategies", "eager"]
        args = {"compare-out": ["compare", *base, "--out", str(box.d)],
                "compare-resume": ["compare", *base, "--resume", str(box.d)],
                "report": ["report", str(box.d)], "diff": ["diff", str(box.d), str(box.d)],
                "sweep": ["sweep", *base, "--over", "seed=1,2", "--out", str(box.d)]}[command]
        result = CLI.invoke(app, args)
        text = result.output
        assert result.exit_code in (0, 1, 2), (args, shape, text)
        assert result.exception is None or isinstance(result.exception, SystemExit), (args, shape, text)
        assert "Traceback" not in text, (args, shape, text)
        box.untouched()
