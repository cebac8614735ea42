"""The gradient of a position-embedding table, by the two ways a JAX model looks positions up, on this machine.

``wpe[arange(T)]`` broadcast over the batch (one row per position) makes the table's gradient a reduction of the
``[B, T, C]`` gradient over the batch, then a scatter of T rows; ``wpe[broadcast(arange(T), (B, T))]`` (one row per
token, as Hugging Face's Flax GPT-2 and FlaxBert) makes it one scatter-add of B x T rows. A slice of the table
(``wpe[:T]``) is the first with a pad instead of the scatter. Each is ``jax.vjp`` of the lookup under one jit,
median of ``--calls`` synchronised calls; run it under the ``XLA_FLAGS`` to compare (twinbench's runs on a CPU add
``--xla_cpu_experimental_ynn_fusion_type=-eltwise``).

    python benchmarks/position_lookup.py --shape 8,128,256
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import jax
import jax.numpy as jnp


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="8,128,256", help="B,T,C (the table has T rows)")
    ap.add_argument("--calls", type=int, default=300)
    a = ap.parse_args()
    B, T, C = (int(x) for x in a.shape.split(","))
    table = jax.random.normal(jax.random.key(0), (T, C))
    grad = jax.random.normal(jax.random.key(1), (B, T, C))
    lookups = {
        "one row per position, [T], broadcast": lambda w: jnp.broadcast_to(jnp.take(w, jnp.arange(T), axis=0), (B, T, C)),
        "one row per token, [B, T]": lambda w: jnp.take(w, jnp.broadcast_to(jnp.arange(T), (B, T)), axis=0),
        "a slice, broadcast": lambda w: jnp.broadcast_to(w[:T], (B, T, C)),
    }
    print(f"# the table's gradient, {B} x {T} x {C} fp32; {jax.devices()[0].device_kind}, jax {jax.__version__}, "
          f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")
    for name, lookup in lookups.items():
        vjp = jax.jit(lambda w, g, f=lookup: jax.vjp(f, w)[1](g)[0])
        vjp(table, grad).block_until_ready()
        times = []
        for _ in range(a.calls):
            t0 = time.perf_counter()
            vjp(table, grad).block_until_ready()
            times.append(time.perf_counter() - t0)
        print(f"{name}: {statistics.median(times) * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
