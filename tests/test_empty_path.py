"""An empty path (a shell's ``''``) is refused in one line: typer would read it as the current folder."""

from __future__ import annotations

import pytest

from twinbench.cli import app
from twinbench.cli.common import empty_path


@pytest.mark.parametrize("args", [["compare", "--out", ""], ["compare", "--out=", "--dry-run"],
                                  ["diff", "--json", "", "a", "b"], ["sweep", "--resume", ""]])
def test_an_empty_path_option_is_one_line_and_exit_2(args, capsys):
    with pytest.raises(SystemExit) as e:
        app(args=args)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "an empty path" in err and err.startswith(f"error: {args[1].rstrip('=')}")


def test_only_path_options_before_a_double_dash_are_checked():
    assert empty_path(app, ["doctor", "train.py", "--", "--out", ""]) == ""  # the script's own arguments
    assert empty_path(app, ["compare", "--strategies", ""]) == ""  # not a path: its own check says what is wrong
    assert empty_path(app, ["compare", "--preset", "tiny", "--out", ""]) == "--out"


@pytest.mark.parametrize("value", ["", ",", " , "])
def test_an_empty_strategy_list_is_blamed_on_the_flag_not_on_a_default_strategy(value):
    from twinbench.plan import build_specs
    from twinbench.spec import SpecError

    with pytest.raises(SpecError, match=r"^--strategies .*: names no strategy"):
        build_specs("tiny", "torch,jax", value, {})
