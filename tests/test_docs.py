"""The documentation a newcomer reads: links resolve, every command has a page one link from the README, every
record field is documented, and no text speaks of internal work items or files outside the repository."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer

from twinbench.cli import app
from twinbench.record import FLAT, Record, typed

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "RESULTS.md",
         *sorted((ROOT / "benchmarks" / "results").glob("*.md"))]


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
    top = [f for f in Record.__struct_fields__ if f not in {s for s, _ in FLAT.values()}]
    names = [*FLAT, *top, *(f"{s}.{f}" for s, f in FLAT.values())]  # each flat name and its place in sections
    assert [n for n in names if f"`{n}`" not in doc] == []


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


def _code_commands(text: str) -> list[tuple[int, str]]:
    """(line number, command) of every ``twinbench ...`` line in a code block (fenced, or indented four spaces)
    of a Markdown page, continuation lines (``\\``) joined; a ``$ `` prompt, a path to the executable and a
    ``time`` in front are allowed."""
    lines, found, fenced, i, indented = text.splitlines(), [], False, 0, False
    while i < len(lines):
        line = lines[i]
        # an indented block starts after a blank line: an indented line that continues a paragraph or a list
        # item is prose; in a fenced block, a command starts near the margin (a deeper line is a tree or output)
        indented = line.startswith("    ") and (indented or i == 0 or not lines[i - 1].strip())
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif ((fenced and len(line) - len(line.lstrip()) <= 4) or (not fenced and indented)) and re.match(
                r"(\$\s+)?(\S*/)?(time\s+(-v\s+)?)?(\S*/)?twinbench\s", line.strip()):
            start, command = i, line.strip()
            while command.endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command[:-1] + " " + lines[i].strip()
            found.append((start + 1, command))
        i += 1
    return found


def test_the_command_finder_sees_blocks_prompts_and_continuations():
    text = ("```bash\ntwinbench compare --preset tiny  # a comment\n$ twinbench diff a b \\\n  --fail-above 5\n```\n"
            "prose naming twinbench compare, not code\n\n    /usr/bin/time -v .venv/bin/twinbench claims --quick\n"
            "1. a list item whose text goes on\n    twinbench compare is prose here\n"
            "```\nsrc/\n          twinbench in a tree is prose\n```\n")
    assert _code_commands(text) == [(2, "twinbench compare --preset tiny  # a comment"),
                                    (3, "$ twinbench diff a b  --fail-above 5"),
                                    (8, "/usr/bin/time -v .venv/bin/twinbench claims --quick")]


def _parse(command: str) -> str:
    """"" when ``command`` parses against the CLI (its command exists, every option is one of it and takes the
    value given, nothing required is missing), else the parser's message. Nothing runs: click's own parser."""
    tokens = shlex.split(command.removeprefix("$ "), comments=True)
    args = tokens[next(k for k, t in enumerate(tokens) if t.rsplit("/", 1)[-1] == "twinbench") + 1:]
    group = typer.main.get_command(app)
    if not args or args[0] not in group.commands:
        return f"no command {args[:1]}"
    try:
        group.commands[args[0]].make_context(args[0], args[1:])
    except Exception as e:  # click's UsageError, BadParameter, MissingParameter: what a user would be told
        message = e.format_message() if hasattr(e, "format_message") else ""
        return message or f"{type(e).__name__} {e}"
    return ""


def test_the_parser_check_catches_what_a_user_would_be_told():
    assert _parse("twinbench compare --preset tiny --strategies eager,jit --layers 2") == ""
    assert "No such option" in _parse("twinbench compare --no-such-flag")
    assert "--device" in _parse("twinbench predict --preset tiny")  # a required option left out
    assert "valid integer" in _parse("twinbench compare --layers two")
    assert _parse("twinbench frobnicate") == "no command ['frobnicate']"


@pytest.mark.parametrize("page", PAGES[:-1], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_documented_command_parses(page):
    """Every ``twinbench ...`` line of a code block in README.md and docs/ is a command the CLI accepts as
    written: a user who copies it gets a run, not a usage error."""
    bad = [f"{page.name}:{n}: {cmd[:90]} -> {why}" for n, cmd in _code_commands(page.read_text())
           if (why := _parse(cmd))]
    assert bad == []


def test_every_count_of_the_claims_is_the_registrys():
    """"C1-CN" (and "all N verdicts") in the README, the docs and the CLI's help say as many claims as the
    registry holds; a range of claims other than all of them is one of the registry's groups."""
    from itertools import groupby

    from twinbench.claims.core import load_all

    claims = load_all()
    n = len(claims)
    ids = [int(c[1:]) for c in claims]
    groups = {(min(g), max(g)) for _, g in ((k, [int(c.id[1:]) for c in v])
                                            for k, v in groupby(claims.values(), key=lambda c: c.runs.__module__))}
    assert ids == list(range(1, n + 1)) and len(groups) > 1
    texts = {p.relative_to(ROOT): p.read_text() for p in PAGES[:-1]}
    texts.update({p.relative_to(ROOT): p.read_text() for p in (ROOT / "src" / "twinbench" / "cli").glob("*.py")})
    wrong = [f"{name}: {m.group(0)}" for name, text in texts.items()
             for m in re.finditer(r"\bC1\s*(?:-|–|\.\.)\s*C(\d+)\b|\ball (\d+) (?:verdicts|claims)\b", text)
             if (m.group(1) and int(m.group(1)) != n and (1, int(m.group(1))) not in groups)
             or (m.group(2) and int(m.group(2)) != n)]
    assert wrong == []


def test_the_presets_table_is_the_registry():
    """docs/getting-started.md's table of presets has one row per registered preset, with its shape."""
    from twinbench.spec import PRESETS

    doc = (ROOT / "docs" / "getting-started.md").read_text()
    rows = re.findall(r"^\| `([\w.-]+)` \| (\w+) \| (\d+) \| (\d+) \| (\d+) \| ([\d,]+) \| (\d+) x (\d+) \|", doc, re.M)
    table = {r[0]: (r[1], *(int(v.replace(",", "")) for v in r[2:])) for r in rows}
    registry = {name: (m.family, m.layers, m.d_model, m.heads, m.vocab, t.batch, t.seq)
                for name, (m, t) in PRESETS.items()}
    assert table == registry


def test_device_names_a_device_in_every_command():
    """``--device NAME`` is a device to plan or predict for wherever it is shown; ``--devices N`` a count; explain's
    index into a trace's devices is ``--device-index`` (its earlier spelling ``--device`` still parses, hidden)."""
    group = typer.main.get_command(app)
    shown = {name: {o for p in cmd.params if not p.hidden for o in p.opts if o.startswith("--device")}
             for name, cmd in group.commands.items()}
    assert set().union(*shown.values()) == {"--device", "--devices", "--device-index"}, shown
    assert [c for c, opts in shown.items() if "--device-index" in opts] == ["explain"]
    for command in (c for c, opts in shown.items() if "--device" in opts):  # a name, as predict's datasheets
        assert _parse(f"twinbench {command} --device h200") == "", command
    assert "integer" in _parse("twinbench compare --devices h200")
    ctx = group.commands["explain"].make_context("explain", ["rank0.json.gz", "--device", "1"])
    assert ctx.params["device_alias"] == 1 and ctx.params["device_index"] is None


def test_the_strategies_named_in_the_docs_are_the_registrys():
    """docs/comparing.md names every registered strategy and modifier (own-model.md the ones only a user's model
    runs), and every `+modifier` the docs name is registered."""
    from twinbench.strategies.registry import MODIFIERS, REGISTRY, USER_ONLY

    comparing = (ROOT / "docs" / "comparing.md").read_text()
    own = (ROOT / "docs" / "own-model.md").read_text()
    assert [n for (_, n) in REGISTRY if f"`{n}" not in (own if n in USER_ONLY else comparing)] == []
    assert [m for m in MODIFIERS if f"+{m}" not in comparing] == []
    named = {m for page in PAGES[:-1] for m in re.findall(r"`[\w:-]*\+([a-z][\w-]*)", page.read_text())}
    assert sorted(named - set(MODIFIERS)) == []


def test_the_readme_answers_the_three_questions_on_its_first_screen():
    """README.md is at most 150 lines, and its first 60 hold the set-up (make install and the line that puts
    twinbench on the PATH, make demo, make test: what CI runs) and a command for each question users come with: a
    slower port (doctor --trace on both scripts, then explain), the other framework's speed for their model
    (compare --model/--jax-model, predict), the claims (claims)."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 150
    first = "\n".join(lines[:60])
    commands = [c for _, c in _code_commands(first)]
    for needed in (r"^make install && source \.venv/bin/activate\b", r"^make demo\b", r"^make test\b", r"twinbench doctor .*--trace", r"twinbench explain \S+ \S+",
                   r"twinbench compare .*--model .*--jax-model", r"twinbench predict .*--device",
                   r"twinbench claims"):
        assert re.search(needed, "\n".join([first, *commands]), re.M), needed  # commands: continuations joined
    assert [c for c in commands if _parse(c)] == []


def test_make_install_says_the_line_that_puts_twinbench_on_the_path():
    """A make recipe cannot change its caller's shell: ``make install`` prints the activation line, and the README's
    set-up gives it, so ``twinbench`` is found after the set-up the README names."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile[makefile.index("\ninstall: $(STAMP)\n"):].split("\n\n")[0]
    assert "source $(VENV)/bin/activate" in recipe and "@echo" in recipe
    setup = (ROOT / "README.md").read_text().split("```")[1]
    assert "make install && source .venv/bin/activate" in setup


def test_the_table_width_outside_a_terminal_is_the_one_getting_started_states():
    """getting-started says what a log or a file gets: notes at 100 columns and every table at its natural width
    (no cell cut to "..."); the CLI's console and print_table do that."""
    import io
    import sys

    from rich.console import Console

    sys.path.insert(0, str(ROOT / "tests" / "report"))
    import synthetic

    from twinbench.cli.common import NARROW
    from twinbench.report.table import print_table, rich_table

    doc = " ".join((ROOT / "docs" / "getting-started.md").read_text().split())
    assert f"notes wrapped at {NARROW} columns" in doc and "every table at its natural width" in doc
    recs = [synthetic.record("torch", "eager"), synthetic.record("jax", "jit")]
    buf = io.StringIO()
    print_table(Console(file=buf, width=NARROW, force_terminal=False), rich_table(typed(recs), 1000, "t"))
    widths = [len(line) for line in buf.getvalue().splitlines()]
    assert max(widths) > NARROW and "…" not in buf.getvalue()


#: the pages a newcomer reads first, each one story: README.md and these stay under 300 lines (reference details
#: on pages behind them, e.g. claims-budget.md)
SHORT = ("README.md", "docs/getting-started.md", "docs/claims.md", "docs/claims-budget.md", "docs/predict.md",
         "docs/own-model.md", "docs/comparing.md", "docs/tpu.md", "docs/gpu.md", "docs/torchax.md",
         "docs/memory.md", "docs/many-devices.md")


def test_no_story_page_is_over_300_lines():
    assert {p: n for p in SHORT if (n := len((ROOT / p).read_text().splitlines())) > 300} == {}


#: how each command of the story pages (SHORT) is checked beyond parsing, the first pattern that matches it:
#: "run" ones run here as printed (in process, in an empty folder, the repository's examples/ beside them);
#: the others say why not: minutes of CPU (each kind is run by the suite's own tests at a smaller size, or by
#: benchmarks/), an accelerator or cluster, or a file the reader brings
DOC_COMMANDS: tuple[tuple[str, str, str], ...] = (
    (r"claims .*--plan", "run", "plans, runs nothing"),
    (r"^twinbench peak$", "run", "reads the cache"),
    (r"--coordinator|--launcher|--num-processes", "not here", "a cluster"),
    (r"--compile\b", "not here", "the TPU compiler (the libtpu package)"),
    (r"(compare|sweep) --preset (gpt2-124m|llama-300m|llama-small)\b", "not here",
     "a GPU or TPU's size (minutes a run on a CPU)"),
    (r"train_torch\.py|train_flax\.py|explain traces/|--resume|--calibrate|report runs/", "not here",
     "files the reader brings"),
    (r"twinbench (claims|advise|sweep)\b", "costly", "minutes of runs; tests/claims, tests/report run them small"),
    (r"twinbench (compare|doctor|predict)\b", "costly", "a run or a traced program per strategy (10-60 s each); "
     "the suite's tests run each kind at the tiny preset (tests/test_compare.py, tests/byo, tests/doctor, "
     "tests/predict)"),
    (r"twinbench peak --remeasure", "costly", "measures every framework's peak again (minutes)"),
)


def _doc_command_kind(command: str) -> tuple[str, str]:
    bare = re.sub(r"^(\$\s+)?(\S*/)?(time\s+(-v\s+)?)?(\S*/)?twinbench", "twinbench", command.split("  #")[0].strip())
    return next(((kind, why) for pattern, kind, why in DOC_COMMANDS if re.search(pattern, bare)), ("", ""))


def test_every_command_of_the_story_pages_is_run_or_says_why_not(tmp_path, monkeypatch):
    """Every ``twinbench`` command of README.md and the story pages is either run here as printed (exit 0: the
    cheap ones) or classified with the reason it is not (DOC_COMMANDS), so a command added to a page is one or
    the other."""
    from typer.testing import CliRunner

    commands = [(p, n, c) for p in SHORT for n, c in _code_commands((ROOT / p).read_text())]
    unclassified = [f"{p}:{n}: {c}" for p, n, c in commands if not _doc_command_kind(c)[0]]
    assert unclassified == []
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    ran = []
    for page, n, command in commands:
        if _doc_command_kind(command)[0] != "run":
            continue
        tokens = shlex.split(command.removeprefix("$ "), comments=True)
        args = tokens[next(k for k, tok in enumerate(tokens) if tok.rsplit("/", 1)[-1] == "twinbench") + 1:]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, f"{page}:{n}: {command}\n{result.output}"
        ran.append(command)
    assert len(ran) >= 3  # the README's plan, claims.md's TPU plan, comparing.md's peak
