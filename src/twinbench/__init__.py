"""twinbench: the same Transformer in PyTorch and JAX, trained and measured honestly."""

__version__ = "0.1.0"


def __getattr__(name: str):  # lazy: ``import twinbench`` stays cheap (no framework imported)
    if name == "watch":
        from twinbench.doctor import watch

        return watch
    raise AttributeError(f"module 'twinbench' has no attribute {name!r}")
