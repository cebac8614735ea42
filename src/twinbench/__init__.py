"""twinbench: the same Transformer in PyTorch and JAX, trained and measured honestly."""

import os

__version__ = "0.1.0"

#: Set for every process that imports twinbench before JAX starts a GPU backend: every entry point
#: (``twinbench``, ``python -m twinbench.worker`` / ``.measure.peak`` / ``.claims.probes`` / ``.environment``,
#: ``score``'s children) imports this package first. Without it JAX takes 75% of every visible GPU at start:
#: the allocator peak would be the preallocation, not what the run used, and a second framework or process on
#: the GPU would find it full. A value the user set is kept.
PROCESS_ENV = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
for _key, _value in PROCESS_ENV.items():
    os.environ.setdefault(_key, _value)


def __getattr__(name: str):  # lazy: ``import twinbench`` stays cheap (no framework imported)
    if name == "watch":
        from twinbench.doctor import watch

        return watch
    raise AttributeError(f"module 'twinbench' has no attribute {name!r}")
