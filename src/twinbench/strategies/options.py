"""From a strategy name to the model's execution options: the one place modifiers become model knobs.

``compile+bf16+remat`` -> ``ModelOptions(compute_dtype="bf16", remat="full")``; ``scan-layers`` ->
``ModelOptions(scan_layers=True)``. ``--precision bf16`` and ``+bf16`` are one setting (``spec.with_precision``),
so either turns bf16 compute on.
"""

from __future__ import annotations

from twinbench.models.options import ModelOptions
from twinbench.spec import RunSpec


def compute_dtype(spec: RunSpec) -> str:
    return "bf16" if spec.train.precision == "bf16" or spec.strategy.mods.bf16 else "fp32"


def model_options(spec: RunSpec) -> ModelOptions:
    return ModelOptions(
        scan_layers=spec.strategy.base == "scan-layers",
        scan_unroll=spec.strategy.scan_unroll,
        remat=spec.strategy.remat_policy if spec.strategy.mods.remat else "none",
        compute_dtype=compute_dtype(spec),
        attention_impl=spec.strategy.attention_impl,
        fused_qkv=spec.strategy.mods.fused_qkv,
        splash_layout=spec.strategy.splash_layout,
        mlp_activation=spec.strategy.mlp_activation,
    )
