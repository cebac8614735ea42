"""The command line: parses flags, builds RunSpecs, delegates. No measurement or model code lives here.

One typer ``app`` (common.py); each module adds its commands to it: run.py (compare, sweep), models.py
(strategies, export, score, peak), claims.py, analyse.py (report, diff, advise, explain), doctor.py.
execute.py runs specs for the commands that measure (launcher flags, progress, table, summary.md).
"""

from __future__ import annotations

from twinbench.cli import analyse, claims, doctor, models, predict, run  # noqa: F401  (each registers its commands)
from twinbench.cli.common import NARROW, _width, app, console, fail, out
from twinbench.plan import build_specs

#: the order of the commands in ``twinbench --help``: first the three questions users come with (my port is
#: slower: doctor, explain; how much faster would the other framework be: compare, predict; are the claims true
#: here: claims), then the rest under their panels
ORDER = ("doctor", "explain", "compare", "predict", "claims", "sweep", "advise", "diff", "report", "strategies", "peak",
         "export", "score")
PANELS = {"sweep": "Measure more, and read results", "advise": "Measure more, and read results",
          "diff": "Measure more, and read results", "report": "Measure more, and read results",
          "strategies": "Measure more, and read results", "peak": "Measure more, and read results",
          "export": "Checkpoints", "score": "Checkpoints"}
app.registered_commands.sort(key=lambda c: ORDER.index(c.name or c.callback.__name__))
for _command in app.registered_commands:
    _command.rich_help_panel = PANELS.get(_command.name or _command.callback.__name__)

__all__ = ["NARROW", "ORDER", "PANELS", "_width", "app", "build_specs", "console", "fail", "main", "out"]


def main() -> None:  # pragma: no cover - console entry point convenience
    app()
