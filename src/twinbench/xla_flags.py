"""XLA flags of a JAX run: twinbench's measured CPU default, merged with the user's ``XLA_FLAGS``.

jaxlib 0.10 routes dots, reductions and element-wise fusions through YNNPACK on the CPU by default. On the
``small`` preset, turning the YNNPACK element-wise fusions off (``-eltwise``) made the whole-step ``jit``
faster in nearly every interleaved pair over several idle sittings, with the same losses (benchmarks/RESULTS.md,
"XLA CPU flags"). So twinbench applies it to every run unless ``--xla-cpu-flags xla-default`` asks for
XLA's own defaults. A flag the user already sets in ``XLA_FLAGS`` is never overridden. The flags are
CPU-only (``xla_cpu_*``), and they are added only when JAX will run on the CPU (:func:`cpu_backend`): a jaxlib
that does not know a flag aborts at start-up, so a GPU run must not carry them. Every record carries the
effective ``XLA_FLAGS``.
"""

from __future__ import annotations

import importlib.util
import os

from twinbench.measure import platforms

#: ``--xla-cpu-flags`` values: twinbench's measured CPU default, or XLA's own defaults.
CHOICES = ("tuned", "xla-default")
TUNED_CPU_FLAGS = ("--xla_cpu_experimental_ynn_fusion_type=-eltwise",)


def _name(flag: str) -> str:
    return flag.split("=", 1)[0]


#: JAX's accelerator plugins (module names); ``platforms.DEVICE_NODES`` says whether their hardware is present.
ACCELERATOR_PLUGINS = ("jax_cuda13_plugin", "jax_cuda12_plugin", "jax_rocm7_plugin", "jax_rocm60_plugin", "libtpu")


def cpu_backend(environ: dict[str, str] | None = None) -> bool:
    """Whether JAX will run on the CPU, decided before jax is imported: ``JAX_PLATFORMS`` when set (its first
    platform), else the CPU unless an accelerator plugin is installed and its device node exists."""
    env = os.environ if environ is None else environ
    named = [p.strip() for p in env.get("JAX_PLATFORMS", "").split(",") if p.strip()]
    if named:
        return named[0] == "cpu"
    plugin = any(importlib.util.find_spec(name) is not None for name in ACCELERATOR_PLUGINS)
    return not (plugin and platforms.here() != "cpu")


def with_defaults(user_flags: str, defaults: tuple[str, ...]) -> str:
    """``user_flags`` plus each of ``defaults`` whose flag it does not set itself (a value the user gave wins)."""
    given = {_name(f) for f in user_flags.split()}
    return " ".join([*user_flags.split(), *(f for f in defaults if _name(f) not in given)])


def merged(user_flags: str, choice: str, cpu: bool = True) -> str:
    """``user_flags`` (the user's ``XLA_FLAGS``) plus the tuned CPU flags it does not set itself (only when
    ``cpu``: JAX runs on the CPU)."""
    if choice not in CHOICES:
        raise ValueError(f"--xla-cpu-flags: unknown value {choice!r}; allowed: {', '.join(CHOICES)}")
    if choice == "xla-default" or not cpu:
        return user_flags.strip()
    return with_defaults(user_flags, TUNED_CPU_FLAGS)


def apply(choice: str) -> str:
    """In the worker, before jax is imported: set ``XLA_FLAGS``; return the value the run uses."""
    flags = merged(os.getenv("XLA_FLAGS", ""), choice, cpu_backend())
    if flags:
        os.environ["XLA_FLAGS"] = flags
    else:
        os.environ.pop("XLA_FLAGS", None)
    return flags
