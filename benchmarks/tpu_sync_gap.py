"""Where the synchronised step's extra milliseconds go on the chip: per step, the call's return (host dispatch) and
the wait, the batch given as NumPy or already on the device, the wait on the whole state or on the loss alone."""
import os, sys, time, statistics, json
sys.path.insert(0, "benchmarks")
import jax, numpy as np
cache = os.environ.get("JAX_COMPILATION_CACHE_DIR")
if cache:
    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
import jax_twin_vs_hf_flax as H
from twinbench.measure import device
from twinbench.spec import from_preset
preset, side = sys.argv[1], sys.argv[2]
spec = from_preset(preset); m, t = spec.model, spec.train
shape = {"preset": preset, "family": m.family, "ff": m.ff, "num_labels": m.num_labels, "precision": "bf16",
         "layers": m.layers, "d_model": m.d_model, "heads": m.heads, "vocab": m.vocab, "context": m.context,
         "batch": t.batch, "seq": t.seq, "lr": t.lr, "weight_decay": t.weight_decay, "seed": t.seed,
         "attention_impl": "splash"}
device.set_fp32_matmul("jax", precision="bf16")
spec2 = H.twin_spec(shape, *H.side_strategy(side))
from twinbench.models import family
from twinbench.strategies import registry
fam = family.get(spec2)
tr = registry.builder(spec2)(spec2, fam.init_weights(spec2.model, spec2.train.seed))
host = H.token_batches(shape)
dev = [jax.device_put(b) for b in host]
jax.block_until_ready(dev)
out = {}
t0 = time.perf_counter(); tr.step(*host[0]); tr.sync(); out["first_s"] = time.perf_counter() - t0
def run(batches, wait, n=20, tag=""):
    call, tot = [], []
    for i in range(n + 3):
        a = time.perf_counter(); loss = tr.step(*batches[i % len(batches)]); b = time.perf_counter()
        wait(loss); c = time.perf_counter()
        if i >= 3:
            call.append(b - a); tot.append(c - a)
    # back to back, synchronised at the two ends
    tr.sync(); a = time.perf_counter()
    for i in range(n):
        tr.step(*batches[i % len(batches)])
    tr.sync(); b2b = (time.perf_counter() - a) / n
    out[tag] = {"call_ms": round(1e3 * statistics.median(call), 3), "synced_ms": round(1e3 * statistics.median(tot), 3),
                "b2b_ms": round(1e3 * b2b, 3)}
    print(tag, out[tag], flush=True)
for r in range(2):
    run(host, lambda loss: tr.sync(), tag=f"numpy+state{r}")
    run(dev, lambda loss: tr.sync(), tag=f"device+state{r}")
    run(host, lambda loss: loss.block_until_ready(), tag=f"numpy+loss{r}")
    run(dev, lambda loss: loss.block_until_ready(), tag=f"device+loss{r}")
print(json.dumps({"preset": preset, "side": side, **out}))
