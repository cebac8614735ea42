"""The report page rendered by a real browser (headless Chromium): every plot is in the rendered DOM and
every image decoded; a screenshot of the page is not blank."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import synthetic
from conftest import run_chromium

from twinbench.report import page

PROBE = ("<script>window.addEventListener('load',()=>{for(const i of document.images){"
         "i.setAttribute('data-natural-width',String(i.naturalWidth));}"
         "document.body.setAttribute('data-probe','loaded');});</script>")
ALL_PLOTS = {"cumulative", "step-vs-batch", "step-vs-seq", "compile-vs-depth", "scaling", "dp-payoff", "input-stall", "loss"}


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


@pytest.mark.slow  # headless Chromium (installed with apt-get on first use)
def test_every_plot_renders_in_chromium(chromium: str, tmp_path: Path) -> None:
    synthetic.write(tmp_path, synthetic.full_set())
    html_path, _, _ = page.write(tmp_path)
    dom = rendered_dom(chromium, html_path, tmp_path)
    plots = decoded_plots(dom)
    assert set(plots) == ALL_PLOTS
    assert all(w > 100 for w in plots.values()), plots  # decoded images, not broken ones (width 0)
    assert set(re.findall(r'<figure data-plot="([a-z-]+)"', dom)) == ALL_PLOTS


@pytest.mark.slow  # headless Chromium and a real traced run
def test_screenshot_of_a_real_run_is_not_blank(chromium: str, traced_run: Path, tmp_path: Path) -> None:
    html_path = traced_run / "report.html"  # written by compare itself
    dom = rendered_dom(chromium, html_path, tmp_path)
    plots = decoded_plots(dom)
    assert {"cumulative", "loss"} <= set(plots) and all(w > 100 for w in plots.values()), plots
    shot = tmp_path / "shot.png"
    proc = run_chromium(chromium, tmp_path, f"--screenshot={shot}", "--window-size=1280,1800", html_path.as_uri())
    assert shot.exists(), proc.stderr[-1500:]
    from PIL import Image

    img = Image.open(shot).convert("L")
    assert img.size == (1280, 1800)
    lo, hi = img.getextrema()
    assert hi - lo > 100  # text and plots on a white page, not a blank or error page
    dark = sum(img.histogram()[:128]) / (img.width * img.height)
    assert 0.005 < dark < 0.5, dark


def test_markdown_twin_links_plot_files_beside_it(traced_run: Path) -> None:
    md = (traced_run / "report.md").read_text()
    for pid in re.findall(r"\(plots/([a-z-]+)\.png\)", md):
        assert (traced_run / "plots" / f"{pid}.png").stat().st_size > 1000
    assert "(plots/cumulative.png)" in md
