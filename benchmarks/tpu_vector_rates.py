"""The chip's element-wise throughput, alone and fused into a matrix product: what an op such as an exact (erf)
GELU costs where XLA:TPU recomputes it inside the product that reads it (BERT's MLP), against the product alone.

    python benchmarks/tpu_vector_rates.py [--rows 16384] [--d 768] [--ff 3072] [--calls 30]

Each case is one jitted function, timed as the median of ``--calls`` synchronised calls after three warm-up calls
(compile apart). Prints one JSON line per case: ms, elements (or FLOPs) per second, and the shapes."""

from __future__ import annotations

import argparse
import json
import statistics
import time

import jax
import jax.numpy as jnp


def timed(fn, *args, calls: int) -> float:
    """The device's time per call: ``calls`` calls back to back (the host's dispatch overlaps the device's work),
    synchronised at the window's ends; the median of five windows."""
    for _ in range(3):
        jax.block_until_ready(fn(*args))
    windows = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):  # the chip runs them in order: the last one's end is the window's
            out = fn(*args)
        jax.block_until_ready(out)
        windows.append((time.perf_counter() - t0) / calls)
    return statistics.median(windows)


def chain(v: jax.Array, n: int) -> jax.Array:
    """``n`` multiply-adds in fp32 on every element (2n vector ops an element, none of them transcendental)."""
    v = v.astype(jnp.float32)
    for i in range(n):
        v = v * (1.0 + 1e-3 * i) + 1e-3
    return v.astype(jnp.bfloat16)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=16384)  # BERT-base 32 x 512 tokens
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--ff", type=int, default=3072)
    ap.add_argument("--calls", type=int, default=30)
    a = ap.parse_args()
    k = jax.random.split(jax.random.key(0), 4)
    bf = jnp.bfloat16
    x = jax.random.normal(k[0], (a.rows, a.d), bf)
    w1 = jax.random.normal(k[1], (a.d, a.ff), bf) * 0.02
    h = jax.random.normal(k[2], (a.rows, a.ff), bf)
    w2 = jax.random.normal(k[3], (a.ff, a.d), bf) * 0.02
    lg = jax.random.normal(k[3], (8192, 50257), bf)
    erf = lambda v: jax.nn.gelu(v, approximate=False)  # noqa: E731
    tanh = lambda v: jax.nn.gelu(v, approximate=True)  # noqa: E731
    silu = jax.nn.silu
    cases = {
        "dot_up": (lambda x, w: x @ w, (x, w1), 2 * a.rows * a.d * a.ff),
        "dot_down": (lambda h, w: h @ w, (h, w2), 2 * a.rows * a.d * a.ff),
        "erf_gelu_bf16": (erf, (h,), h.size),
        "tanh_gelu_bf16": (tanh, (h,), h.size),
        "silu_bf16": (silu, (h,), h.size),
        "erf_gelu_fp32": (lambda v: erf(v.astype(jnp.float32)).astype(bf), (h,), h.size),
        "tanh_gelu_fp32": (lambda v: tanh(v.astype(jnp.float32)).astype(bf), (h,), h.size),
        "add_bf16": (lambda v: v + 1, (h,), h.size),
        "exp_fp32": (lambda v: jnp.exp(v.astype(jnp.float32)).astype(bf), (h,), h.size),
        "dot_up_then_erf": (lambda x, w: erf(x @ w), (x, w1), 2 * a.rows * a.d * a.ff),
        "erf_into_dot_down": (lambda h, w: erf(h) @ w, (h, w2), 2 * a.rows * a.d * a.ff),
        "tanh_into_dot_down": (lambda h, w: tanh(h) @ w, (h, w2), 2 * a.rows * a.d * a.ff),
        "silu_into_dot_down": (lambda h, w: silu(h) @ w, (h, w2), 2 * a.rows * a.d * a.ff),
        "erf_stored_dot_down": (lambda h, w: jax.lax.optimization_barrier(erf(h)) @ w, (h, w2),
                                2 * a.rows * a.d * a.ff),
        # the weight gradient of the second product reads the activation: [ff, rows] x [rows, d]
        "erf_into_wgrad": (lambda h, g: erf(h).T @ g, (h, x), 2 * a.rows * a.d * a.ff),
        "plain_wgrad": (lambda h, g: h.T @ g, (h, x), 2 * a.rows * a.d * a.ff),
        # plain vector work, its op count known: 2 x 8 and 2 x 32 fp32 ops an element, alone and fused into a product
        "chain8_bf16": (lambda v: chain(v, 8), (h,), h.size),
        "chain32_bf16": (lambda v: chain(v, 32), (h,), h.size),
        "chain8_into_dot_down": (lambda h, w: chain(h, 8) @ w, (h, w2), 2 * a.rows * a.d * a.ff),
        "chain32_into_dot_down": (lambda h, w: chain(h, 32) @ w, (h, w2), 2 * a.rows * a.d * a.ff),
        "dot_up_then_chain32": (lambda x, w: chain(x @ w, 32), (x, w1), 2 * a.rows * a.d * a.ff),
        # the loss's fp32 log-softmax over a vocabulary (GPT-2's, at 8 x 1024 tokens)
        "log_softmax_fp32": (lambda v: jax.nn.log_softmax(v.astype(jnp.float32), -1), (lg,), lg.size),
    }
    print(json.dumps({"device": jax.devices()[0].device_kind, "jax": jax.__version__, "rows": a.rows, "d": a.d,
                      "ff": a.ff}), flush=True)
    for name, (fn, args, work) in cases.items():
        s = timed(jax.jit(fn), *args, calls=a.calls)
        print(json.dumps({"case": name, "ms": round(1e3 * s, 4), "work": work, "per_s": work / s}), flush=True)


if __name__ == "__main__":
    main()
