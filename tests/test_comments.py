"""No source comment, docstring or Makefile comment quotes a measured figure, a date or a machine.

Figures live in benchmarks/RESULTS.md, each with its machine and conditions; the code says what it does and why
in its own terms (and links a RESULTS.md section where that helps). A *measured figure* is a number with a unit
(time, size, rate, ratio, share) said as an observation: beside a machine or device ("on a TPU v5e", "H200", "a
2-core CPU"), approximately ("~1.5 s", "about 144 MiB"), or as a comparison ("68.6 ms against 66.6", "110 -> 73
ms", "from 606 to 1,088 MiB", "5x faster"); any calendar date is one too. Text between double backquotes is an
example of an output format or a name, not a claim, and is skipped. :data:`ALLOWED` lists the genuine constants
(a datasheet figure, a documented default of a library) by file and the text that matches, with the reason.
"""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

UNIT = (r"(?:ms|µs|us|ns|s|sec|seconds?|minutes?|min|hours?|GiB|MiB|KiB|GB|MB|KB|TB|GB/s|MB/s|TB/s|"
        r"[TG]FLOP/s|[TG]FLOPS|%|x)")
NUMBER = r"\d[\d,]*(?:\.\d+)?"
FIGURE = rf"{NUMBER}(?:\s?-\s?{NUMBER})?\s?{UNIT}(?![\w/])"
#: the words that make a figure an observation: a machine, an approximation, a comparison, a past measurement
MACHINE = (r"\b(?:v[2-7][ep]?|v5 lite|v6 lite|H100|H200|A100|A10G|L4|L40S|EPYC|Xeon|Ryzen|M[1-4] (?:Pro|Max)|"
           r"\d+-core|this machine|this host|this project's|here)\b")
OBSERVED = [
    re.compile(rf"{MACHINE}.{{0,80}}?{FIGURE}|{FIGURE}.{{0,80}}?{MACHINE}", re.S),
    re.compile(rf"(?:~|\babout |\baround |\broughly |\bnearly |\balmost ){FIGURE}"),
    re.compile(rf"{FIGURE}.{{0,40}}?(?:\bagainst\b|\binstead of\b|\bvs\.?\b|->|→)\s?~?{NUMBER}", re.S),
    re.compile(rf"\b(?:median|mean|p10|p50|p90|spread of) [+-−]?{FIGURE}"),
    re.compile(rf"(?:\+-|±)\s?{FIGURE}"),
    re.compile(rf"\bfrom {NUMBER}\s?{UNIT}? to {FIGURE}"),
    re.compile(rf"{NUMBER}\s?x (?:faster|slower|more|less|fewer|longer|shorter)\b"),
    re.compile(rf"\b(?:took|measured|was seen|were seen|we saw|ran in|ran at) (?:~|about )?{FIGURE}"),
    re.compile(r"\b20[0-9]{2}-[01][0-9](?:-[0-3][0-9])?\b"),
]

#: (file relative to the repository, the matched text): why it is a constant, not a measurement
ALLOWED: dict[tuple[str, str], str] = {}


def _spans(text: str) -> str:
    """``text`` without its double-backquoted literals (output formats and names, not claims)."""
    return re.sub(r"``.*?``", "``", text, flags=re.S)


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _comment(line: str) -> str:
    """The comment of one source line ('' if none). A quote before the ``#`` may open a string that holds it:
    such a line is tokenized alone (a line inside a triple-quoted string is the docstring's, read apart)."""
    head, sep, tail = line.partition("#")
    if not sep:
        return ""
    if "'" not in head and '"' not in head:
        return tail
    try:
        return next((tok.string[1:] for tok in tokenize.generate_tokens(io.StringIO(line).readline)
                     if tok.type == tokenize.COMMENT), "")
    except (tokenize.TokenError, SyntaxError):  # a line of a longer statement: its string ends elsewhere
        return ""


@functools.cache
def comment_texts(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring of a Python file, or every comment of a Makefile."""
    src = path.read_text()
    if path.suffix != ".py":
        return [(i, line.split("#", 1)[1]) for i, line in enumerate(src.splitlines(), 1)
                if "#" in line and not line.lstrip().startswith("\t")]
    out = [(i, comment) for i, line in enumerate(src.splitlines(), 1) if (comment := _comment(line))]
    stack: list[ast.AST] = [ast.parse(src)]
    while stack:  # the module, its classes and functions, at any depth of definitions (what has a docstring)
        node = stack.pop()
        doc = ast.get_docstring(node, clean=False)  # type: ignore[arg-type]
        if doc is not None:
            out.append((node.body[0].lineno, doc))  # type: ignore[attr-defined]
        stack += [n for n in node.body if isinstance(n, _DEFS)]  # type: ignore[attr-defined]
    return out


_FIGURE_OR_DATE = re.compile(rf"{FIGURE}|\b20[0-9]{{2}}-[01][0-9]")


def sentences(text: str) -> list[str]:
    """``text`` on one line without its literals, cut into sentences (a figure and its machine share one)."""
    flat = " ".join(_spans(text).split())
    return re.split(r"(?<=[.;:!?])\s+(?=[A-Z(])", flat)


def findings(path: Path, rel: str) -> list[str]:
    """The measured figures quoted in ``path``'s comments: ``file:line: the matching text``."""
    out = []
    for line, text in comment_texts(path):
        for sentence in sentences(text):
            if not _FIGURE_OR_DATE.search(sentence):  # most sentences: no figure, nothing to look for
                continue
            out += [f"{rel}:{line}: {m.group(0)!r}" for pattern in OBSERVED for m in pattern.finditer(sentence)
                    if (rel, m.group(0)) not in ALLOWED]
    return out


def sources() -> list[Path]:
    return [*sorted((ROOT / "src").rglob("*.py")), ROOT / "Makefile"]


def test_no_comment_quotes_a_measured_figure():
    found = [f for p in sources() for f in findings(p, str(p.relative_to(ROOT)))]
    assert found == [], ("comments quoting a measured figure, a date or a machine (say why in the code's terms; "
                         "the figure goes to benchmarks/RESULTS.md):\n" + "\n".join(found))
    texts = {str(p.relative_to(ROOT)): " ".join(_spans(" ".join(t for _, t in comment_texts(p))).split())
             for p in sources()}
    stale = [f"{rel}: {text!r}" for rel, text in ALLOWED if text not in texts.get(rel, "")]
    assert stale == [], "ALLOWED entries that no longer match (remove them):\n" + "\n".join(stale)


@pytest.mark.parametrize(("comment", "flagged"), [
    ("# 68.6 ms against 66.6 on a TPU v5e", True),
    ("# the step went from 606 to 1,088 MiB", True),
    ("# Python lists: ~5x faster, the same bytes", True),
    ('"""On this project\'s 2-core CPU a third of the step."""', False),
    ("# on a 2-core CPU the step takes 110 ms", True),
    ("# a trace taken 2026-12-07", True),
    ("# an eager run does not pay its import (~1.5 s)", True),
    ("# compiled in 2.06 s unrolled against 0.57 s scanned", True),
    ("# 5x faster than the loop", True),
    ("# refused when the repeats disagree by more than MAX_SPREAD (10%)", False),
    ('"""A line like ``peak 12.9 GiB = params 0.5 (98% accounted)``."""', False),
    ("# warning from 25% of the step", False),
    ("# a run of 35 GFLOP/s instead of ~190 was seen", True),
    ("# faster in most pairs (median -8% per step)", True),
    ("# the spread of one script's compile time (+-30% on a loaded machine)", True),
])
def test_the_scan_tells_a_measurement_from_a_constant(tmp_path, comment, flagged):
    path = tmp_path / "m.py"
    path.write_text(comment + "\nx = 1\n")
    assert bool(findings(path, "m.py")) is flagged
