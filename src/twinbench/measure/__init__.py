"""Measurement: clocks with device sync, compile events, memory, FLOPs and MFU.

Nothing here imports a model. Framework-specific probes import their framework lazily, so a process only
ever loads the one framework it measures.
"""
