"""Compilation caches, cold or warm: where they live, and how a worker process is pointed at them.

Every record says which cache state it measured (``compile_cache``):

- ``cold``: the run gets a fresh, empty directory for the JAX persistent compilation cache, the
  TorchInductor cache (FX graph and AOTAutograd caches, generated kernels), the Triton kernel cache and
  the CUDA JIT cache. Nothing compiled before (``/tmp/torchinductor_$USER`` included) can be reused.
  The directory is deleted when the run (and its warm twin, if any) is done.
- ``warm``: a second process on the same cache. With ``--cache both`` the warm run follows its cold twin
  on the twin's directory (a cache holding exactly this program). A ``warm`` run without a cold twin uses
  the persistent ``<cache dir>/warm``; if this configuration never ran there, an unrecorded priming run
  fills it first.

The cache root is ``--cache-dir`` (``spec.host.cache_dir`` in the parent), by default ``~/.cache/twinbench/compile``.
The worker calls :func:`apply` before it imports a framework; the runner drives :class:`CachePlan`.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from twinbench.machine import cache_root
from twinbench.spec import RunSpec

MODES = ("cold", "warm", "both")


def default_root() -> Path:
    return cache_root() / "compile"


def worker_env(cache_dir: str | Path) -> dict[str, str]:
    """Environment that points both frameworks' compilation caches into ``cache_dir`` (all entries cached)."""
    d = Path(cache_dir)
    return {
        "JAX_COMPILATION_CACHE_DIR": str(d / "jax"),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",  # cache every program, however quick to compile
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",  # and however small
        "TORCHINDUCTOR_CACHE_DIR": str(d / "inductor"),  # replaces /tmp/torchinductor_$USER
        "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
        "TORCHINDUCTOR_AUTOGRAD_CACHE": "1",
        "TRITON_CACHE_DIR": str(d / "triton"),
        "CUDA_CACHE_PATH": str(d / "cuda"),
    }


def apply(spec: RunSpec) -> str:
    """In the worker, before torch or jax is imported: use ``spec.host.cache_dir``, or a fresh temporary one.

    A spec without a cache directory (a worker started by hand, a test) still gets a cold, private cache:
    never the user's default ``/tmp/torchinductor_$USER``.
    """
    cache_dir = spec.host.cache_dir
    if not cache_dir:
        cache_dir = tempfile.mkdtemp(prefix="twinbench-cache-")
        atexit.register(shutil.rmtree, cache_dir, True)
    os.environ.update(worker_env(cache_dir))
    return cache_dir


def twin_key(spec: RunSpec) -> str:
    """The same configuration whatever its cache state: pairs a warm run with its cold twin."""
    return spec.evolve(compile_cache="cold").run_id()


def expand(specs: Iterable[RunSpec], mode: str, root: Path) -> list[RunSpec]:
    """``--cache cold|warm|both``: each spec with its cache state(s) and the cache root to run under."""
    states = ("cold", "warm") if mode == "both" else (mode,)
    return [s.evolve(compile_cache=c, cache_dir=str(root)) for s in specs for c in states]


class CachePlan:
    """Gives each run of a compare its cache directory, in the order the runner executes them."""

    def __init__(self, specs: Iterable[RunSpec]):
        specs = list(specs)
        self.warm_waiting = Counter(twin_key(s) for s in specs if s.host.compile_cache == "warm")
        self.cold_dirs: dict[str, Path] = {}

    @staticmethod
    def root(spec: RunSpec) -> Path:
        return Path(spec.host.cache_dir) if spec.host.cache_dir else default_root()

    def run(self, spec: RunSpec, run: Callable[[RunSpec], Any]) -> Any:  # -> record.Record
        """Run ``spec`` through ``run`` (the runner's subprocess launcher) on the right cache directory."""
        key = twin_key(spec)
        if spec.host.compile_cache == "cold":
            d = self.root(spec) / f"cold-{key}-{uuid.uuid4().hex[:8]}"
            d.mkdir(parents=True)
            try:
                record = run(spec.evolve(cache_dir=str(d)))
            finally:
                if self.warm_waiting[key] and d.exists():
                    self.cold_dirs[key] = d  # its warm twin runs next on it
                else:
                    shutil.rmtree(d, ignore_errors=True)
            return record
        self.warm_waiting[key] -= 1
        if key in self.cold_dirs:
            d = self.cold_dirs.pop(key)
            try:
                return run(spec.evolve(cache_dir=str(d)))
            finally:
                shutil.rmtree(d, ignore_errors=True)
        d = self.root(spec) / "warm"
        marker = d / ".primed" / key
        if not marker.exists():
            d.mkdir(parents=True, exist_ok=True)
            prime = run(spec.evolve(compile_cache="cold", cache_dir=str(d)))
            if prime.status != "ok":  # the record of the warm run that could not be: the cold run's why
                prime.run.compile_cache, prime.run.run_id = "warm", spec.run_id()
                prime.error = f"priming the warm cache failed: {prime.error}"
                return prime
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
        return run(spec.evolve(cache_dir=str(d)))

    def close(self) -> None:
        """Delete cold directories whose warm twin never ran (an interrupted compare)."""
        for d in self.cold_dirs.values():
            shutil.rmtree(d, ignore_errors=True)
        self.cold_dirs.clear()
