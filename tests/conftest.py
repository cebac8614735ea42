"""Shared test settings: a private twinbench cache, so tests never touch the user's."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("TWINBENCH_CACHE", tempfile.mkdtemp(prefix="twinbench-test-cache-"))
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
