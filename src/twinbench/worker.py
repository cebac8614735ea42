"""The child side of the runner: executes ONE RunSpec in a fresh process and writes its Record.

Usage (by ``runner.py`` only): ``python -m twinbench.worker SPEC.json RECORD.json``. Process-wide settings
(CPU affinity, allocator and compile-cache environment) are applied before any framework is imported.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from twinbench import backends, compile_cache, distributed, xla_flags
from twinbench.config import SpecError
from twinbench.data import pipeline, tasks
from twinbench.errors import error_line
from twinbench.folder_io import fresh_dir
from twinbench.lifeline import watch_parent
from twinbench.machine import ranks
from twinbench.measure import device, memory, metrics, peak, platforms
from twinbench.measure.clock import per_step, time_steps, time_window
from twinbench.measure.inputs import InputWaits
from twinbench.measure.interference import Interference, Meter
from twinbench.measure.trace import trace_steps
from twinbench.models import family
from twinbench.models.weights import save
from twinbench.record import Known, Record, for_spec
from twinbench.record_sections import (
    Compile,
    Explain,
    Input,
    Loss,
    Memory,
    Outputs,
    Sharding,
    Speed,
    Timing,
    Trace,
)
from twinbench.spec import USER, RunSpec
from twinbench.strategies import registry
from twinbench.strategies.base import optional

if TYPE_CHECKING:
    from twinbench.byo.run import UserFields
    from twinbench.distributed.sharding_report import Report


def prepare_process(spec: RunSpec) -> int:
    """Pin threads and set the environment; return the number of CPU threads the run may use."""
    cpus = sorted(os.sched_getaffinity(0))
    if spec.host.threads and spec.host.threads < len(cpus):
        cpus = cpus[: spec.host.threads]
        os.sched_setaffinity(0, cpus)  # XLA and torch both size their thread pools from the affinity mask
    launched = ranks()  # torchrun: one process per device
    local_world = launched.local_world_size or 1
    if local_world > 1:  # the ranks of one host share its cores instead of each taking all of them
        per, rank = max(len(cpus) // local_world, 1), launched.local_rank
        cpus = [cpus[(rank * per + k) % len(cpus)] for k in range(per)]
        os.sched_setaffinity(0, cpus)
    os.environ.update(distributed.process_env(spec))  # JAX: simulated CPU devices, collectives between processes
    xla_flags.apply(spec.host.xla_cpu_flags)  # twinbench's measured XLA CPU flags, unless the user set them
    compile_cache.apply(spec)  # the run's own compilation caches (cold: fresh and empty), before any import
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return len(cpus)


@dataclass
class Setup:
    """The process's framework state, fixed before the model is built."""

    threads: int
    matmul_precision: str
    platform: str
    device_name: str
    device_count: int
    monitor: Any  # the framework's compile-event counter (measure/compiles.py)


@dataclass
class Built:
    """What the strategy built for the run: the family, its weights, the trainer, the run's batches."""

    family: Any
    n_params: int
    trainer: Any
    steps_per_call: int
    run_data: Any
    predict: Any  # classification: the trainer's predict, for held-out accuracy; None otherwise
    user: Any = None  # --model: the user's run (byo/run.py: weights, batches, FLOPs, extra record fields)


@dataclass
class Loop:
    """What the timed loop measured, per step (scan-steps' K steps per call already divided out)."""

    timing: Any
    warm_calls: int
    compiles_in_loop: int
    compiles_eval: int
    cache_hits_eval: int  # of those, loaded from the persistent compilation cache
    inputs: dict[str, float | None]  # the input pipeline's waits (measure/inputs.py)
    tokens: dict[str, float]  # padding, real tokens (data/tasks.py)
    accuracy_first: float | None
    meter: Interference  # what other processes took during the timed steps (measure/interference.py)


#: What this run knows of itself so far (device, platform, matmul precision, parameters): a run that fails or
#: times out later still says what it was. Kept here and, when the runner gave a path, in a file beside the
#: record (``RECORD.json.known``), which the runner reads when the worker ends without a record.
KNOWN = Known()
_KNOWN_PATH: list[Path] = []


def known_path(out_path: Path) -> Path:
    """Where a worker writing ``out_path`` keeps what it knows of itself before its record exists."""
    return out_path.with_name(out_path.name + ".known")


def _know(**fields: Any) -> None:
    for name, value in fields.items():
        setattr(KNOWN, name, value)
    for path in _KNOWN_PATH:
        with contextlib.suppress(OSError):  # telling the runner must never cost the run
            path.write_bytes(msgspec.json.encode(KNOWN, enc_hook=str))  # torch's TorchVersion: its text


def setup(spec: RunSpec, threads: int) -> Setup:
    """Threads, the distributed runtime, fp32 matmul precision, the device, the compile monitor."""
    backend = backends.get(spec.framework)
    backend.set_threads(threads)
    distributed.initialize(spec)  # jax.distributed / the torchrun process group: before any device query
    platform, device_name, device_count = device.describe(spec.framework)
    if backend.attention_impl(spec.strategy.attention_impl) == "splash" and platform != "tpu":
        # Pallas's interpreter would run it off a TPU: the right maths, but nothing worth measuring
        raise SpecError(f"--attention-impl splash is a TPU kernel; this run's JAX platform is {platform}")
    matmul_precision = device.set_fp32_matmul(spec.framework, platform=platform, precision=spec.train.precision)  # in the platform's words
    return Setup(threads, matmul_precision, platform, device_name, device_count, backend.compile_monitor())

def build(spec: RunSpec) -> Built:
    """The family's initial (or ``--init-from``) weights, the strategy's trainer on them, the run's data."""
    fam = family.get(spec)  # a built-in family, or the user's model (--model: byo/family.py)
    if spec.train.init_from:  # start from a local Hugging Face checkpoint (models/hf.py), not the fresh init
        from twinbench.export import initial_weights

        weights = initial_weights(spec)
    else:
        weights = fam.init_weights(spec.model, spec.train.seed)
    user = None
    if spec.model.family == USER:  # the user's batches and extra record fields (byo/run.py)
        from twinbench.byo.run import UserRun

        user = UserRun(spec)
    trainer = registry.builder(spec)(spec, weights)
    k = optional(trainer, "steps_per_call")  # scan-steps: K steps per call, on K stacked batches
    # LM windows, classification batches tokenised and padded per call, or the user's batches
    run_data = user.run_data(k, trainer) if user else tasks.run_data(spec, k)
    predict = optional(trainer, "predict") if run_data.eval_batches else None
    n_params = int(fam.n_params(weights))
    return Built(fam, n_params, trainer, k, run_data, predict, user)


def timed_loop(spec: RunSpec, env: Setup, b: Built) -> Loop:
    """Accuracy before training (its compiles set apart), then the timed steps through the input pipeline."""
    t, k, monitor = spec.train, b.steps_per_call, env.monitor
    n_eval, hits_eval = monitor.count(), monitor.cache_hits()
    accuracy_first = tasks.accuracy(b.predict, b.run_data.eval_batches)  # before timing
    n_eval, hits_eval = monitor.count() - n_eval, monitor.cache_hits() - hits_eval
    feed = InputWaits(pipeline.feed(b.run_data.batches, spec.framework, spec.strategy.mods.prefetch))
    n_loop = monitor.count()
    with Meter() as meter:  # what other processes took from the machine while the steps were timed
        timing = time_steps(lambda i: b.trainer.step(*feed.next()), b.trainer.sync, t.steps // k,
                            math.ceil(t.warmup / k), monitor)
    n_loop = monitor.count() - n_loop
    warm_calls = max(math.ceil(t.warmup / k), 1)
    inputs = feed.summary(warm_calls, timing.step_s)
    timing = per_step(timing, k)
    tokens = b.run_data.token_stats(warm_calls * k, sum(timing.step_s) * k)
    for i, loss in enumerate(timing.losses):
        if not math.isfinite(loss):
            raise FloatingPointError(f"loss became {loss} at step {i + 1}")
    return Loop(timing, warm_calls, n_loop, n_eval, hits_eval, inputs, tokens, accuracy_first,
                meter.fields())


def execute(spec: RunSpec, threads: int) -> Record:
    """Set up, build the strategy's trainer, run the timed loop, compute the metrics, write the record."""
    env = setup(spec, threads)
    _know(device=env.device_name, platform=env.platform, matmul_precision=env.matmul_precision,
          devices_visible=env.device_count, versions=peak.framework_versions(spec.framework))
    b = build(spec)
    _know(n_params=b.n_params)
    runtime_bytes = memory.runtime_bytes(b.trainer)  # Python, libraries, host copies (CPU breakdown)
    flight = _preflight(spec, env, b)
    if flight is not None and not flight.fits:  # a run that cannot fit: skipped now, not failed minutes later
        return for_spec(spec, "skipped", error=flight.reason(), **KNOWN.fields(), threads=threads,
                        memory_breakdown={"preflight": flight.to_dict()})
    shared = device.other_device_processes(env.platform)  # NVML: other processes on this run's GPU(s)
    loop = timed_loop(spec, env, b)
    shared = max(shared, device.other_device_processes(env.platform))
    fw, t, timing = spec.framework, spec.train, loop.timing
    peak_mem, mem_source = device.peak_memory_bytes(fw)  # before the peak measurement runs its matmuls
    compiles_total = env.monitor.count() - loop.compiles_eval  # so are the programs: not the peak's matmuls
    # the same programs' loads from the persistent cache (not the probes' and the memory breakdown's after them)
    cache_hits = env.monitor.cache_hits() - loop.cache_hits_eval
    if flight is not None:  # a preflight that compiled the step: counted once, as the run's compile when step 1 reused it
        folded = flight.fold(timing.first_step_compiles)
        timing.compile_s += folded.compile_s
        timing.first_step_s += folded.first_step_s
        loop.compiles_in_loop += folded.compiles_in_loop
        compiles_total += folded.compiles_total
        cache_hits += folded.compile_cache_hits
    dtype = "bf16" if t.precision == "bf16" else "fp32"
    peak_measured, peak_fields = peak.for_record(fw, env.platform, env.device_name, dtype, threads)
    accelerator = platforms.get(env.platform).accelerator
    peak_sheet = peak.datasheet_tflops(env.device_name, dtype) if accelerator else None  # GPUs and TPUs by name
    flops_tok = b.family.flops_per_token(spec.model, attention_length(b.run_data, loop.warm_calls * b.steps_per_call))
    # multi-device strategies report device_count, state_bytes_per_device, sharding and warnings
    report = optional(b.trainer, "report")
    many: Report | None = report() if report else None
    device_count = many.device_count if many else 1  # the devices the run used: one, unless a strategy says
    parallel = distributed.parallel_peaks(spec, env.platform, device_count, threads) if device_count > 1 else 1
    tp = metrics.speed(timing, loop.tokens.pop("padded_tokens_per_step"), flops_tok, peak_measured, peak_sheet,
                       parallel, device_count if accelerator else 1)
    accuracy_last = tasks.accuracy(b.predict, b.run_data.eval_batches)  # before tracing trains any further
    attention = None
    if not b.user and spec.strategy.base.startswith("torchax"):  # torch's SDPA as torchax lowers it to XLA
        attention = ("torch SDPA through torchax (xla, unfused)" if spec.strategy.attention_impl == "default" else
                     "torch SDPA through torchax as " + device.jax_attention_label(spec.strategy.attention_impl))
    elif not b.user:  # which attention kernel the twins' attention ran (after the timed steps: a small probe)
        m = spec.model
        attention = device.attention_kernel(fw, m.heads, spec.train.seq, m.d_model // m.heads, dtype,
                                            causal=b.family.causal, masked=b.family.masked,
                                            jax_impl=spec.strategy.attention_impl)
    made = memory.breakdown(spec, b.trainer, b.run_data.batches[0], peak_mem, mem_source, runtime_bytes,
                            env.platform, flight.sizes if flight else None)
    peak_mem, mem_source = memory.record_peak(made, peak_mem, mem_source)  # a TPU's: the compiled step's
    # the record's memory_breakdown: the JSON explain and the report read (measure/memory.py to_dict)
    mem = made.to_dict() if isinstance(made, memory.Breakdown) else {"error": made}
    if flight is not None:
        mem["preflight"] = flight.to_dict()
    saved = _save_weights(spec, b.trainer)  # the weights of the measured steps, before any further step
    timing.async_step_s = _async_window(spec, env, b, loop)  # after the measured steps and what reads them
    user: UserFields | None = b.user.fields(b.trainer, b.run_data.batches, timing.losses) if b.user else None
    traced = _trace(spec, b.trainer, b.run_data.batches)  # profiled steps after the measured ones
    explained = _explain(spec, b.trainer, b.run_data.batches, traced)
    chosen = backends.get(fw).record_fields(spec.strategy.attention_impl)  # xla_flags, the attention that ran

    rec = for_spec(spec, "ok")
    rec.warnings = [*(many.warnings if many else []), *(user.warnings if user else [])]
    run = rec.run
    run.n_params, run.device, run.steps_per_call = b.n_params, env.device_name, b.steps_per_call
    run.device_count, run.devices_visible = device_count, env.device_count
    run.attention_impl = chosen.attention_impl
    c = rec.conditions
    c.threads, c.platform, c.versions, c.matmul_precision = threads, env.platform, device.versions(fw), \
        env.matmul_precision
    c.attention_kernel, c.xla_flags, c.glibc_tunables = attention, chosen.xla_flags, os.getenv("GLIBC_TUNABLES")
    c.device_shared = shared if accelerator else None
    c.interference_cores = loop.meter.interference_cores
    c.cpu_busy_per_core = loop.meter.cpu_busy_per_core
    c.interference_window_s = loop.meter.interference_window_s
    c.page_faults_per_step = timing.os_usage.page_faults_per_step
    c.kernel_cpu_share = timing.os_usage.kernel_cpu_share
    c.fault_cpu_share = timing.os_usage.fault_cpu_share
    rec.timing = Timing(first_step_s=timing.first_step_s, wall_s=timing.wall_s, **asdict(metrics.step_stats(timing)))
    rec.speed = Speed(flops_per_token=flops_tok, flops_convention=user.flops_convention if user else None,
                      peak_tflops=peak_measured, peak_tflops_datasheet=peak_sheet, **asdict(peak_fields), **asdict(tp))
    rec.compile = Compile(compile_s=timing.compile_s, compiles_during_steps=timing.compiles_during_steps,
                          compiles_total=compiles_total, compiles_in_loop=loop.compiles_in_loop,
                          compile_cache_hits=cache_hits)
    rec.memory = Memory(peak_mem_bytes=peak_mem, peak_mem_source=mem_source, breakdown=mem,
                        state_bytes_per_device=many.state_bytes_per_device if many else None)
    rec.input = Input(**loop.inputs, **loop.tokens)
    rec.loss = Loss(loss_first=timing.losses[0], loss_last=timing.losses[-1], losses=timing.losses,
                    accuracy_first=loop.accuracy_first, accuracy_last=accuracy_last)
    rec.trace, rec.explain, rec.outputs = traced, explained, saved
    rec.sharding = many.sharding if many else Sharding()
    if user:
        rec.parity, rec.doctor = user.parity, user.doctor
    return rec


def _async_window(spec: RunSpec, env: Setup, b: Built, loop: Loop) -> float | None:
    """Seconds per step of the steady steps run again, back to back, synchronised at the window's ends only
    (measure/clock.py ``time_window``): the same batches, fed the same way, after as many untimed steps as the
    run's warm-up (with +prefetch, at least the pipeline's depth) so that its feed is running, as the loop's was."""
    n = len(loop.timing.step_s)  # steady calls (per_step keeps their number)
    prefetch = spec.strategy.mods.prefetch
    warm = max(loop.warm_calls, pipeline.HOST_DEPTH + pipeline.DEVICE_DEPTH if prefetch else 1)
    batches = b.run_data.batches
    steady = (batches.window(loop.warm_calls, n, warm + n) if hasattr(batches, "window")
              else [batches[loop.warm_calls + i % n] for i in range(warm + n)])
    try:
        feed = iter(pipeline.feed(steady, spec.framework, prefetch))
        per_call = time_window(lambda i: b.trainer.step(*next(feed)), b.trainer.sync, n, env.monitor, warm)
    except Exception:  # a window that cannot run must not cost the measured run
        traceback.print_exc()
        return None
    return per_call / b.steps_per_call if per_call is not None else None


def _preflight(spec: RunSpec, env: Setup, b: Built) -> Any:
    """The memory estimate of measure/memory.py before the first step (None: off, or no estimate)."""
    if spec.no_preflight:
        return None
    n0, s0, h0, t0 = env.monitor.count(), env.monitor.seconds(), env.monitor.cache_hits(), time.perf_counter()
    try:
        flight = memory.preflight(spec, b.trainer, b.run_data.batches[0], env.platform, b.n_params)
    except Exception:  # an estimate that cannot be made must not cost the run
        traceback.print_exc()
        return None
    if flight is not None and flight.sizes:  # it compiled the step: the run's own compile (memory.jax_sizes)
        flight.compile = memory.PreflightCompile(compiles=env.monitor.count() - n0,
                                                 compile_s=env.monitor.seconds() - s0,
                                                 cache_hits=env.monitor.cache_hits() - h0,
                                                 wall_s=time.perf_counter() - t0)
    return flight


def attention_length(run_data: object, steady_from: int) -> int:
    """The sequence length the attention term of the FLOPs counts: the padded length of the steady steps,
    weighted by their tokens (``--seq`` for fixed windows and ``+pad-max``; less for ``+bucket``/``+dynamic``)."""
    lengths = run_data.lengths[steady_from:] or run_data.lengths  # type: ignore[attr-defined]
    padded = run_data.padded_tokens[steady_from:] or run_data.padded_tokens  # type: ignore[attr-defined]
    return max(1, round(sum(n * t for n, t in zip(padded, lengths, strict=True)) / sum(padded)))


def _save_weights(spec: RunSpec, trainer: object) -> Outputs:
    """With ``spec.output.save_weights``: the trained weights as a canonical safetensors file (before any trace step)."""
    if not spec.output.save_weights:
        return Outputs()
    out = Path(spec.output.save_weights).resolve() / f"{spec.framework}-{spec.strategy.name}-{spec.run_id()}.safetensors"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    save(trainer.weights(), tmp)  # type: ignore[attr-defined]
    os.replace(tmp, out)  # atomic: a reader never sees half a file
    return Outputs(weights_path=str(out))


def _trace(spec: RunSpec, trainer: object, host_batches: list) -> Trace:
    """With ``spec.output.trace_dir``: profile a few steps AFTER the measured ones (their timing stays clean)."""
    if not spec.output.trace_dir:
        return Trace()
    out = Path(spec.output.trace_dir) / f"{spec.framework}-{spec.strategy.name}-{spec.run_id()}"
    rank = backends.get(spec.framework).process_index(spec.launch.num_processes)  # every rank traces its own steps
    if rank or ranks().world_size > 1 or spec.launch.num_processes > 1:
        out = out / f"rank{rank}"
    try:
        # a new, empty folder reached through no link: the profiler writes by name into it (folder_io.fresh_dir)
        out = fresh_dir(out)
        path = trace_steps(spec.framework, lambda i: trainer.step(*host_batches[i % len(host_batches)]),
                           trainer.sync, out)
        return Trace(path=str(Path(path).resolve()))
    except Exception as e:  # a failed trace must not cost the measured run
        traceback.print_exc()
        return Trace(error=f"{type(e).__name__}: {e}"[:300])


def _explain(spec: RunSpec, trainer: object, host_batches: list, traced: Trace) -> Explain:
    """With ``spec.output.explain``: the step's phases by timing, after the measured and traced steps."""
    if not spec.output.explain:
        return Explain()
    from twinbench.explain.timing import in_worker

    return in_worker(spec, trainer, host_batches, traced.path)


def main(argv: list[str]) -> int:
    watch_parent()  # end with the runner, even when it is killed with SIGKILL
    spec_path, out_path = Path(argv[0]), Path(argv[1])
    spec = RunSpec.from_dict(json.loads(spec_path.read_text()))
    threads = prepare_process(spec)
    _KNOWN_PATH.append(known_path(out_path))
    try:
        record = execute(spec, threads)
        code = 0
    except Exception as e:  # the run failed: say why in one line, keep the traceback on stderr
        traceback.print_exc()
        record = for_spec(spec, "failed", error=error_line(e), **KNOWN.fields(), threads=threads)
        code = 1
    if distributed.local_rank() == 0:  # under torchrun every rank runs this; one record per host
        out_path.write_text(json.dumps(record.to_dict()))
    return distributed.end(code)  # a torchrun rank ends here (os._exit), see distributed.end


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
