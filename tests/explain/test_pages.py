"""explain's pages say the how and point to the reference: each under 300 lines, and no command on them asks for
``--hlo`` where it explains a folder ``twinbench doctor --trace`` wrote (the doctor keeps the compiled step,
``step.hlo.txt``, beside its trace, and explain finds it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = ("docs/explain.md", "docs/explain-reference.md", "docs/explain-examples.md")


@pytest.mark.parametrize("page", PAGES)
def test_each_explain_page_is_under_300_lines(page: str) -> None:
    assert len((ROOT / page).read_text().splitlines()) <= 300


@pytest.mark.parametrize("page", PAGES)
def test_no_hlo_flag_for_a_doctor_folder(page: str) -> None:
    text = (ROOT / page).read_text()
    doctor_dirs = set(re.findall(r"twinbench doctor \S+ --trace (\S+)", text)) | {"/tmp/tr-jax", "traces/flax"}
    stale = [ln for ln in text.splitlines() if ln.strip().startswith("twinbench explain") and "--hlo" in ln
             and any(d in ln for d in doctor_dirs)]
    assert stale == []
