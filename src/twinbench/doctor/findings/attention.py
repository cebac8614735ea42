"""The attention kernel: ``jax-attention-kernel``."""

from __future__ import annotations

from twinbench.doctor.findings.base import JAX_DOCS, Finding, Obs, _mib, _step_location, finding

# -- jax-attention-kernel -------------------------------------------------------------------------------------------
ATTN_WARN_BYTES = 1 << 20  # on a GPU, an unfused score tensor of this size (per attention call) warns


@finding(
    id='jax-attention-kernel',
    severity='warning / info',
    about='speed',
    threshold='the compiled HLO computes attention unfused (a softmax between two batched dots, no cuDNN fused call): on a GPU a warning from a 1 MiB score tensor, else info; nothing off a GPU when the script calls `jax.nn.dot_product_attention`',
    fix="on a GPU `jax.nn.dot_product_attention(..., implementation='cudnn')` with bf16 inputs; elsewhere nothing to change (no GPU advice off a GPU)",
    tested_by="tests/doctor/test_doctor_program.py (CPU-compiled HLO and a GPU's HLO text)",
)
def jax_attention_kernel(obs: Obs) -> Finding | None:
    """Threshold: on a GPU, attention computed unfused (a softmax between two batched dots: the [.., q, k]
    score matrix written to memory and read back) with a score tensor >= 1 MiB is a warning; on other
    backends (no fused kernel to pick) or a smaller one, info, whose fix names no GPU kernel. A cuDNN fused
    attention call, or jax.nn.dot_product_attention called off a GPU: nothing."""
    prog = obs.info.step_program
    att, backend = (prog.attention, prog.backend) if prog else (None, "?")
    if not att or att.kind != "unfused":
        return None
    size = att.scores_bytes
    gpu = backend in ("gpu", "cuda", "rocm")
    called = att.dot_product_attention
    if called and not gpu:  # the script calls the API that picks a fused kernel where there is one: nothing to do
        return None
    how = "jax.nn.dot_product_attention with its XLA implementation" if called else "written out: softmax(q @ k^T) @ v"
    # the mask the program has: a causal one becomes is_causal=True; any other (padding) stays the caller's mask
    masking = ("is_causal=True" if att.causal else
               "mask=your_mask (a [batch, 1, q, k] boolean, or None; the step has no causal mask, so not is_causal)")
    where = ("on this GPU no fused kernel is used" if gpu else
             f"on the {backend} backend there is no fused kernel to choose")
    if gpu:
        fix = (f"Call the fused kernel: jax.nn.dot_product_attention(q, k, v, {masking}, implementation='cudnn') "
               "on an NVIDIA GPU, with q, k, v in bfloat16 (cuDNN's flash attention takes bf16/fp16; its layout is "
               "[batch, seq, heads, head_dim]); in Flax NNX pass attention_fn=partial(jax.nn.dot_product_attention, "
               "implementation='cudnn') where the layer takes one.")
    else:  # no cuDNN here: advice for a machine the script does not run on would be untested
        fix = (f"Nothing to change for this {backend} run. Calling jax.nn.dot_product_attention(q, k, v, {masking}) "
               "instead of writing attention out lets JAX choose a fused kernel on a machine that has one; the "
               "doctor checks it there.")
    return Finding(
        "jax-attention-kernel", "warning" if gpu and size >= ATTN_WARN_BYTES else "info",
        f"attention is computed unfused ({how})",
        f"the compiled step has a softmax between two batched dots, no fused attention call: the score tensor "
        f"{att.dtype}{att.scores_shape} ({_mib(size)}) is written to memory and read back in each call; "
        f"{where} (warning on a GPU from a {_mib(ATTN_WARN_BYTES)} score tensor)",
        fix, f"{JAX_DOCS}/_autosummary/jax.nn.dot_product_attention.html", location=_step_location(obs))
