"""The documentation a newcomer reads: links resolve, every command has a page one link from the README, every
record field is documented, and no text speaks of internal work items or files outside the repository."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

from twinbench.cli import app
from twinbench.record import Record

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "RESULTS.md"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    for target in LINK.findall(page.read_text()):
        if "://" in target:
            continue
        assert (page.parent / target).exists(), f"{page.name}: broken link {target}"


def test_every_command_has_a_page_one_link_from_the_readme():
    readme = (ROOT / "README.md").read_text()
    linked = [ROOT / t for t in LINK.findall(readme) if t.endswith(".md") and "://" not in t]
    text = readme + "".join(p.read_text() for p in linked)
    commands = [c.name or c.callback.__name__ for c in app.registered_commands]
    missing = [c for c in commands if f"twinbench {c}" not in text]
    assert not missing, f"commands without a page linked from README.md: {missing}"


def test_every_record_field_is_documented():
    doc = (ROOT / "docs" / "records.md").read_text()
    assert [f.name for f in fields(Record) if f"`{f.name}`" not in doc] == []


def test_no_internal_work_items_or_outside_files():
    pattern = re.compile(r"issue [0-9]+|shared/")
    hits = []
    for folder in ("src", "docs", "benchmarks", "examples"):
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix in {".py", ".md", ".sh", ".txt"} and "egg-info" not in str(path):
                hits += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in pattern.finditer(path.read_text())]
    hits += [f"README.md: {m.group(0)}" for m in pattern.finditer((ROOT / "README.md").read_text())]
    assert hits == []


def test_every_benchmark_script_has_a_usage_line_and_is_listed_in_results():
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    for script in sorted((ROOT / "benchmarks").glob("*.*")):
        if script.suffix not in {".py", ".sh"}:
            continue
        head = "\n".join(script.read_text().splitlines()[:15])
        assert re.search(rf"(usage|Usage|{script.name})", head), f"{script.name}: no usage line"
        assert script.name in results, f"{script.name} is not listed in benchmarks/RESULTS.md"


def test_layout_names_every_package_and_module_and_only_ones_that_exist():
    """docs/layout.md is the map a reader starts from: it names every package and top-level module of
    src/twinbench, and every file or folder it names under a package exists."""
    doc = (ROOT / "docs" / "layout.md").read_text()
    tree = doc[doc.index("```\nsrc/twinbench/"):]
    tree = tree[:tree.index("```", 4)]
    pkg = ROOT / "src" / "twinbench"
    tops = sorted(p.name + ("/" if p.is_dir() else "") for p in pkg.iterdir()
                  if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and p.name != "__init__.py"))
    assert [t for t in tops if not re.search(rf"(^|\s){re.escape(t)}", tree, re.M)] == []
    current = None
    for line in tree.splitlines()[1:]:
        head = re.match(r"\s{2}(\S+/)\s", line)
        if head and (pkg / head.group(1)).is_dir():
            current = pkg / head.group(1)
        elif re.match(r"\s{2}\S|\S", line):  # another top-level entry (or one outside src/twinbench/)
            current = None
        if current is None:
            continue
        for name in re.findall(r"(?<![\w/.])((?:[a-z_]+/)*[a-z_]+\.py)\b", line):  # module.py, folder/module.py
            assert (current / name).exists(), f"docs/layout.md names {current.name}/{name}, which does not exist"


def test_every_repository_path_the_readme_and_the_layout_name_exists():
    """A path in backquotes under src/, tests/, benchmarks/, docs/ or examples/ (README.md, docs/layout.md) is a
    file or folder of the repository; so is each top-level entry of the layout's tree (tests/, examples/byo/)."""
    top = ("src/", "tests/", "benchmarks/", "docs/", "examples/")
    missing = []
    for page in (ROOT / "README.md", ROOT / "docs" / "layout.md"):
        text = page.read_text()
        named = [m.rstrip(".,:;)") for m in re.findall(r"`([^`\s]+)`", text)]
        named += re.findall(r"^((?:tests|benchmarks|examples)/\S*)", text, re.M)  # the tree's own lines
        for path in (re.split(r"[:(]", n)[0] for n in named if n.startswith(top)):
            if not (ROOT / path).exists() and not (any(c in path for c in "*?[") and list(ROOT.glob(path))):
                missing.append(f"{page.relative_to(ROOT)}: {path}")
    assert missing == []
