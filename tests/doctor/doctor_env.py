"""The environment of the doctor's runs of example scripts: the suite's, with XLA's own CPU fusion emitters and
code generation split.

tests/conftest.py switches both off to compile faster; the doctor's findings (jax-unrolled-loop: info below 0.5 s
of compile spent on the copies, warning from it; compile-dominates from 1 s) are thresholds on compile seconds,
so the scripts compile as a user's would.
"""

from __future__ import annotations

import os

from suite_xla_flags import NOT_FOR_THE_DOCTOR


def doctor_env(**extra: str) -> dict[str, str]:
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if f not in NOT_FOR_THE_DOCTOR]
    return {**os.environ, "XLA_FLAGS": " ".join(flags), **extra}
