"""The command line: parses flags, builds RunSpecs, delegates. No measurement or model code lives here.

One typer ``app`` (common.py); each module adds its commands to it: run.py (compare, sweep), models.py
(strategies, export, score, peak), claims.py, analyse.py (report, diff, advise, explain), doctor.py.
execute.py runs specs for the commands that measure (launcher flags, progress, table, summary.md).
"""

from __future__ import annotations

from twinbench.cli import analyse, claims, doctor, models, predict, run  # noqa: F401  (each registers its commands)
from twinbench.cli.common import NARROW, _width, app, console, fail, out
from twinbench.plan import build_specs

#: the order of the commands in ``twinbench --help``
ORDER = ("compare", "sweep", "strategies", "export", "score", "claims", "peak", "report", "diff", "advise", "doctor",
         "explain", "predict")
app.registered_commands.sort(key=lambda c: ORDER.index(c.name or c.callback.__name__))

__all__ = ["NARROW", "ORDER", "_width", "app", "build_specs", "console", "fail", "main", "out"]


def main() -> None:  # pragma: no cover - console entry point convenience
    app()
