"""A twin's attention block (projections and the splash kernel), forward + backward, under the kernel's block
sizes and operand layouts, on a TPU.

What a layer's attention costs inside a twin's step (``layers_jax.splash_attention``: bf16 q, k, v ``[B, H, T, D]``,
a full or causal mask, a key padding mask as segment ids), timed as ``jax.value_and_grad`` of a weighted sum of its
output under one jit: median of ``--calls`` calls, each synchronised (``block_until_ready``), after two warm-up
calls that compile. Each variant is its own kernel, so the table says which block sizes a sequence should get.

    python benchmarks/tpu_splash_blocks.py --shape 32,12,512,64              # BERT-base 32 x 512
    python benchmarks/tpu_splash_blocks.py --shape 8,12,1024,64 --causal     # GPT-2 124M 8 x 1024
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import jax
import jax.numpy as jnp

#: name -> the BlockSizes keyword arguments it changes from the first's (every block the sequence's size,
#: ``splash_block``; the fused backward kernel; the kernel's own head-dim-minor layout)
VARIANTS: dict[str, dict] = {
    "blocks of the sequence's size, fused backward, head-dim-minor": {},
    "separate dq / dkv kernels": {"use_fused_bwd_kernel": False},
    "kv compute 256": {"block_kv_compute": 256, "block_kv_dkv_compute": 256},
    "kv compute 128": {"block_kv_compute": 128, "block_kv_dkv_compute": 128},
    "q 256 (fwd), q 256 (dkv)": {"block_q": 256, "block_q_dkv": 256},
    "q 256, kv 256": {"block_q": 256, "block_kv": 256, "block_kv_compute": 256, "block_q_dkv": 256,
                      "block_kv_dkv": 256, "block_kv_dkv_compute": 256},
    "q 1024 where it fits": {"block_q": 1024, "block_q_dkv": 1024},
    "kv 1024 where it fits": {"block_kv": 1024, "block_kv_compute": 1024, "block_kv_dkv": 1024,
                              "block_kv_dkv_compute": 1024},
    "k seq-minor": {"k_layout": "SEQ_MINOR"},
    "k, v seq-minor": {"k_layout": "SEQ_MINOR", "v_layout": "SEQ_MINOR"},
    "q, k, v seq-minor": {"q_layout": "SEQ_MINOR", "k_layout": "SEQ_MINOR", "v_layout": "SEQ_MINOR"},
}
LAYOUTS = ("q_layout", "k_layout", "v_layout")


def sizes(splash, T: int, over: dict):
    from twinbench.models.layers_jax import splash_block

    b = splash_block(T)
    kw = dict(block_q=b, block_kv=b, block_kv_compute=b, block_q_dkv=b, block_kv_dkv=b, block_kv_dkv_compute=b,
              use_fused_bwd_kernel=True)
    kw |= {k: v for k, v in over.items() if k not in LAYOUTS}
    kw |= {k: splash.QKVLayout[over[k]] for k in LAYOUTS if k in over}
    if not kw["use_fused_bwd_kernel"]:
        kw |= {"block_q_dq": b, "block_kv_dq": b}
    if any(type(v) is int and (v > T or T % v) for v in kw.values()):
        return None
    return splash.BlockSizes(**kw)


def time_variant(x, ws, heads: int, ids, causal: bool, block_sizes, calls: int, interpret: bool = False) -> float:
    """One attention block as the twins write it heads first: q, k, v projections writing ``[B, H, T, D]``
    (``Linear.to_heads``), the kernel, the output projection over the heads (``Linear.from_heads``)."""
    from jax.experimental.pallas.ops.tpu import splash_attention as splash

    T, C = x.shape[1:]
    D = C // heads
    head = splash.CausalMask((T, T)) if causal else splash.FullMask((T, T))
    kernel = splash.make_splash_mha(splash.MultiHeadMask([head] * heads), block_sizes=block_sizes, head_shards=1,
                                    q_seq_shards=1, interpret=interpret)

    def loss(x, wq, wk, wv, wo, g):
        q, k, v = (jnp.einsum("btc,hdc->bhtd", x, w.reshape(heads, D, C)) for w in (wq, wk, wv))
        q = q * jnp.asarray(1.0 / math.sqrt(D), q.dtype)
        if ids is None:
            y = jax.vmap(kernel)(q, k, v)
        else:
            y = jax.vmap(lambda q, k, v, s: kernel(q, k, v, segment_ids=splash.SegmentIds(q=s, kv=s)))(q, k, v, ids)
        out = jnp.einsum("bhtd,ohd->bto", y, wo.reshape(C, heads, D))
        return jnp.sum(out.astype(jnp.float32) * g)

    step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4)))
    g = jax.random.normal(jax.random.key(3), x.shape, jnp.float32)
    for _ in range(2):
        jax.block_until_ready(step(x, *ws, g))
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        jax.block_until_ready(step(x, *ws, g))
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="32,12,512,64", help="B,H,T,D")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--no-segment-ids", action="store_true", help="no key padding mask (no segment ids)")
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--interpret", action="store_true", help="Pallas's interpreter (a check off the chip)")
    a = ap.parse_args()
    from jax.experimental.pallas.ops.tpu import splash_attention as splash

    B, H, T, D = (int(x) for x in a.shape.split(","))
    C = H * D
    ks = jax.random.split(jax.random.key(0), 5)
    x = jax.random.normal(ks[0], (B, T, C), jnp.bfloat16)
    ws = [jax.random.normal(kk, (C, C), jnp.bfloat16) * 0.02 for kk in ks[1:]]
    ids = None if a.no_segment_ids else jnp.ones((B, T), jnp.int32)
    # the kernel: 3.5x its forward (a backward that recomputes); the four projections: 3x theirs
    flops = 4 * B * H * T * T * D * (0.5 if a.causal else 1.0) * 3.5 + 4 * 2 * B * T * C * C * 3
    print(f"# attention block (projections + splash) fwd+bwd {B}x{H}x{T}x{D} bf16, {'causal' if a.causal else 'full'}, "
          f"{'no segment ids' if ids is None else 'segment ids'}; {jax.devices()[0].device_kind}, jax {jax.__version__}")
    print("| variant | ms | TFLOP/s |\n|---|---:|---:|")
    for name, over in VARIANTS.items():
        bs = sizes(splash, T, over)
        if bs is None:
            continue
        try:
            ms = time_variant(x, ws, H, ids, a.causal, bs, a.calls, a.interpret)
            print(f"| {name} | {ms:.3f} | {flops / ms / 1e9:.1f} |", flush=True)
        except Exception as e:  # a variant the kernel refuses is a row, not the end
            print(f"| {name} | refused: {str(e).splitlines()[0][:100]} | |", flush=True)


if __name__ == "__main__":
    main()
