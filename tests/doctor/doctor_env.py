"""The environment of the doctor's runs of example scripts: the suite's, with XLA's own CPU fusion emitters.

tests/conftest.py switches them off to compile faster; the doctor's findings (jax-unrolled-loop: info below 0.5 s
of compile spent on the copies, warning from it; compile-dominates from 1 s) are thresholds on compile seconds,
so the scripts compile as a user's would.
"""

from __future__ import annotations

import os

FUSION_EMITTERS_OFF = "--xla_cpu_use_fusion_emitters=false"


def doctor_env(**extra: str) -> dict[str, str]:
    flags = os.environ.get("XLA_FLAGS", "").replace(FUSION_EMITTERS_OFF, "").split()
    return {**os.environ, "XLA_FLAGS": " ".join(flags), **extra}
