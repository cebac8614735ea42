"""The Record: one JSON object per run, the contract every later command (report, claims, advise) reads.

``results.jsonl`` holds one record per line, appended the moment its run ends. A failed run is a record
too, with ``status == "failed"``, the reason in ``error`` and the measured fields ``None``.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from twinbench.measure.device import host_cpu
from twinbench.measure.interference import busy_warning
from twinbench.measure.peak import HIGH_LOAD, MAX_SPREAD
from twinbench.spec import RunSpec

#: Record warnings about the conditions of a measurement start with one of these (the others are sharding's).
CONDITION_WARNINGS = ("machine busy:", "matmul peak:", "device shared:")


def _cores() -> int:
    """The threads a run of ``threads=0`` gets (all cores of this process's affinity), for records made
    before or without the worker (failed, skipped, timed out) to say what the run was given."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


@dataclass
class Record:
    # what was run
    framework: str
    strategy: str
    preset: str
    n_params: int | None
    batch: int
    seq: int
    layers: int
    d_model: int
    precision: str
    device: str | None
    device_count: int
    status: str  # "ok" | "failed"
    error: str | None = None
    # measured
    compile_s: float | None = None
    first_step_s: float | None = None
    step_ms: float | None = None
    step_ms_p10: float | None = None
    step_ms_p90: float | None = None
    tokens_per_s: float | None = None
    flops_per_token: int | None = None
    achieved_tflops: float | None = None
    peak_tflops: float | None = None
    mfu: float | None = None
    peak_mem_bytes: int | None = None
    compiles_during_steps: int | None = None
    loss_first: float | None = None
    loss_last: float | None = None
    versions: dict[str, str] = field(default_factory=dict)
    # conditions and extras
    run_id: str = ""
    heads: int = 0
    vocab: int = 0
    context: int = 0
    steps: int = 0
    warmup: int = 0
    threads: int = 0
    compile_cache: str = "cold"
    platform: str | None = None
    matmul_precision: str | None = None
    attention_kernel: str | None = None  # the twins' attention: torch SDPA's kernel, JAX's implementation
    devices_visible: int | None = None  # devices the process saw (device_count: the devices the run used)
    peak_tflops_datasheet: float | None = None
    mfu_datasheet: float | None = None
    peak_mem_source: str | None = None
    compiles_total: int | None = None
    wall_s: float | None = None
    step_ms_mean: float | None = None  # mean steady-state step (the median is step_ms)
    step_ms_async: float | None = None  # per step, the steady steps again unsynchronised (sync at the ends only)
    step_times_ms: list[float] = field(default_factory=list)  # every steady-state step, in order (scan-steps: /K)
    repeat: int = 0  # compare --repeats N: which repeat of its configuration this run is (0-based)
    config_id: str = ""  # the run_id of its configuration, shared by its repeats
    losses: list[float] = field(default_factory=list)
    # compilation cache evidence (compile_cache says cold/warm): programs loaded from the persistent cache
    # (JAX) or FX-graph/AOTAutograd cache hits (torch)
    compile_cache_hits: int | None = None
    steps_per_call: int = 1  # scan-steps: K steps per call; step times are call time / K
    spec: dict[str, Any] = field(default_factory=dict)
    # profiler trace of a few steps run after the measured ones (--trace DIR); None when not traced
    trace_path: str | None = None
    trace_error: str | None = None
    # --explain: phases by timing (after the measured steps) and the JAX step's HLO text (twinbench/explain)
    explain_timing: dict[str, float] = field(default_factory=dict)
    explain_hlo_path: str | None = None
    explain_error: str | None = None
    weights_path: str | None = None  # the trained canonical weights, with --save-weights (twinbench export --from)
    # many devices: params + optimizer state one device holds, where each array lives, what looks wrong
    state_bytes_per_device: int | None = None
    sharding: dict[str, Any] = field(default_factory=dict)  # distributed/sharding_report.py: build()
    warnings: list[str] = field(default_factory=list)
    # variable-length text and the input pipeline (task "classify"; input fields for every task)
    task: str = "lm"
    pad_pct: float | None = None  # share of processed tokens that are padding, whole run
    real_tokens_per_s: float | None = None  # steady state, counting only real (non-pad) tokens
    distinct_lengths: int | None = None  # distinct padded batch lengths the run fed the model
    compiles_in_loop: int | None = None  # programs compiled during the training steps, the first included
    input_wait_ms: float | None = None  # median time a steady step waited for its batch
    input_stall_pct: float | None = None  # steady-state waiting share of step time
    accuracy_first: float | None = None  # held-out accuracy before training (classify)
    accuracy_last: float | None = None  # held-out accuracy after the run (classify)
    # the conditions of the measurement: the machine's load when the run started (read by the runner right
    # before it started the worker) and how trustworthy the matmul peak behind the MFU is (measure/peak.py)
    xla_flags: str | None = None  # JAX runs: the XLA_FLAGS the run used (xla_flags.py adds the tuned CPU flags)
    load_avg_1m: float | None = None  # os.getloadavg()[0]
    cpu_count: int | None = None  # cores available to the run (the runner's CPU affinity)
    load_avg_1m_external: float | None = None  # load_avg_1m less what twinbench's own ended runs still add
    # measured during the timed steps (measure/interference.py): cores other processes kept busy, every core's
    # busy share, the window's length; the "machine busy" warning comes from these when present
    interference_cores: float | None = None
    cpu_busy_per_core: dict[str, float] = field(default_factory=dict)
    interference_window_s: float | None = None
    peak_measured_at: str | None = None  # ISO time (UTC) the peak was measured
    peak_spread: float | None = None  # max/min - 1 over the peak's timed repeats
    peak_load_per_core: float | None = None  # load per core while the peak was measured
    peak_device_shared: int | None = None  # other processes on the GPU while the peak was measured (NVML)
    device_shared: int | None = None  # other processes on the run's GPU(s) around its timed steps (NVML)
    # bring your own model (--model, twinbench/byo): how FLOPs were counted, the port's parity check
    # (--jax-model), the doctor's findings over a few extra steps of a JAX run
    # where it ran when submitted as a job (--launcher local|slurm, launch/): the launcher, the job's id and
    # nodes, and for a job the scheduler ended (killed, preempted, node failure...) its state
    launcher: str | None = None
    job_id: str | None = None
    job_nodes: list[str] = field(default_factory=list)
    launcher_state: str | None = None
    flops_convention: str | None = None
    parity: dict[str, Any] = field(default_factory=dict)
    doctor: dict[str, Any] = field(default_factory=dict)
    # where the peak memory went (measure/memory.py: parts, unaccounted, the preflight's estimate) and the
    # twins' attention formulation (models/options.py ATTENTION_IMPLS)
    memory_breakdown: dict[str, Any] = field(default_factory=dict)
    attention_impl: str = "default"
    # the machine: the host's CPU model and instruction set (the same comparison differs by machine; on a GPU
    # the host still feeds the device), measure/device.py host_cpu()
    host_cpu: str | None = None

    @classmethod
    def for_spec(cls, spec: RunSpec, status: str, **measured: Any) -> Record:
        """A record carrying the spec's identifying fields; ``measured`` fills the rest."""
        m, t = spec.model, spec.train
        base = dict(framework=spec.framework, strategy=spec.strategy, preset=spec.preset, n_params=None,
                    batch=t.batch, seq=t.seq, layers=m.layers, d_model=m.d_model, precision=t.precision,
                    device=None, device_count=spec.devices, status=status, run_id=spec.run_id(),
                    heads=m.heads, vocab=m.vocab, context=m.context, steps=t.steps, warmup=t.warmup,
                    threads=spec.threads or _cores(), compile_cache=spec.compile_cache, spec=spec.to_dict(),
                    task=spec.train.task, repeat=spec.repeat, config_id=spec.config_id(),
                    attention_impl=spec.attention_impl, host_cpu=host_cpu())
        return cls(**(base | measured))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Record:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


def condition_warnings(r: dict[str, Any]) -> list[str]:
    """Warnings about the conditions of a run: a busy machine, a matmul peak that is not to be trusted.

    Busy: from the CPU time other processes used during the timed steps (``interference_cores``,
    measure/interference.py) when the record has it; otherwise (records of an older twinbench) from the load:

    The load counted is ``load_avg_1m_external`` when known (the 1-minute load average less what
    twinbench's own ended runs still contribute to it), else ``load_avg_1m``; per core of ``cpu_count``.
    """
    out = []
    load = r.get("load_avg_1m_external")
    load = r.get("load_avg_1m") if load is None else load
    cpus = r.get("cpu_count")
    measured = busy_warning(r)
    if measured:
        out.append(measured)
    elif r.get("interference_cores") is not None:
        pass  # measured during the steps and quiet: the load average at the start is only secondary
    elif load is not None and cpus and load / cpus > HIGH_LOAD:
        out.append(f"machine busy: load average {load:.2f} on {cpus} core(s) ({load / cpus:.2f} per core, above "
                   f"{HIGH_LOAD}) when the run started; its timings are not reliable")
    spread = r.get("peak_spread")
    if spread is not None and spread > MAX_SPREAD:
        out.append(f"matmul peak: its repeats disagree by {spread:.0%} (above {MAX_SPREAD:.0%}), so the MFU is "
                   "uncertain; `twinbench peak --remeasure` on an idle machine")
    peak_load = r.get("peak_load_per_core")
    if peak_load is not None and peak_load > HIGH_LOAD:
        out.append(f"matmul peak: measured on a busy machine ({peak_load:.2f} load per core), so the MFU is "
                   "overstated; `twinbench peak --remeasure` on an idle machine")
    if r.get("peak_device_shared"):
        out.append(f"matmul peak: measured while {r['peak_device_shared']} other process(es) used the GPU, so the "
                   "MFU is overstated; `twinbench peak --remeasure` on an idle GPU")
    if r.get("device_shared"):
        out.append(f"device shared: {r['device_shared']} other process(es) held a context on this run's GPU(s) "
                   "around its timed steps; its timings are not reliable")
    return out


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one record and flush it to disk, so an interrupted run keeps every finished row."""
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


#: the fields every record has, whatever its status
REQUIRED = ("framework", "strategy", "status")


def read_records(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The twinbench records of a results file, and how many of its non-blank lines were not one (malformed
    JSON, or JSON without the fields every record has): for commands that read results users hand them."""
    records, bad = [], 0
    for line in path.read_text(errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if isinstance(rec, dict) and all(k in rec for k in REQUIRED):
            records.append(rec)
        else:
            bad += 1
    return records, bad


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every complete record of a results file; a torn last line (killed mid-write) is skipped."""
    out = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out
