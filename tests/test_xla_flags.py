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


def _worker_env(*flags: str, env: dict[str, str] | None = None) -> str:
    """XLA_FLAGS after the worker's process set-up of a spec made with ``flags``, in a fresh process."""
    import os
    import subprocess
    import sys

    code = ("import os, sys; from twinbench.plan import model_spec; from twinbench.worker import prepare_process;"
            "spec = model_spec('tiny', dict(a.split('=', 1) for a in sys.argv[1:]));"
            "prepare_process(spec); print(os.environ.get('XLA_FLAGS', ''))")
    full = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"} | (env or {})
    out = subprocess.run([sys.executable, "-c", code, *flags], env=full, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_a_worker_applies_the_tuned_flags_unless_told_otherwise():
    assert "--xla_cpu_experimental_ynn_fusion_type=-eltwise" in _worker_env().split()
    assert "ynn_fusion_type" not in _worker_env("xla_cpu_flags=xla-default")
    user = "--xla_cpu_experimental_ynn_fusion_type=-reduce"
    assert user in _worker_env(env={"XLA_FLAGS": user}).split()
    assert "-eltwise" not in _worker_env(env={"XLA_FLAGS": user})


def test_the_spec_refuses_an_unknown_choice():
    from twinbench.plan import model_spec
    from twinbench.spec import SpecError

    with pytest.raises(SpecError, match="--xla-cpu-flags: unknown value 'fast'; allowed: tuned, xla-default"):
        model_spec("tiny", {"xla_cpu_flags": "fast"})
