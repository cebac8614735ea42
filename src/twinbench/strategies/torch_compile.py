"""PyTorch compiled: ``compile`` (the whole forward+loss graph) and ``compile-regional`` (one block, reused).

``compile``: ``torch.compile`` of the model and loss together; dynamo traces every layer into one graph,
AOTAutograd derives the backward graph and Inductor generates kernels for both. With ``+optc`` the
optimizer half of the step (gradient clipping and AdamW) is compiled too, into fused ``foreach`` kernels.

``compile-regional``: each Transformer block is compiled in place (``block.compile()``, the regional
compilation recipe of the PyTorch tutorials). The blocks share one code object and one set of guards, so
the first block's compiled graph is reused for every layer: cold compile time stops growing with depth.
Embeddings, the LM head, the loss and the optimizer run eagerly (``+optc`` compiles the optimizer step).
"""

from __future__ import annotations

import torch

from twinbench.models.weights import Canonical
from twinbench.spec import RunSpec
from twinbench.strategies.lengths import compile_dynamic
from twinbench.strategies.torch_eager import TorchTrainer


def apply_compile(trainer: TorchTrainer, spec: RunSpec, regional: bool) -> TorchTrainer:
    """Whole (``forward_loss`` as one graph) or regional (each block the family names, ``block.compile()``)
    compilation of a trainer's step; ``+optc`` compiles its optimizer half (``update``) too."""
    if regional:
        for block in trainer.family.torch_blocks(trainer.model):
            block.compile()
    else:
        trainer.forward_loss = torch.compile(trainer.forward_loss, dynamic=compile_dynamic(spec))
    if spec.strategy.mods.optc:
        trainer.update = torch.compile(trainer.update)
    return trainer


def build(spec: RunSpec, weights: Canonical) -> TorchTrainer:
    return apply_compile(TorchTrainer(spec, weights), spec, regional=False)


def build_regional(spec: RunSpec, weights: Canonical) -> TorchTrainer:
    return apply_compile(TorchTrainer(spec, weights), spec, regional=True)
