"""Where a synchronised step's extra milliseconds go on the chip: per step, when the jitted call returns (the host's
dispatch) and when the wait ends, with the batch given as NumPy or already on the device, and the wait on the whole
state or on the loss alone; then the same steps back to back.

    python benchmarks/tpu_sync_gap.py PRESET [SIDE]   # SIDE as jax_twin_vs_hf_flax.py names it: ours, ours@OPT=V

On a TPU VM after `source benchmarks/tpu/setup.sh`; JAX_COMPILATION_CACHE_DIR, when set, is JAX's persistent cache
(a warm one saves the compile). Prints one line per variant and pass, then one JSON line of them all.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

STEPS, WARM = 20, 3


def trainer(preset: str, side: str) -> tuple[Any, dict[str, Any]]:
    """twinbench's trainer of ``side`` at the preset's shape (bf16, splash attention), and the shape."""
    import jax_twin_vs_hf_flax as hf

    from twinbench.measure import device
    from twinbench.models import family
    from twinbench.strategies import registry

    shape = hf.shape_of(preset, "bf16", os.environ.get("ATTENTION", "splash"))
    device.set_fp32_matmul("jax", precision="bf16")
    spec = hf.twin_spec(shape, *hf.side_strategy(side))
    fam = family.get(spec)
    return registry.builder(spec)(spec, fam.init_weights(spec.model, spec.train.seed)), shape


def variant(tr: Any, batches: list, wait: Any) -> dict[str, float]:
    """Median call and synchronised step of STEPS steps after WARM, then STEPS back to back (ms)."""
    call, whole = [], []
    for i in range(STEPS + WARM):
        a = time.perf_counter()
        loss = tr.step(*batches[i % len(batches)])
        b = time.perf_counter()
        wait(loss)
        if i >= WARM:
            call.append(b - a)
            whole.append(time.perf_counter() - a)
    tr.sync()
    a = time.perf_counter()
    for i in range(STEPS):
        tr.step(*batches[i % len(batches)])
    tr.sync()
    return {"call_ms": round(1e3 * statistics.median(call), 3), "synced_ms": round(1e3 * statistics.median(whole), 3),
            "b2b_ms": round(1e3 * (time.perf_counter() - a) / STEPS, 3)}


def main() -> None:
    import jax

    if len(sys.argv) < 2:
        sys.exit("usage: tpu_sync_gap.py PRESET [SIDE]")
    cache = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    if cache:
        jax.config.update("jax_compilation_cache_dir", cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    import jax_twin_vs_hf_flax as hf

    preset, side = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "ours")
    tr, shape = trainer(preset, side)
    host = hf.token_batches(shape)
    on_device = jax.block_until_ready([jax.device_put(b) for b in host])
    out: dict[str, Any] = {"preset": preset, "side": side}
    t0 = time.perf_counter()
    tr.step(*host[0])
    tr.sync()
    out["first_s"] = round(time.perf_counter() - t0, 2)
    for r in range(2):
        for batches, where in ((host, "numpy"), (on_device, "device")):
            for wait, what in ((lambda loss: tr.sync(), "state"), (lambda loss: loss.block_until_ready(), "loss")):
                out[f"{where}+{what}{r}"] = variant(tr, batches, wait)
                print(f"{where}+{what}{r}", out[f"{where}+{what}{r}"], flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
