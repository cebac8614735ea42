"""A results folder another twinbench is writing is refused with the folder's other checks, before anything is
written into it: a claims run's settings and its probes included (docs/bad-input.md, promise 1). No run starts."""

from __future__ import annotations

import os

from typer.testing import CliRunner

from tests.test_hostile import one_line_error
from twinbench import results_dir, runner
from twinbench.cli import app
from twinbench.record import for_spec

CLI = CliRunner()



def test_a_locked_out_is_refused_before_anything_is_written_into_it(tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(runner, "run_one", lambda spec, *a, **k: started.append(spec) or
                        for_spec(spec, "failed", error="not run here"))
    monkeypatch.setattr(runner, "run_module", lambda *a, **k: started.append(a) or (1, "not run here"))
    out = tmp_path / "o"
    out.mkdir()
    with runner.out_lock(out):  # another twinbench writing there now
        for args in (["claims", "--quick", "--only", "C21", "--out", str(out)],  # probes only
                     ["claims", "--quick", "--only", "C1", "--out", str(out)],
                     ["compare", "--preset", "tiny", "--strategies", "torch:eager", "--out", str(out)]):
            line = one_line_error(CLI.invoke(app, args))
            assert f"--out {out}: another twinbench (pid {os.getpid()}) is writing there now" in line, (args, line)
            assert sorted(os.listdir(out)) == [".twinbench.lock"], (args, os.listdir(out))
        assert results_dir.lock_holder(out) == str(os.getpid())
    assert not started
    assert results_dir.lock_holder(out) is None


def test_what_a_lock_file_says_is_printed_as_text(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / ".twinbench.lock").write_text("\x1b[2Jerror: spoofed\n")
    with runner.out_lock(out):
        pass  # a lock file no one holds is taken: what it said is not read
    fd = os.open(out / ".twinbench.lock", os.O_RDWR)
    os.pwrite(fd, b"\x1b[31m12\n", 0)
    import fcntl

    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        line = one_line_error(CLI.invoke(app, ["compare", "--preset", "tiny", "--strategies", "torch:eager",
                                          "--out", str(out)]))
    finally:
        os.close(fd)
    assert "\x1b" not in line and "(pid [31m12" in line, line
