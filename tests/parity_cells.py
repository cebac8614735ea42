"""The strategy runs the parity tests make, per family, and the cells of ``twinbench strategies --matrix`` they cover.

The parity tests parametrize from these lists, so the matrix test (``tests/strategies/test_matrix.py``) checks
what really runs. A run named ``base+m1+m2`` covers the cells (base), (base, +m1) and (base, +m2):

- ``*_EQUAL``: fp32 losses equal to the framework's one-device baseline (``jit`` / ``eager``) within the
  tolerance of the test (JAX 2e-5, torch compiled 1e-4, multi-device 1e-5 relative);
- ``*_BF16``: losses within 2e-2 relative of the fp32 baseline, yet different from it (bf16 really on);
- ``ANTIPATTERN``: the deliberately wrong modifiers (claims C10, C13): their effect is asserted instead.

Data-side modifiers (padding policy, input pipeline: ``DATA_MODIFIERS`` of strategies/modifiers.py) do not touch the
train step; a data cell is covered when its base is, and the modifier is covered for that family and
framework on some base (``DATA_COVERED``: tests/strategies/test_lengths.py, tests/test_classify_compare.py,
tests/data/test_pipeline.py).
"""

from __future__ import annotations

FAMILIES = ("gpt", "bert", "llama")

# single device, in the test process (tests/strategies/test_cells.py; torch.compile's: test_cells_compiled.py)
JAX_EQUAL = ["naive+remat", "jit+remat+nodonate+accum", "scan-steps+remat+nodonate+accum",
             "scan-layers+remat+nodonate+accum",
             "jit+fused-qkv"]
JAX_BF16 = ["naive+bf16", "jit+bf16", "scan-steps+bf16", "scan-layers+bf16"]
TORCH_EQUAL = ["eager+remat+accum", "compile+remat+optc+accum", "compile-regional+remat+optc+accum"]
TORCH_BF16 = ["eager+bf16", "compile+bf16+symbolic", "compile-regional+bf16"]

# two devices, one process per framework (tests/distributed/test_cells_multidevice_jax.py, _torch.py)
JAX_MULTI_EQUAL = ["mesh-dp+remat", "mesh-fsdp+remat", "pmap+remat", "mesh-dp+replicate-batch"]
JAX_MULTI_BF16 = ["mesh-dp+bf16", "mesh-fsdp+bf16", "pmap+bf16"]
TORCH_MULTI_EQUAL = ["ddp+remat", "fsdp+remat"]
TORCH_MULTI_BF16 = ["ddp+bf16", "fsdp+bf16"]
# the family's torch module under torchax, in a fresh process (torchax changes global torch settings on import):
# tests/strategies/test_torchax.py; fp32 losses equal to torch eager's within 1e-5 relative, bf16 within 2e-2
TORCHAX_EQUAL = ["torchax", "torchax+remat+nodonate+fused-loss+accum"]
TORCHAX_BF16 = ["torchax+bf16"]
ANTIPATTERN = {("jax", "pmap+nosync")}  # every family: the replicas drift apart (asserted)

#: torch.compile cells cost a cold Inductor compile each (20-30 s on the 2-core CPU), so each runs on one
#: family, the families taking turns: every (compiled base, modifier) is parity-tested once, and each family
#: runs at least one compiled base (llama the regional one, which compiles its own block list). The compiled
#: strategies wrap whichever model they are given; what differs between the families (the model, its loss)
#: is tested under every other strategy.
COMPILED_ON = {"compile+remat+optc+accum": "gpt", "compile-regional+remat+optc+accum": "bert",
               "compile+bf16+symbolic": "bert", "compile-regional+bf16": "llama"}


#: runs with a modifier only some families honour (+fused-qkv: llama's grouped-query k, v cannot share q's layout)
SOME_FAMILIES = {"jit+fused-qkv": ("gpt", "bert")}


def families_of_run(name: str) -> tuple[str, ...]:
    """The families a parity run of ``name`` is made for."""
    if name in SOME_FAMILIES:
        return SOME_FAMILIES[name]
    return (COMPILED_ON[name],) if name in COMPILED_ON else FAMILIES


def compiled_elsewhere(fam: str, framework: str, base: str, modifier: str, cells: set) -> bool:
    """A compiled (base, modifier) cell that a parity run covers on the other family (``COMPILED_ON``)."""
    return (framework == "torch" and base in {n.split("+")[0] for n in COMPILED_ON}
            and any((f, framework, base, modifier) in cells for f in FAMILIES if f != fam))

#: (family, framework, data modifier) covered by the data tests on some base of that framework
DATA_COVERED = {
    ("bert", "torch", "pad-max"), ("bert", "torch", "dynamic"), ("bert", "torch", "bucket"),
    ("bert", "torch", "prefetch"),
    ("bert", "jax", "pad-max"), ("bert", "jax", "dynamic"), ("bert", "jax", "bucket"), ("bert", "jax", "prefetch"),
    ("gpt", "torch", "prefetch"), ("gpt", "jax", "prefetch"),
    ("llama", "torch", "prefetch"), ("llama", "jax", "prefetch"),  # the same LM batches as gpt's
}


def runs() -> list[tuple[str, str, str]]:
    """Every (family, framework, strategy) run the parity tests make (the baselines are covered by the
    cross-framework twin tests, tests/models/)."""
    out = [(f, "jax", "jit") for f in FAMILIES] + [(f, "torch", "eager") for f in FAMILIES]
    for fw, names in (("jax", JAX_EQUAL + JAX_BF16 + JAX_MULTI_EQUAL + JAX_MULTI_BF16 + TORCHAX_EQUAL + TORCHAX_BF16),
                      ("torch", TORCH_EQUAL + TORCH_BF16 + TORCH_MULTI_EQUAL + TORCH_MULTI_BF16)):
        out += [(f, fw, n) for n in names for f in families_of_run(n)]
    out += [(f, fw, n) for f in FAMILIES for fw, n in ANTIPATTERN]
    return out


def covered() -> set[tuple[str, str, str, str]]:
    """The (family, framework, base, modifier) cells the runs cover ("" = the plain base)."""
    cells = set()
    for fam, fw, name in runs():
        base, *mods = name.split("+")
        cells.add((fam, fw, base, ""))
        cells.update((fam, fw, base, m) for m in mods)
    return cells
