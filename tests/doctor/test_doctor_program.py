"""What the doctor reads from the step's program: a Python loop unrolled into its jaxpr, and how its compiled
HLO computes attention (small functions traced and compiled in-process on the CPU; a GPU's HLO as text)."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from twinbench.doctor import findings as fd
from twinbench.doctor import program

W = jnp.ones((8, 16, 16))
X = jnp.ones((4, 16))


def layer(h: Any, w: Any) -> Any:
    return jnp.tanh(h @ w) + h


def unrolled(ws: Any, x: Any) -> Any:
    for i in range(8):  # layers applied in a Python loop
        x = layer(x, ws[i])
    return jnp.sum(x)


def scanned(ws: Any, x: Any) -> Any:
    x, _ = jax.lax.scan(lambda h, w: (layer(h, w), None), x, ws)
    return jnp.sum(x)


def test_unrolled_layers_are_found_and_scan_is_not() -> None:
    rep = program.find_repeat(program.tokens(jax.make_jaxpr(jax.grad(unrolled))(W, X)))
    assert rep is not None and rep["copies"] >= 6  # 8 layers: the backward pass of the middle ones, one unit each
    assert program.find_repeat(program.tokens(jax.make_jaxpr(jax.grad(scanned))(W, X))) is None


def test_a_tree_map_over_same_shaped_leaves_is_no_loop() -> None:
    params = {f"w{i}": jnp.ones((16, 16)) for i in range(12)}

    def update(p: Any, g: Any) -> Any:  # an optimizer's per-leaf update: repeated, but no matmul
        return jax.tree.map(lambda a, b: a - 0.1 * jnp.sqrt(jnp.abs(b) + 1e-8) * jnp.sign(b) / 3.0, p, g)

    assert program.find_repeat(program.tokens(jax.make_jaxpr(update)(params, params))) is None


def attention_hlo(fn: Any) -> str:
    q = jnp.ones((2, 16, 4, 8))
    return jax.jit(jax.grad(lambda q, k, v: jnp.sum(fn(q, k, v) ** 2))).lower(q, q, q).compile().as_text()


def written_out(q: Any, k: Any, v: Any) -> Any:
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(q.shape[-1])
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)


def test_attention_formulation_on_the_cpu() -> None:
    mine = program.attention(attention_hlo(written_out))
    assert mine is not None and mine.kind == "unfused" and not mine.dot_product_attention
    assert mine.scores_shape == [2, 4, 16, 16] and mine.scores_bytes == 2 * 4 * 16 * 16 * 4
    dpa = program.attention(attention_hlo(jax.nn.dot_product_attention))
    assert dpa is not None and dpa.kind == "unfused" and dpa.dot_product_attention  # XLA's, on a CPU
    mlp = jax.jit(lambda x: jax.nn.softmax(jnp.tanh(x @ x.T))).lower(X).compile().as_text()
    assert program.attention(mlp) is None  # a softmax without two batched dots: no attention


def causal_written_out(q: Any, k: Any, v: Any) -> Any:
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k)
    t = q.shape[1]
    scores = jnp.where(jnp.tril(jnp.ones((t, t), bool)), scores, -1e9)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)


def padded_written_out(q: Any, k: Any, v: Any) -> Any:
    keep = (jnp.arange(q.shape[0] * q.shape[1]).reshape(q.shape[:2]) % 5 != 0)[:, None, None, :]  # [b, 1, 1, k]
    scores = jnp.where(keep, jnp.einsum("bqhd,bkhd->bhqk", q, k), -1e9)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)


def test_a_causal_mask_is_told_from_a_padding_mask_and_the_fix_follows() -> None:
    assert program.attention(attention_hlo(causal_written_out)).causal
    dpa = functools.partial(jax.nn.dot_product_attention, is_causal=True)
    assert program.attention(attention_hlo(dpa)).causal
    assert not program.attention(attention_hlo(written_out)).causal
    padded = program.attention(attention_hlo(padded_written_out))
    assert padded is not None and not padded.causal
    fix = fd.jax_attention_kernel({"info": {"step_program": {"attention": padded, "backend": "gpu"}}}).fix
    assert "is_causal=True" not in fix and "mask=" in fix  # an encoder's padding mask is not made causal


GPU_FUSED = """HloModule jit_step
ENTRY %main (p0: bf16[4,512,8,64]) -> bf16[4,512,8,64] {
  %p0 = bf16[4,512,8,64]{3,2,1,0} parameter(0)
  %cc = (bf16[4,8,512,64]{3,1,2,0}, u8[0]{0}) custom-call(%p0, %p0, %p0), custom_call_target="__cudnn$fmhaSoftmax", metadata={op_name="jit(step)/dot_product_attention"}
  ROOT %gte = bf16[4,512,8,64]{3,2,1,0} get-tuple-element(%cc), index=0
}"""
GPU_UNFUSED = """HloModule jit_step
  %dot.1 = f32[4,8,512,512]{3,2,1,0} dot(%q, %k), lhs_batch_dims={0,2}, lhs_contracting_dims={3}, rhs_batch_dims={0,2}, rhs_contracting_dims={3}, metadata={op_name="jit(step)/bqhd,bkhd->bhqk/dot_general"}
  %exponential.1 = f32[4,8,512,512]{3,2,1,0} exponential(%sub.1)
  %dot.2 = f32[4,8,512,64]{3,2,1,0} dot(%p, %v), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,2}, rhs_contracting_dims={1}, metadata={op_name="jit(step)/bhqk,bkhd->bhqd/dot_general"}
"""


def step_obs(hlo: str, backend: str) -> dict[str, Any]:
    return {"info": {"step_program": {"attention": program.attention(hlo), "backend": backend}}}


def test_attention_finding_on_a_gpu() -> None:
    assert program.attention(GPU_FUSED).kind == "fused"
    assert fd.jax_attention_kernel(step_obs(GPU_FUSED, "gpu")) is None  # cuDNN's fused kernel: nothing to say
    gpu = fd.jax_attention_kernel(step_obs(GPU_UNFUSED, "gpu"))
    assert gpu is not None and gpu.severity == "warning"  # 32 MiB of scores, over the 1 MiB line
    assert "32.00 MiB" in gpu.evidence and "implementation='cudnn'" in gpu.fix
    cpu = fd.jax_attention_kernel(step_obs(GPU_UNFUSED, "cpu"))
    assert cpu is not None and cpu.severity == "info"  # no fused kernel to choose on a CPU
    assert "cudnn" not in (cpu.fix + cpu.title).lower()  # no advice for a GPU the run does not have (issue 76)
    # a port that calls jax.nn.dot_product_attention: on a CPU nothing to say (it is not written out), on a GPU
    # the title names the call, not softmax(q @ k^T) @ v
    called = GPU_UNFUSED.replace('op_name="jit(step)/bhqk,bkhd->bhqd', 'op_name="jit(step)/dot_product_attention')
    assert program.attention(called).dot_product_attention  # named on a dot that is not the scores' own
    assert fd.jax_attention_kernel(step_obs(called, "cpu")) is None
    on_gpu = fd.jax_attention_kernel(step_obs(called, "gpu"))
    assert "jax.nn.dot_product_attention" in on_gpu.title and "softmax(q @ k^T)" not in on_gpu.title
    small = GPU_UNFUSED.replace("512,512", "16,16")
    assert fd.jax_attention_kernel(step_obs(small, "gpu")).severity == "info"  # 8 KiB of scores


def test_unrolled_loop_threshold() -> None:
    def prog(compile_s: float) -> dict[str, Any]:
        rep = {"period": 50, "copies": 24, "start": 4, "eqns": 1300}  # 1150 of 1300 equations are copies
        return {"info": {"step_program": {"repeat": rep, "compile_s": compile_s}}}

    assert fd.jax_unrolled_loop(prog(0.4)).severity == "info"  # 0.35 s for the copies
    warn = fd.jax_unrolled_loop(prog(0.6))  # 0.53 s for the copies
    assert warn.severity == "warning" and "24 copies of the same 50 operations" in warn.title
    assert fd.jax_unrolled_loop({"info": {"step_program": {"repeat": None, "compile_s": 9.0}}}) is None
    # 4 copies: a scan may not pay (a 4-layer GPT's port compiled and ran slower scanned): info, saying so
    four = {"info": {"step_program": {"repeat": {"period": 127, "copies": 4, "start": 12, "eqns": 2129},
                                      "compile_s": 5.4}}}
    few = fd.jax_unrolled_loop(four)
    assert few.severity == "info" and "time both before changing" in few.evidence
