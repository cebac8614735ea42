"""Preflight of an environment before a measured sitting: what twinbench needs imports, at the versions it
needs, and (for a GPU sitting) both frameworks see the GPU.

A comparison in which JAX's CUDA plugin failed to load runs JAX on the CPU and torch on the GPU: every number
is then meaningless, and nothing fails. This check says so in seconds, before anything is measured::

    python -m twinbench.environment          # imports and versions
    python -m twinbench.environment --gpu    # ... and torch.cuda and jax.default_backend() both see a GPU
    python -m twinbench.environment --tpu    # a TPU VM: JAX sees the TPU through libtpu; torch, grain,
                                             # submitit and torchax are optional there (one note each)

Exit code 0: ready (notes about optional pieces may be printed); 2: a problem, one line each on stderr.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import sys

from packaging.version import Version  # a dependency of matplotlib's

#: Lower bounds of pyproject.toml's dependencies that a sitting needs (a test keeps them equal to it).
FLOORS = {"numpy": "1.26", "torch": "2.11", "jax": "0.10", "flax": "0.11", "optax": "0.2.4", "rich": "13",
          "typer": "0.12", "matplotlib": "3.8"}


#: On a TPU VM (where only JAX and libtpu come preinstalled, and the package index may lack some wheels) a JAX
#: comparison needs none of these; each serves one thing, named in its note with what to do.
TPU_OPTIONAL = {
    "torch": "the torch runs and torchax need it; a CPU build: pip install torch --index-url "
             "https://download.pytorch.org/whl/cpu",
    "grain": "only the +prefetch input pipeline needs it: pip install grain (or leave +prefetch out)",
    "submitit": "only --launcher local|slurm needs it: pip install submitit (or run without --launcher)",
    "torchax": "a PyTorch model on the TPU (--model FILE.py:build --strategies torchax) needs it: pip install "
               "torchax==0.0.13 --no-deps",
}
#: the TPU runtime's package names (a release, or a nightly)
LIBTPU = ("libtpu", "libtpu-nightly")


def _import(name: str) -> object:
    """Import a module by name: the one place this module imports what it checks (tests replace it). torchax
    is imported as the runs import it, through twinbench's compatibility layer (its plain import fails on
    some torch releases that the layer supports)."""
    if name == "torchax":
        from twinbench.strategies.torchax_compat import import_torchax

        return import_torchax()
    return importlib.import_module(name)


def _installed(name: str) -> bool:
    """Whether a module can be found without importing it (tests replace it)."""
    return importlib.util.find_spec(name) is not None


def _version(name: str) -> str | None:
    """The installed distribution's version, None when it is not installed (tests replace it)."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def problems(gpu: bool = False, tpu: bool = False) -> list[str]:
    """Everything that keeps this environment from a meaningful sitting (empty: ready). ``tpu``: torch is not
    required (:data:`TPU_OPTIONAL`), and JAX must run on the TPU through libtpu."""
    out = []
    for name, floor in FLOORS.items():
        if tpu and name in TPU_OPTIONAL and not _installed(name):
            continue  # absent, and optional on a TPU: a note (:func:`tpu_notes`), not a problem
        try:
            _import(name)
            have = _version(name)
            if have is None:
                raise ModuleNotFoundError(f"no installed distribution named {name}")
        except Exception as e:  # not installed, or fails to import (a broken CUDA plugin, a missing library)
            first = (str(e).strip().splitlines() or [""])[0][:120]
            out.append(f"{name}: cannot be imported ({type(e).__name__}: {first})")
            continue
        if Version(have).release < Version(floor).release:
            out.append(f"{name} {have} is older than twinbench needs (>= {floor})")
    if gpu and not out:
        out += gpu_problems()
    if tpu and not out:
        out += tpu_problems()
    return out


def _jax_backend() -> str:
    """JAX's default backend, or what kept JAX from choosing one."""
    import jax

    try:
        return jax.default_backend()
    except Exception as e:
        return f"none ({type(e).__name__})"


def tpu_problems() -> list[str]:
    """Whether JAX runs on the TPU: libtpu installed, and JAX's default backend the TPU."""
    out = []
    if not any(_version(n) for n in LIBTPU):
        out.append("libtpu is not installed: JAX cannot reach the TPU (pip install 'jax[tpu]' with the "
                   "libtpu release that matches jax)")
    import jax

    backend = _jax_backend()
    if backend != "tpu":
        out.append(f"jax {jax.__version__} runs on '{backend}', not the TPU: libtpu is missing, failed to load, or "
                   "the TPU is held by another process (JAX_PLATFORMS must not say cpu)")
    return out


def tpu_notes() -> list[str]:
    """One line per optional piece a TPU VM lacks, with what it is for and how to add it."""
    out = []
    for name, why in TPU_OPTIONAL.items():
        try:
            _import(name)
        except Exception as e:
            first = (str(e).strip().splitlines() or [""])[0][:80]
            out.append(f"{name} is not available ({type(e).__name__}: {first}): {why}")
    return out


def gpu_problems() -> list[str]:
    """Whether both frameworks see a GPU: torch.cuda, and JAX's default backend."""
    out = []
    import torch

    if not torch.cuda.is_available():
        out.append(f"torch {torch.__version__} sees no CUDA device (a CPU build, or no driver)")
    import jax

    backend = _jax_backend()
    if backend != "gpu":
        out.append(f"jax {jax.__version__} runs on '{backend}', not the GPU: its CUDA plugin is missing or failed to "
                   "load (pip install 'jax[cuda12]'; JAX_PLATFORMS must not say cpu)")
    return out


def main(argv: list[str]) -> int:
    tpu = "--tpu" in argv
    found = problems(gpu="--gpu" in argv, tpu=tpu)
    for line in found:
        print(f"preflight: {line}", file=sys.stderr)
    for line in tpu_notes() if tpu else []:
        print(f"preflight: note: {line}", file=sys.stderr)
    if not found:
        names = [*FLOORS, *(LIBTPU if tpu else ())]
        print("preflight: ok (" + ", ".join(f"{n} {v}" for n in names if (v := _version(n))) + ")")
    return 2 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
