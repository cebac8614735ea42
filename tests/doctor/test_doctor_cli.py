"""`twinbench doctor` as a user meets it: bad input, a hanging script, --steps, script arguments, watch()."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def doctor(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "twinbench.cli", "doctor", *args], capture_output=True,
                          text=True, timeout=timeout)


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_missing_script(tmp_path: Path) -> None:
    line = one_line_error(doctor(str(tmp_path / "nope.py")))
    assert "nope.py" in line and "no such file" in line


def test_not_python(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("these are my notes about training: lr 3e-4, batch 32\n")
    line = one_line_error(doctor(str(notes)))
    assert "not a Python script" in line


def test_bad_flags(tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text("print('hi')\n")
    assert "--steps" in one_line_error(doctor(str(script), "--steps", "0"))
    assert "--timeout" in one_line_error(doctor(str(script), "--timeout", "-1"))


def test_hanging_script_stops_at_timeout(tmp_path: Path) -> None:
    script = tmp_path / "hang.py"
    script.write_text("import time\nwhile True:\n    time.sleep(0.05)\n")
    proc = doctor(str(script), "--timeout", "3", timeout=60)
    assert proc.returncode == 2
    assert "did not finish within --timeout 3 s" in proc.stderr
    assert "--steps" in proc.stderr  # says what to do about it


def test_a_script_killed_by_a_signal_is_not_a_clean_run(tmp_path: Path) -> None:
    """A script that dies by a signal after some steps (a crash in native code) is said so in one line, after
    the findings of the steps seen, and exits 2: not 0, as a run that ended."""
    script = tmp_path / "crash.py"
    script.write_text("import os, signal, time\nimport torch\nm = torch.nn.Linear(8, 8)\n"
                      "opt = torch.optim.SGD(m.parameters(), lr=0.1)\nfor i in range(400):\n"
                      "    m(torch.randn(4, 8)).sum().backward(); opt.step(); opt.zero_grad(); time.sleep(0.01)\n"
                      "    if i == 300:\n        os.kill(os.getpid(), signal.SIGSEGV)\n")
    proc = doctor(str(script))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "ended early, killed by SIGSEGV" in last and "the findings above cover the steps seen" in last


def test_script_that_ignores_sigterm_is_killed(tmp_path: Path) -> None:
    from twinbench.doctor import DoctorError, run_doctor

    script = tmp_path / "stubborn.py"
    script.write_text("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                      "while True:\n    time.sleep(0.05)\n")
    with pytest.raises(DoctorError, match="did not finish within --timeout 2 s and did not stop"):
        run_doctor(script, timeout=2, grace_s=1)


TRAIN = """\
import json, os, sys
import helper  # a sibling module: importing it must not write __pycache__ next to the script
import jax, jax.numpy as jnp

out = sys.argv[sys.argv.index("--out") + 1]
with open(out, "w") as f:
    json.dump({"argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0], "name": __name__}, f)
step = jax.jit(lambda w: w * helper.DECAY)
w = jnp.ones(3)
n = -1
try:
    for n in range(1000):
        w = step(w)
finally:  # the doctor ends the script with an exception, so finally blocks still run
    with open(out + ".last", "w") as f:
        f.write(str(n))
"""


def test_steps_args_folder(tmp_path: Path) -> None:
    project, outside = tmp_path / "project", tmp_path / "outside"
    project.mkdir()
    outside.mkdir()
    (project / "train.py").write_text(TRAIN)
    (project / "helper.py").write_text("DECAY = 0.5\n")
    before = sorted(p.name for p in project.rglob("*"))
    out, report = outside / "seen.json", outside / "report.json"
    proc = doctor(str(project / "train.py"), "--steps", "5", "--json", str(report), "--", "--out", str(out),
                  "--flag")
    serious = [f["id"] for f in json.loads(report.read_text())["findings"] if f["severity"] != "info"]
    assert serious in ([], ["cpu-oversubscribed"]), proc.stdout  # a machine busy with others' work warns
    assert proc.returncode == (1 if serious else 0), proc.stdout + proc.stderr
    seen = json.loads(out.read_text())
    assert seen["argv"][1:] == ["--out", str(out), "--flag"] and seen["argv"][0].endswith("train.py")
    assert Path(seen["cwd"]) == project.resolve() and Path(seen["path0"]) == project.resolve()
    assert seen["name"] == "__main__"
    assert (outside / "seen.json.last").read_text() == "4"  # stopped right after the 5th step
    doc = json.loads(report.read_text())
    assert doc["steps"] == 5 and doc["stopped_early"] and doc["step_fn"] == "<lambda>"
    assert sorted(p.name for p in project.rglob("*")) == before  # nothing written in the script's folder
    assert "5 steps" in proc.stdout and "stopped at --steps" in proc.stdout


WATCH = """\
import json
from functools import partial
import jax, jax.numpy as jnp
import twinbench

@partial(jax.jit, donate_argnums=0)  # jitted before watch(): adopted from this module's globals
def step(w, x):
    loss, g = jax.value_and_grad(lambda w: jnp.mean((x @ w) ** 2))(w)
    return w - 0.1 * g, loss

w, x = jnp.ones((8, 1)), jnp.ones((4, 8))
with twinbench.watch(report=False) as doc:
    for i in range(6):
        w, loss = step(w, x)
        print(float(loss))
with twinbench.watch(steps=3, report=False) as quiet:
    losses = []
    for i in range(100):
        w, loss = step(w, x)
        losses.append(loss)
print(json.dumps({"first": [f.id for f in doc.findings], "steps": doc.observations.steps,
                  "second": [f.id for f in quiet.findings], "steps2": quiet.observations.steps,
                  "restored": type(step).__name__}))
"""


def test_watch_gives_the_same_findings(tmp_path: Path) -> None:
    script = tmp_path / "nb.py"
    script.write_text(WATCH)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "jax-host-sync" in got["first"] and got["steps"] == 6
    assert "jax-host-sync" not in got["second"] and got["steps2"] == 3  # steps=3 ended the loop cleanly
    assert got["restored"] == "PjitFunction"  # the adopted global is put back after the block


def test_import_twinbench_stays_cheap() -> None:
    code = "import sys, twinbench; print(any(m in sys.modules for m in ('jax', 'torch', 'twinbench.doctor')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_no_step_found_says_what_it_looked_for(tmp_path: Path) -> None:
    script = tmp_path / "loop.py"
    script.write_text("total = 0\nfor i in range(1000):\n    total += i * i\nprint(total)\n")
    proc = doctor(str(script))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = " ".join(proc.stderr.split())
    assert "no training step found" in err and "Optimizer.step" in err and "loss.backward()" in err
    assert "jax.grad/value_and_grad" in err and "twinbench.doctor.step()" in err and "twinbench.watch()" in err
    assert "no findings" not in proc.stdout


def test_a_loop_trained_in_child_processes_is_said_to_be_there(tmp_path: Path) -> None:
    """Hogwild-style training (PyTorch examples' mnist_hogwild: the loop runs in processes the script starts):
    the doctor watches its own process only, and says the loop ran in the children, by the function they ran,
    instead of asking the user to mark a step they cannot mark there."""
    (tmp_path / "work.py").write_text("def train(rank):\n    return sum(i * i for i in range(10_000))\n")
    script = tmp_path / "hogwild.py"
    script.write_text("import multiprocessing as mp\nfrom work import train\n\nif __name__ == '__main__':\n"
                      "    mp.set_start_method('spawn', force=True)\n"
                      "    ps = [mp.Process(target=train, args=(r,)) for r in range(2)]\n"
                      "    [p.start() for p in ps]\n    [p.join() for p in ps]\n")
    proc = doctor(str(script))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = " ".join(proc.stderr.split())
    assert "no training step found" in err and "it started 2 Python process(es) (train x2)" in err, err
    assert "in the script's own process" in err and "twinbench.doctor.step()" not in err
    from twinbench.doctor.report import no_step_message

    loaders = {"frameworks": ["torch"], "wall_s": 1.0,  # a DataLoader's workers load batches: not the loop
               "info": {"child_processes": {"torch.utils.data._utils.worker:_worker_loop": 2}}}
    said = no_step_message(loaders, "s.py") or ""
    assert "twinbench.doctor.step()" in said and "Python process" not in said


def test_trace_folder_checked_before_the_run(tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text("raise SystemExit('must not run')\n")
    taken = tmp_path / "taken.txt"
    taken.write_text("a file, not a folder\n")
    line = one_line_error(doctor(str(script), "--trace", str(taken)))
    assert line.startswith("error: --trace") and "not a folder" in line, line
