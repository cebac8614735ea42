"""The peak MFU is measured against: best dense matmul FLOP/s of a framework on this device, and datasheets.

The measured peak is the best of a few square matmul sizes, each timed best-of-N with the device
synchronised; it is cached per (framework, device, dtype, threads) in the user's cache directory, so the
first run on a machine pays ~2-5 s once. For known GPUs the datasheet dense peak is reported beside it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

#: Dense (no sparsity) peak TFLOP/s from vendor datasheets, by dtype: fp32 (no TF32), tf32, bf16.
DATASHEET_TFLOPS: dict[str, dict[str, float]] = {
    "H200": {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4},
    "H100": {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4},  # SXM
    "A100": {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0},
    "L40S": {"fp32": 91.6, "tf32": 183.0, "bf16": 362.1},
    "A10": {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0},
    "V100": {"fp32": 15.7, "tf32": 15.7, "bf16": 0.0},
}


def datasheet_tflops(device_name: str, dtype: str) -> float | None:
    for key, table in DATASHEET_TFLOPS.items():
        if key.lower() in device_name.lower():
            return table.get(dtype) or None
    return None


def cache_root() -> Path:
    base = os.environ.get("TWINBENCH_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "twinbench")
    return Path(base)


def _sizes(platform: str) -> tuple[int, ...]:
    return (512, 1024, 2048) if platform == "cpu" else (4096, 8192)


def _bench(run, sync, n: int, reps: int) -> float:
    run()
    sync()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        run()
        sync()
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best / 1e12


def _measure(framework: str, platform: str, dtype: str) -> float:
    best = 0.0
    if framework == "jax":
        import jax
        import jax.numpy as jnp

        jdt = jnp.bfloat16 if dtype == "bf16" else jnp.float32
        for n in _sizes(platform):
            a = jax.random.normal(jax.random.key(0), (n, n), jdt)
            b = jax.random.normal(jax.random.key(1), (n, n), jdt)
            mm = jax.jit(jnp.matmul)
            out: list = []

            def run(mm=mm, a=a, b=b, out=out):
                out[:] = [mm(a, b)]

            best = max(best, _bench(run, lambda out=out: out[0].block_until_ready(), n, 5))
    else:
        import torch

        dev = torch.device("cuda" if platform == "cuda" else "cpu")
        tdt = torch.bfloat16 if dtype == "bf16" else torch.float32
        sync = torch.cuda.synchronize if platform == "cuda" else (lambda: None)
        for n in _sizes(platform):
            a = torch.randn(n, n, device=dev, dtype=tdt)
            b = torch.randn(n, n, device=dev, dtype=tdt)
            best = max(best, _bench(lambda a=a, b=b: torch.mm(a, b), sync, n, 5))
    return best


def measured_tflops(framework: str, platform: str, device_name: str, dtype: str, threads: int) -> float:
    """Best matmul TFLOP/s of ``framework`` here, from the cache or measured now (then cached)."""
    key = f"{framework}|{platform}|{device_name}|{dtype}|threads={threads}"
    path = cache_root() / "peaks.json"
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        cached = {}
    if key in cached:
        return float(cached[key])
    value = _measure(framework, platform, dtype)
    try:  # a fresh read, then an atomic replace: concurrent runs lose nothing
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            cached = json.loads(path.read_text())
        except (OSError, ValueError):
            cached = {}
        cached[key] = value
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cached, indent=1, sort_keys=True))
        tmp.replace(path)
    except OSError:
        pass
    return value
