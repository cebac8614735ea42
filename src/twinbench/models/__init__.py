"""Twin models: ``gpt_torch.py`` and ``gpt_jax.py`` mirror each other name for name; ``weights.py`` converts."""
