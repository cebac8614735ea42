"""A file named to ``explain`` is data too: a JSON token no profiler writes is refused in one line before the
streaming parser holds it (and re-scans it on every read); an op name is cut in every line printed; a compiled HLO
text over its cap is refused before any trace is parsed; an interrupted explain of traces names no folder it
never wrote (docs/bad-input.md, promises 3, 7 and 10). In process, with the caps made small: nothing here is big."""

from __future__ import annotations

import gzip
import json
import resource
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.explain.typed import plain
from tests.test_hostile import one_line_error
from twinbench import runner
from twinbench.cli import app
from twinbench.explain import files, gap, trace_file

CLI = CliRunner()
FIX = Path(__file__).parent / "explain" / "fixtures"


def _trace(name: str, n: int = 4) -> bytes:
    ev = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "ts": 1000.0 * i, "dur": 900.0,
           "tid": 1} for i in range(n)]
    ev += [{"ph": "X", "cat": "cpu_op", "name": name if i == 1 else "aten::mm", "ts": 1000.0 * i + 10,
            "dur": 100.0, "tid": 1} for i in range(n)]
    return json.dumps({"schemaVersion": 1, "traceEvents": ev}).encode()



@pytest.fixture
def small_token_cap(monkeypatch):
    monkeypatch.setattr(files, "MAX_TOKEN", 1 << 20, raising=False)
    monkeypatch.setattr(files, "JSON_READ", 1 << 16, raising=False)  # several reads per token, as a longer one would take


@pytest.mark.parametrize("name", ["x" * (3 << 20), '\\"' * (3 << 19)], ids=["plain", "escaped-quotes"])
@pytest.mark.parametrize("gz", [False, True])
def test_a_string_no_profiler_writes_is_refused_in_one_line(tmp_path, small_token_cap, name, gz):
    data = _trace(name)
    path = tmp_path / ("long.json.gz" if gz else "long.json")
    path.write_bytes(gzip.compress(data, 1) if gz else data)
    line = one_line_error(CLI.invoke(app, ["explain", str(path)]))
    assert f"{path}: holds a string or number over 1 MiB long" in line, line


def test_names_under_the_cap_are_read_and_cut_in_every_line_printed(tmp_path, small_token_cap):
    path = tmp_path / "named.json"
    path.write_bytes(_trace("y" * (600 << 10)))  # under the cap, and 'other' enough to be named in a note
    result = CLI.invoke(app, ["explain", str(path)], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "largest 'other'" in result.output
    assert result.output.count("y") < 400  # each place the name is printed shows a short head of it


def test_a_fixture_trace_reads_the_same_through_the_token_count(monkeypatch):
    """The count's quotes and chunk seams change nothing a real trace gives (reads of 64 KiB: many seams)."""
    path = str(FIX / "pair_lm_torch.json.gz")
    whole = plain(gap.explain_trace(path, None, None, None, None, None))
    monkeypatch.setattr(files, "JSON_READ", 1 << 16, raising=False)
    seams = plain(gap.explain_trace(path, None, None, None, None, None))
    assert seams["trace"] == whole["trace"] and seams["cells"] == whole["cells"]


def test_an_hlo_text_over_its_cap_is_refused_before_the_trace_is_read(tmp_path, monkeypatch):
    hlo = tmp_path / "big.hlo.txt"
    with open(hlo, "wb") as f:
        f.truncate(2 * 2**30)  # sparse: 2 GB of NUL bytes on no disk
    read = []
    monkeypatch.setattr(trace_file, "read", lambda *a, **k: read.append(a) or pytest.fail("the trace was parsed"))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    line = one_line_error(CLI.invoke(app, ["explain", str(FIX / "pair_lm_jax.xplane.pb.gz"), "--hlo", str(hlo)]))
    assert f"{hlo}: 2048 MiB, over the cap on a HLO text's size" in line and not read
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 200 * 2**10  # KiB: nothing was held


def test_an_interrupted_explain_of_traces_names_no_folder(tmp_path, monkeypatch):
    def interrupted(*a, **k):
        raise runner.Interrupted()

    monkeypatch.setattr(gap, "explain_trace", interrupted)
    monkeypatch.chdir(tmp_path)
    line = one_line_error(CLI.invoke(app, ["explain", str(FIX / "pair_lm_torch.json.gz")]), code=130)
    assert line == "error: interrupted" and not (tmp_path / "runs").exists()
