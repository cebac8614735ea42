"""Execution strategies: small named units, registered in ``registry.py``, that build a training step."""
