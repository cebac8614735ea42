"""The child side of the runner: executes ONE RunSpec in a fresh process and writes its Record.

Usage (by ``runner.py`` only): ``python -m twinbench.worker SPEC.json RECORD.json``. Process-wide settings
(CPU affinity, allocator and compile-cache environment) are applied before any framework is imported.
"""

from __future__ import annotations

import json
import math
import os
import sys
import traceback
from pathlib import Path

from twinbench import compile_cache
from twinbench.record import Record
from twinbench.spec import RunSpec


def prepare_process(spec: RunSpec) -> int:
    """Pin threads and set the environment; return the number of CPU threads the run may use."""
    cpus = sorted(os.sched_getaffinity(0))
    if spec.threads and spec.threads < len(cpus):
        cpus = cpus[: spec.threads]
        os.sched_setaffinity(0, cpus)  # XLA and torch both size their thread pools from the affinity mask
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))  # torchrun: one process per device
    if local_world > 1:  # the ranks of one host share its cores instead of each taking all of them
        per, rank = max(len(cpus) // local_world, 1), int(os.environ.get("LOCAL_RANK", "0"))
        cpus = [cpus[(rank * per + k) % len(cpus)] for k in range(per)]
        os.sched_setaffinity(0, cpus)
    from twinbench.distributed import process_env

    os.environ.update(process_env(spec))  # JAX: simulated CPU devices, collectives between processes
    compile_cache.apply(spec)  # the run's own compilation caches (cold: fresh and empty), before any import
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # allocator peak = what the run used
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return len(cpus)


def execute(spec: RunSpec, threads: int) -> Record:
    """Build the strategy's trainer, run the timed loop, and compute every metric of the record."""
    from twinbench.data import pipeline, tasks
    from twinbench.measure import compiles, device, flops, peak
    from twinbench.measure.clock import per_step, percentile, time_steps
    from twinbench.measure.inputs import InputWaits
    from twinbench.models.weights import init_weights
    from twinbench.strategies import registry

    fw, t = spec.framework, spec.train
    if fw == "torch":
        import torch

        torch.set_num_threads(threads)
    from twinbench import distributed

    distributed.initialize(spec)  # jax.distributed / the torchrun process group: before any device query
    matmul_precision = device.set_fp32_matmul(fw)
    platform, device_name, device_count = device.describe(fw)
    monitor = compiles.monitor(fw)

    user = None
    if spec.model.family == "user":  # the user's own model (--model): its weights, batches, FLOPs (byo/)
        from twinbench.byo.run import UserRun

        user = UserRun(spec)
        weights = user.weights
    elif t.init_from:  # start from a local Hugging Face checkpoint (models/hf.py), not the fresh init
        from twinbench.models.hf import initial_weights

        weights = initial_weights(spec)
    else:
        weights = init_weights(spec.model, t.seed)
    n_params = user.n_params if user else sum(w.size for w in weights.values())
    trainer = registry.builder(spec)(spec, weights)
    k = getattr(trainer, "steps_per_call", 1)  # scan-steps: K steps per call, on K stacked batches
    # LM windows, classification batches tokenised and padded per call, or the user's batches
    run_data = user.run_data(k, trainer) if user else tasks.run_data(spec, k)
    host_batches = run_data.batches
    predict = getattr(trainer, "predict", None) if run_data.eval_batches else None
    n_eval = monitor.count()
    accuracy_first = tasks.accuracy(predict, run_data.eval_batches)  # before timing; its compiles set apart
    n_eval = monitor.count() - n_eval
    feed = InputWaits(pipeline.feed(host_batches, fw, "prefetch" in spec.modifiers))  # waits: measure/inputs
    n_loop = monitor.count()
    timing = time_steps(lambda i: trainer.step(*feed.next()), trainer.sync, t.steps // k,
                        math.ceil(t.warmup / k), monitor)
    n_loop = monitor.count() - n_loop
    warm_calls = max(math.ceil(t.warmup / k), 1)
    inputs = feed.summary(warm_calls, timing.step_s)
    timing = per_step(timing, k)
    tokens = run_data.token_stats(warm_calls * k, sum(timing.step_s) * k)
    for i, loss in enumerate(timing.losses):
        if not math.isfinite(loss):
            raise FloatingPointError(f"loss became {loss} at step {i + 1}")
    peak_mem, mem_source = device.peak_memory_bytes(fw)

    step_s = percentile(timing.step_s, 50)
    dtype = "bf16" if t.precision == "bf16" else "fp32"
    peak_measured = peak.measured_tflops(fw, platform, device_name, dtype, threads)
    peak_sheet = peak.datasheet_tflops(device_name, dtype) if platform != "cpu" else None
    if user:
        flops_tok = user.flops_per_token
    else:
        position = weights.get("wpe.weight", weights.get("embeddings.position_embeddings.weight"))
        flops_tok = flops.flops_per_token(n_params - position.size, spec.model.layers, spec.model.d_model, t.seq)
    tp = flops.throughput(tokens.pop("padded_tokens_per_step"), step_s, flops_tok, peak_measured)
    # multi-device strategies report device_count, state_bytes_per_device, sharding and warnings
    many = trainer.report() if hasattr(trainer, "report") else {}
    many.setdefault("device_count", device_count)
    sheet_devices = many["device_count"] if platform != "cpu" else 1
    if many["device_count"] > 1:  # MFU against the peak of every device the run used, not of one
        parallel = distributed.parallel_peaks(spec, platform, many["device_count"], threads)
        tp["mfu"] = tp["achieved_tflops"] / (peak_measured * parallel) if peak_measured else None
    accuracy_last = tasks.accuracy(predict, run_data.eval_batches)  # before tracing trains any further
    if user:  # after the measured steps: the doctor's extra steps (JAX), parity, FLOPs convention
        extra = user.fields(trainer, host_batches)
        many["warnings"] = list(many.get("warnings", [])) + extra.pop("warnings")
        many.update(extra)
    return Record.for_spec(
        spec, "ok", **many, n_params=int(n_params), device=device_name, platform=platform,
        threads=threads, compile_s=timing.compile_s, first_step_s=timing.first_step_s,
        step_ms=step_s * 1e3, step_ms_p10=percentile(timing.step_s, 10) * 1e3,
        step_ms_p90=percentile(timing.step_s, 90) * 1e3, step_ms_mean=sum(timing.step_s) / len(timing.step_s) * 1e3,
        flops_per_token=flops_tok,
        peak_tflops=peak_measured, peak_tflops_datasheet=peak_sheet,
        mfu_datasheet=tp["achieved_tflops"] / (peak_sheet * sheet_devices) if peak_sheet else None,
        peak_mem_bytes=peak_mem, peak_mem_source=mem_source,
        compiles_during_steps=timing.compiles_during_steps, compiles_total=monitor.count() - n_eval,
        compile_cache_hits=monitor.cache_hits(), steps_per_call=k,
        loss_first=timing.losses[0], loss_last=timing.losses[-1], losses=timing.losses,
        wall_s=timing.wall_s, matmul_precision=matmul_precision, versions=device.versions(fw),
        **_save_weights(spec, trainer), **_trace(spec, trainer, host_batches), **tp, **tokens, **inputs,
        compiles_in_loop=n_loop, accuracy_first=accuracy_first,
        accuracy_last=accuracy_last)


def _save_weights(spec: RunSpec, trainer: object) -> dict[str, str]:
    """With ``spec.save_weights``: the trained weights as a canonical safetensors file (before any trace step)."""
    if not spec.save_weights:
        return {}
    from twinbench.models.weights import save

    out = Path(spec.save_weights).resolve() / f"{spec.framework}-{spec.strategy}-{spec.run_id()}.safetensors"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    save(trainer.weights(), tmp)  # type: ignore[attr-defined]
    os.replace(tmp, out)  # atomic: a reader never sees half a file
    return {"weights_path": str(out)}


def _trace(spec: RunSpec, trainer: object, host_batches: list) -> dict[str, str | None]:
    """With ``spec.trace_dir``: profile a few steps AFTER the measured ones (their timing stays clean)."""
    if not spec.trace_dir:
        return {}
    from twinbench.measure.trace import trace_steps

    out = Path(spec.trace_dir) / f"{spec.framework}-{spec.strategy}-{spec.run_id()}"
    rank = int(os.environ.get("RANK", "0"))  # torchrun: every rank steps (collectives), each its own trace
    if spec.framework == "jax" and spec.num_processes > 1:
        import jax

        rank = jax.process_index()
    if rank or int(os.environ.get("WORLD_SIZE", "1")) > 1 or spec.num_processes > 1:
        out = out / f"rank{rank}"
    try:
        path = trace_steps(spec.framework, lambda i: trainer.step(*host_batches[i % len(host_batches)]),
                           trainer.sync, out)
        return {"trace_path": str(Path(path).resolve())}
    except Exception as e:  # a failed trace must not cost the measured run
        traceback.print_exc()
        return {"trace_error": f"{type(e).__name__}: {e}"[:300]}


def main(argv: list[str]) -> int:
    spec_path, out_path = Path(argv[0]), Path(argv[1])
    spec = RunSpec.from_dict(json.loads(spec_path.read_text()))
    threads = prepare_process(spec)
    try:
        record = execute(spec, threads)
        code = 0
    except Exception as e:  # the run failed: say why in one line, keep the traceback on stderr
        traceback.print_exc()
        first = (str(e).strip().splitlines() or [""])[0]
        record = Record.for_spec(spec, "failed", error=f"{type(e).__name__}: {first}"[:500])
        code = 1
    from twinbench import distributed

    if distributed.local_rank() == 0:  # under torchrun every rank runs this; one record per host
        out_path.write_text(json.dumps(record.to_dict()))
    distributed.finish()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
