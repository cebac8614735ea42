"""From a strategy name to the model's execution options: the one place modifiers become model knobs.

``compile+bf16+remat`` -> ``ModelOptions(compute_dtype="bf16", remat="full")``; ``scan-layers`` ->
``ModelOptions(scan_layers=True)``. ``--precision bf16`` and ``+bf16`` are one setting (``spec.with_precision``),
so either turns bf16 compute on.
"""

from __future__ import annotations

from twinbench.models.options import ModelOptions
from twinbench.spec import RunSpec


def compute_dtype(spec: RunSpec) -> str:
    return "bf16" if spec.train.precision == "bf16" or spec.mods.bf16 else "fp32"


def model_options(spec: RunSpec) -> ModelOptions:
    return ModelOptions(
        scan_layers=spec.base_strategy == "scan-layers",
        scan_unroll=spec.scan_unroll,
        remat=spec.remat_policy if spec.mods.remat else "none",
        compute_dtype=compute_dtype(spec),
        attention_impl=spec.attention_impl,
        fused_qkv=spec.mods.fused_qkv,
        splash_layout=spec.splash_layout,
    )
