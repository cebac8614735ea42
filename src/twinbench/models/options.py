"""How a twin model executes, as opposed to what it computes: named knobs both twins read (MaxText style).

A strategy turns its name and modifiers into a :class:`ModelOptions` and passes it to the model; the model
never looks at strategy names. Every option leaves the maths unchanged (up to rounding): scanning over
layers, rematerialising activations and computing in bf16 are ways to run the same GPT.
"""

from __future__ import annotations

from dataclasses import dataclass

from twinbench.config import REMAT_POLICIES  # +remat's option (strategies/modifiers.py), declared in the leaf

COMPUTE_DTYPES = ("fp32", "bf16")
#: How the JAX twins compute attention (same maths): "default" writes it out with einsums (the maths of
#: ``jax.nn.dot_product_attention``'s XLA path without its grouped-query vmap, which costs transposes of the
#: scores on XLA:CPU; it keeps the [batch, heads, seq, seq] probabilities of every layer for the backward
#: pass); "jax-nn" is ``jax.nn.dot_product_attention`` as JAX chooses; "chunked" computes it by blocks of queries, each block rematerialised in
#: the backward pass, so only one block's scores are alive at a time (memory); "cudnn" is cuDNN's fused (flash)
#: attention, CUDA + bf16 only (speed and memory on NVIDIA GPUs); "splash" is the Pallas TPU splash-attention
#: kernel (fused blocks, no scores stored; TPU only, Pallas's interpreter elsewhere). PyTorch's SDPA picks its kernel itself
#: (flash / memory-efficient / cuDNN / math; the record's ``attention_kernel`` says which).
ATTENTION_IMPLS = ("default", "chunked", "jax-nn", "cudnn", "splash")
#: How the splash kernel reads q, k and v (its ``QKVLayout``; the same maths): "head-dim-minor" (``[T, D]`` tiles,
#: the kernel's default), "seq-minor" (``[D, T]``: a projection written heads first then lays its product out with
#: the sequence in the 128 lanes instead of a 64-wide head), "auto": seq-minor where the twin's projections write
#: q, k, v heads first themselves (BERT), head-dim-minor where they come through a transpose (GPT-2, Llama, torchax).
#: BERT's step on a TPU was faster seq-minor, measured back to back (benchmarks/RESULTS.md, "The ninth sitting");
#: the others have not been measured seq-minor.
SPLASH_LAYOUTS = ("auto", "head-dim-minor", "seq-minor")
#: How the JAX twins hand the MLP's activation to the products that read it (the same maths): "fused" lets XLA
#: decide, and on a TPU it recomputes the activation inside each product that reads it (the second projection and
#: its weight gradient), where an exact (erf) GELU keeps the matrix unit waiting; "stored" writes it once (an
#: ``optimization_barrier``), to be read by the next product and the backward pass, for one activation a layer
#: more of memory. benchmarks/RESULTS.md, "The tenth sitting", has BERT-base's A/B on a TPU v5e.
MLP_ACTIVATIONS = ("fused", "stored")
#: How the JAX twins keep AdamW's moments (the same maths): "tree", one array per parameter, as optax does; "flat",
#: the clipping and moments over all parameters as one vector (``optax.flatten``), so a call of the step takes and
#: returns three arrays a parameter fewer, which the host flattens, dispatches and donates one by one.
OPTIMIZER_STATES = ("tree", "flat")


@dataclass(frozen=True)
class ModelOptions:
    #: JAX: blocks created stacked (``nnx.vmap``) and applied with ``nnx.scan``: one block is traced and
    #: compiled whatever the depth. PyTorch has no equivalent (its nearest is regional compilation).
    scan_layers: bool = False
    #: iterations of the layer scan unrolled per loop trip (``unroll`` of ``nnx.scan``); 1 = a plain loop.
    scan_unroll: int = 1
    #: activation checkpointing per block: "none", or a policy of REMAT_POLICIES. "full" recomputes the
    #: whole block in the backward pass (torch.utils.checkpoint; jax.checkpoint with no policy, which saves
    #: nothing, the same as "nothing-saveable"); "dots-saveable" keeps matmul outputs (JAX only).
    remat: str = "none"
    #: dtype of matmuls and attention; parameters, LayerNorm, the residual stream and the loss stay fp32.
    compute_dtype: str = "fp32"
    #: JAX only: the attention formulation or kernel, one of ATTENTION_IMPLS (the torch twin's SDPA chooses its own).
    attention_impl: str = "default"
    #: JAX only (``+fused-qkv``): q, k and v from one product ``[B, T, 3C]`` (a full-width matmul, its biases' gradient a
    #: plain reduction) laid out for the attention by one transpose of the three together (``[3, B, H, T, D]`` for a
    #: heads-first kernel such as splash), instead of per-tensor layouts (GPT-2: a transpose each; BERT: three
    #: products written heads first, 64 wide). The same maths; a layout choice measured on the chip.
    fused_qkv: bool = False
    #: JAX only, splash only: how the kernel reads q, k, v, one of SPLASH_LAYOUTS (:meth:`splash_seq_minor`).
    splash_layout: str = "auto"
    #: JAX only: how the MLP's activation reaches the products that read it, one of MLP_ACTIVATIONS.
    mlp_activation: str = "fused"

    def splash_seq_minor(self, written_heads_first: bool) -> bool:
        """Whether the splash kernel reads q, k, v sequence-minor, for a twin whose projections write them heads
        first (``written_heads_first``) or not: ``splash_layout``, "auto" resolved."""
        return self.splash_layout == "seq-minor" or (self.splash_layout == "auto" and written_heads_first)

    def __post_init__(self) -> None:
        if self.remat != "none" and self.remat not in REMAT_POLICIES:
            raise ValueError(f"remat: unknown policy {self.remat!r}; allowed: none, {', '.join(REMAT_POLICIES)}")
        if self.compute_dtype not in COMPUTE_DTYPES:
            raise ValueError(f"compute_dtype: {self.compute_dtype!r}; allowed: {', '.join(COMPUTE_DTYPES)}")
        if self.attention_impl not in ATTENTION_IMPLS:
            raise ValueError(f"attention_impl: {self.attention_impl!r}; allowed: {', '.join(ATTENTION_IMPLS)}")
        if self.splash_layout not in SPLASH_LAYOUTS:
            raise ValueError(f"splash_layout: {self.splash_layout!r}; allowed: {', '.join(SPLASH_LAYOUTS)}")
        if self.mlp_activation not in MLP_ACTIVATIONS:
            raise ValueError(f"mlp_activation: {self.mlp_activation!r}; allowed: {', '.join(MLP_ACTIVATIONS)}")
        if self.scan_unroll < 1:
            raise ValueError(f"scan_unroll must be >= 1, got {self.scan_unroll}")
