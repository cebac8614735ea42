"""twinbench's default XLA CPU flags: added to the user's XLA_FLAGS, never overriding them."""

import pytest

from twinbench import xla_flags


def test_tuned_adds_the_measured_cpu_default():
    assert xla_flags.merged("", "tuned") == "--xla_cpu_experimental_ynn_fusion_type=-eltwise"


def test_user_flags_are_kept_and_win():
    user = "--xla_dump_to=/tmp/d --xla_cpu_experimental_ynn_fusion_type=-reduce"
    assert xla_flags.merged(user, "tuned") == user  # the user's own choice of the same flag is not replaced
    assert xla_flags.merged("--xla_dump_to=/tmp/d", "tuned").split() == [
        "--xla_dump_to=/tmp/d", "--xla_cpu_experimental_ynn_fusion_type=-eltwise"]


def test_xla_default_leaves_the_environment_alone(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/d")
    assert xla_flags.apply("xla-default") == "--xla_dump_to=/tmp/d"
    monkeypatch.delenv("XLA_FLAGS")
    assert xla_flags.apply("xla-default") == ""
    import os

    assert "XLA_FLAGS" not in os.environ


def test_unknown_choice_is_refused():
    with pytest.raises(ValueError, match="allowed: tuned, xla-default"):
        xla_flags.merged("", "fast")
