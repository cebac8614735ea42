"""What a claims run writes and ``report`` reads: one verdict of ``claims.json`` as a typed value.

The writer (``claims/suite.py``) and the reader (``report/page.py``) share this one Struct, so a field renamed
here is renamed for both. Every field has a default, so a verdicts file of an earlier twinbench (or one missing
a field) still reads; a field of another type is one line naming it (the report's reader). This module imports
msgspec alone: the report reads it without importing the claims' runs.
"""

from __future__ import annotations

import msgspec

#: one number a verdict shows: a measured figure, a word (``platform``, ``memory_figure``), a flag, a timed
#: claim's ``[min, max]`` over its repeats (``<name>_range``), or None where a run gave no figure
Number = str | int | float | bool | list[str | int | float | None] | None
#: a verdict's numbers by name: the names differ by claim (its rule names them), so this is a mapping, not a Struct
Numbers = dict[str, Number]


class ClaimResult(msgspec.Struct, kw_only=True, frozen=True):
    """One claim's verdict as ``claims.json`` keeps it: what was claimed, what ran, the numbers, the verdict
    with its finding and rule, and what the measurement cannot show (the caveat)."""

    claim: str = ""  # the id of docs/claims.md: C1..C22
    group: str = ""
    statement: str = ""
    verdict: str = ""  # one of core.VERDICTS
    finding: str = ""  # why, in one sentence, with the sizes measured at
    measured_at: str = ""
    platform: str = ""
    rule: str = ""  # the verdict rule in words (the size rule appended where the claim states a size)
    numbers: Numbers = {}
    runs: list[str] = []  # the run ids of its runs in results.jsonl
    repeats: int = 0  # repeats judged (0: no runs)
    ran: list[str] = []  # each run and probe in words
    caveat: str = ""
