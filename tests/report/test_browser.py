"""The report page rendered by a real browser (headless Chromium): every plot is in the rendered DOM and
every image decoded (a real run's page and its screenshot: tests/report/test_trace.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import synthetic
from conftest import decoded_plots, rendered_dom

from twinbench.report import page

ALL_PLOTS = {"cumulative", "step-vs-batch", "step-vs-seq", "compile-vs-depth", "scaling", "dp-payoff", "input-stall", "loss"}


@pytest.mark.slow  # headless Chromium (installed with apt-get on first use)
def test_every_plot_renders_in_chromium(chromium: str, tmp_path: Path) -> None:
    synthetic.write(tmp_path, synthetic.full_set())
    html_path, _, _ = page.write(tmp_path)
    dom = rendered_dom(chromium, html_path, tmp_path)
    plots = decoded_plots(dom)
    assert set(plots) == ALL_PLOTS
    assert all(w > 100 for w in plots.values()), plots  # decoded images, not broken ones (width 0)
    assert set(re.findall(r'<figure data-plot="([a-z-]+)"', dom)) == ALL_PLOTS
