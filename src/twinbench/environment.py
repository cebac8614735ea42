"""Preflight of an environment before a measured sitting: what twinbench needs imports, at the versions it
needs, and (for a GPU sitting) both frameworks see the GPU.

A comparison in which JAX's CUDA plugin failed to load runs JAX on the CPU and torch on the GPU: every number
is then meaningless, and nothing fails. This check says so in seconds, before anything is measured::

    python -m twinbench.environment          # imports and versions
    python -m twinbench.environment --gpu    # ... and torch.cuda and jax.default_backend() both see a GPU

Exit code 0: ready; 2: a problem, one line each on stderr.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys

from packaging.version import Version  # a dependency of matplotlib's

#: Lower bounds of pyproject.toml's dependencies that a sitting needs (a test keeps them equal to it).
FLOORS = {"numpy": "1.26", "torch": "2.11", "jax": "0.10", "flax": "0.11", "optax": "0.2.4", "rich": "13",
          "typer": "0.12", "matplotlib": "3.8"}


def problems(gpu: bool = False) -> list[str]:
    """Everything that keeps this environment from a meaningful sitting (empty: ready)."""
    out = []
    for name, floor in FLOORS.items():
        try:
            importlib.import_module(name)
            have = importlib.metadata.version(name)
        except Exception as e:  # not installed, or fails to import (a broken CUDA plugin, a missing library)
            first = (str(e).strip().splitlines() or [""])[0][:120]
            out.append(f"{name}: cannot be imported ({type(e).__name__}: {first})")
            continue
        if Version(have).release < Version(floor).release:
            out.append(f"{name} {have} is older than twinbench needs (>= {floor})")
    if gpu and not out:
        out += gpu_problems()
    return out


def gpu_problems() -> list[str]:
    """Whether both frameworks see a GPU: torch.cuda, and JAX's default backend."""
    out = []
    import torch

    if not torch.cuda.is_available():
        out.append(f"torch {torch.__version__} sees no CUDA device (a CPU build, or no driver)")
    import jax

    try:
        backend = jax.default_backend()
    except Exception as e:
        backend = f"none ({type(e).__name__})"
    if backend != "gpu":
        out.append(f"jax {jax.__version__} runs on '{backend}', not the GPU: its CUDA plugin is missing or failed to "
                   "load (pip install 'jax[cuda12]'; JAX_PLATFORMS must not say cpu)")
    return out


def main(argv: list[str]) -> int:
    found = problems(gpu="--gpu" in argv)
    for line in found:
        print(f"preflight: {line}", file=sys.stderr)
    if not found:
        print("preflight: ok (" + ", ".join(f"{n} {importlib.metadata.version(n)}" for n in FLOORS) + ")")
    return 2 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
