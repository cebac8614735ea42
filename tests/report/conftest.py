"""Fixtures of the report tests: a headless Chromium (installed from Debian's packages where missing) and
one real traced tiny compare run shared by the end-to-end tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # synthetic.py

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--mute-audio"]


def _find() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="session")
def chromium() -> str:
    """Path of a headless-capable Chromium; installs Debian's `chromium` package once if it is missing."""
    found = _find()
    if found:
        return found
    if not shutil.which("apt-get"):
        pytest.skip("chromium is not installed and apt-get is not available to install it")
    prefix = [] if os.geteuid() == 0 else ["sudo", "-n"]
    if prefix and not shutil.which("sudo"):
        pytest.skip("chromium is not installed and installing it needs root (no sudo)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        subprocess.run([*prefix, "apt-get", "update", "-q"], env=env, check=True, capture_output=True, timeout=600)
        subprocess.run([*prefix, "apt-get", "install", "-y", "-q", "chromium"], env=env, check=True,
                       capture_output=True, timeout=1200)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as e:
        tail = getattr(e, "stderr", b"") or b""
        pytest.skip(f"could not install chromium with apt-get: {e} {tail.decode(errors='replace')[-300:]}")
    found = _find()
    if not found:
        pytest.skip("apt-get install chromium succeeded but no chromium binary is on PATH")
    return found


def run_chromium(chromium: str, tmp: Path, *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    """One headless Chromium call with a throw-away profile."""
    return subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp / 'chromium-profile'}", *args],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def traced_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real `twinbench compare --preset tiny --trace` of torch eager and JAX jit (one process per run)."""
    out = tmp_path_factory.mktemp("traced")
    cmd = [sys.executable, "-m", "twinbench.cli", "compare", "--preset", "tiny", "--strategies", "eager,jit",
           "--steps", "6", "--warmup", "2", "--out", str(out), "--trace", str(out / "traces")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:] + proc.stdout[-2000:]
    return out
