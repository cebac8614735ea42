"""benchmarks/tpu/setup.sh, sourced twice into a shell with a stub ``python3`` first on PATH (no TPU VM, no package
index here): the shell keeps its own variables and gets no function of the script's; the second time nothing is
installed, so pip's "Target directory ... already exists" screen never shows.

The stub answers ``python3 -m pip install --target DIR ...`` as pip does with ``--target``: it puts each package in
DIR (a NAME-VERSION.dist-info beside it), and for a package whose folder is there already, without ``--upgrade``,
prints pip's warning and leaves it. Any other ``python3`` call runs the real interpreter (``-c``: a one-line stand-in
for the import check, which needs JAX on a TPU).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETUP = ROOT / "benchmarks" / "tpu" / "setup.sh"

STUB = f"""#!{sys.executable}
import os, re, sys
args = sys.argv[1:]
if args[:2] == ["-m", "pip"]:
    with open(os.environ["PIP_LOG"], "a") as log:
        log.write(" ".join(args) + "\\n")
    target = args[args.index("--target") + 1]
    takes_value = {{"--target", "--index-url", "--find-links"}}
    names = [a for i, a in enumerate(args[3:], 3) if not a.startswith("-") and args[i - 1] not in takes_value]
    for name in names:
        if name.endswith(".whl"):
            dist, version = os.path.basename(name).split("-")[:2]
        else:
            dist, version = re.sub(r"[-.]+", "_", name), "1.0"
        folder = os.path.join(target, dist.lower())
        if os.path.exists(folder) and "--upgrade" not in args:
            print(f"WARNING: Target directory {{folder}} already exists. Specify --upgrade to force replacement.")
            continue
        os.makedirs(folder, exist_ok=True)
        info = os.path.join(target, f"{{dist}}-{{version}}.dist-info")
        os.makedirs(info, exist_ok=True)
        with open(os.path.join(info, "METADATA"), "w") as f:
            f.write(f"Metadata-Version: 2.1\\nName: {{name if not name.endswith('.whl') else dist}}\\n"
                    f"Version: {{version}}\\n")
    sys.exit(0)
if args[:1] == ["-c"]:
    print("twinbench on [stub TPU]")
    sys.exit(0)
os.execv(sys.executable, [sys.executable, *args])
"""


def test_sourced_twice_it_keeps_the_shells_variables_and_installs_nothing_again(tmp_path):
    bin_dir, project, site = tmp_path / "bin", tmp_path / "project", tmp_path / "site"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(STUB)
    (bin_dir / "python3").chmod(0o755)
    (project / ".whl-tpu").mkdir(parents=True)
    (project / ".whl-tpu" / "torchax-0.0.13-py3-none-any.whl").write_text("")
    log = tmp_path / "pip.log"
    script = f"""
        S=mine INDEX=my-index LINKS=my-links PIP=my-pip
        source {SETUP} > {tmp_path}/first.out 2>&1 || echo "first failed"
        echo "--- second" >> {log}
        source {SETUP} > {tmp_path}/second.out 2>&1 || echo "second failed"
        echo "vars: $S $INDEX $LINKS $PIP"
        echo "functions: $(declare -F | grep -c twinbench)"
        echo "path: $PYTHONPATH"
    """
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "TWINBENCH_SITE": str(site),
           "PIP_LOG": str(log), "PYTHONPATH": "/vm/jax"}
    proc = subprocess.run(["bash", "-c", script], cwd=project, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "failed" not in proc.stdout, proc.stdout + proc.stderr
    lines = dict(line.split(": ", 1) for line in proc.stdout.splitlines() if ": " in line)
    assert lines["vars"] == "mine my-index my-links my-pip"
    assert lines["functions"] == "0"
    assert lines["path"] == f"/vm/jax:{project}/src:{site}"  # once, after what the VM had
    first, second = log.read_text().split("--- second\n")
    assert len(first.splitlines()) == 3  # the wheels, the index's packages, torch
    assert "torchax-0.0.13" in first and "typing-extensions" in first and "torch --find-links" in first
    assert second == ""  # everything is there: pip is not called
    out = (tmp_path / "first.out").read_text() + (tmp_path / "second.out").read_text()
    assert "already exists" not in out and out.count("twinbench on [stub TPU]") == 2
