"""Fixtures of the report tests: a headless Chromium (installed from Debian's packages where missing) and how
to read the page it rendered."""

from __future__ import annotations

import os
import re
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


PROBE = ("<script>window.addEventListener('load',()=>{for(const i of document.images){"
         "i.setAttribute('data-natural-width',String(i.naturalWidth));}"
         "document.body.setAttribute('data-probe','loaded');});</script>")


def rendered_dom(chromium: str, html_path: Path, tmp: Path) -> str:
    """The DOM after load, with each <img> marked by its decoded naturalWidth (a probe in a copy of the page)."""
    probe = tmp / "probe.html"
    probe.write_text(html_path.read_text().replace("</body>", PROBE + "</body>"))
    proc = run_chromium(chromium, tmp, "--virtual-time-budget=10000", "--dump-dom", probe.as_uri())
    assert 'data-probe="loaded"' in proc.stdout, proc.stderr[-1500:]
    return proc.stdout


def decoded_plots(dom: str) -> dict[str, int]:
    out = {}
    for tag in re.findall(r"<img\b[^>]*>", dom):
        pid = re.search(r'data-plot-img="([a-z-]+)"', tag)
        width = re.search(r'data-natural-width="(\d+)"', tag)
        if pid:
            out[pid.group(1)] = int(width.group(1)) if width else 0
    return out
