"""twinbench: the same Transformer in PyTorch and JAX, trained and measured honestly."""

__version__ = "0.1.0"
