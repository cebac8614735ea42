"""``twinbench predict``: a step's time, MFU and memory on a device this machine does not have.

The step's program is read here without running a step (``program.py``), each op costed by a roofline
against the target's datasheet (``roofline.py``, ``datasheets.py``), the error bar taken from how far the
predictions of the same kind were from measured steps (``calibration.py``), and ``--devices N`` adds the
data-parallel gradient all-reduce (``scaling.py``).
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from twinbench import backends
from twinbench.predict import calibration, scaling
from twinbench.predict.attention import fused_in
from twinbench.predict.datasheets import Datasheet, lookup, op_overhead_us
from twinbench.predict.roofline import Efficiency, Roofline, roofline
from twinbench.spec import RunSpec, SpecError

if TYPE_CHECKING:
    from twinbench.load_meter import Reading
    from twinbench.plan import Overrides

#: where each framework's step program is read ("module:function" of the spec): JAX's lowered HLO, torch's one
#: traced step on this CPU
PROGRAM_OF = {"jax": "twinbench.predict.program:jax_program", "torch": "twinbench.predict.torch_ops:torch_program"}
#: what a prediction of a framework on a platform it reaches another way says
PLATFORM_NOTES = {("torch", "tpu"): "torch on a TPU: costed as eager kernels on the TPU; torch reaches a TPU through "
                                    "torchax (jax:torchax with --model) or torch_xla, whose programs are XLA's"}
#: the fraction of the datasheet a framework reaches, by platform: matmuls of the bf16 peak (the measured
#: matmul peak over the datasheet's, JAX's, on the TPU and the GPU of benchmarks/RESULTS.md, "On a GPU" and "On
#: a TPU"; a CPU has no datasheet, its measured peak is the peak: 1.0) and memory-bound ops of the bandwidth
#: (what a STREAM-like copy reaches)
EFFICIENCY = {"tpu": (0.95, 0.85), "gpu": (0.70, 0.85), "cpu": (1.0, 0.85)}


@dataclass
class Prediction:
    """One strategy's predicted step on one device."""

    spec: RunSpec
    sheet: Datasheet
    roof: Roofline
    memory_range: tuple[float, float]  #: (lower, upper) bound of the step's peak bytes on one device
    n_params: int
    tokens: int
    grad_bytes: float
    factor: float = 1.0                #: the calibration factor applied (measured / predicted of the kind)
    steps_per_call: int = 1            #: steps the program's ops stand for (scan-steps: K)
    error_bar: calibration.ErrorBar | None = None
    memory_error_bar: calibration.ErrorBar | None = None  #: how far the memory estimates of the kind were
    curve: list[scaling.Point] = field(default_factory=list)
    source: str = ""
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        # the two bounds come from two fusion models, each a bound under its own assumptions: lower first
        self.memory_range = (min(self.memory_range), max(self.memory_range))

    @property
    def step_ms(self) -> float:
        return self.roof.step_ms * self.factor / self.steps_per_call

    @property
    def mfu(self) -> float:
        """Model FLOPs (the matmuls' FLOPs of the step) per second over the bf16 (or fp32) peak."""
        return self.roof.flops / self.steps_per_call / (self.step_ms / 1e3) / self.sheet.peak(_dtype(self.spec))

    @property
    def memory_bytes(self) -> float:
        """The estimate: the geometric middle of the bounds."""
        low, high = self.memory_range
        return math.sqrt(low * high)

    @property
    def fits(self) -> str:
        """yes (the upper bound fits), no (the estimate does not), or maybe (the estimate fits, the upper bound
        does not). The estimate decides "no", not the lower bound: the lower bound counts only what the
        largest fusions materialize, and the TPU's compiled steps held more than it every time (docs/predict.md)."""
        hbm = self.sheet.hbm_usable_gib * 2**30
        return "yes" if self.memory_range[1] <= hbm else "no" if self.memory_bytes > hbm else "maybe"

    def to_json(self) -> PredictionOut:
        return PredictionOut(
            framework=self.spec.framework, strategy=self.spec.strategy.name, preset=self.spec.preset,
            batch=self.spec.train.batch, seq=self.spec.train.seq, device=self.sheet.name,
            device_label=self.sheet.label, platform=self.sheet.platform,
            attention_impl=self.spec.strategy.attention_impl, step_ms=round(self.step_ms, 3),
            roofline_ms=round(self.roof.step_ms, 3), calibration_factor=round(self.factor, 4),
            mfu=round(self.mfu, 4), tokens_per_s=round(self.tokens / (self.step_ms / 1e3), 1),
            flops=self.roof.flops, bytes=self.roof.bytes,
            ms_by_kind={k: round(v, 3) for k, v in self.roof.by_kind().items()},
            dominant=[Dominant(op=lab, kind=kind, ms=round(ms, 3), bound=b) for lab, kind, ms, b in self.roof.dominant()],
            memory_bytes=self.memory_bytes, memory_bytes_range=list(self.memory_range),
            hbm_usable_bytes=self.sheet.hbm_usable_gib * 2**30, fits=self.fits,
            n_params=self.n_params, error_bar=self.error_bar, memory_error_bar=self.memory_error_bar,
            devices_curve=list(self.curve), source=self.source, notes=self.notes)


class Dominant(msgspec.Struct, kw_only=True, frozen=True):
    """One of the ops that take the most time (all layers together)."""

    op: str
    kind: str
    ms: float
    bound: str


class PredictionOut(msgspec.Struct, kw_only=True, frozen=True):
    """One prediction as ``predict --json`` writes it."""

    framework: str
    strategy: str
    preset: str
    batch: int
    seq: int
    device: str
    device_label: str
    platform: str
    attention_impl: str
    step_ms: float  # calibrated, per step
    roofline_ms: float  # the roofline's, per call
    calibration_factor: float
    mfu: float
    tokens_per_s: float
    flops: float
    bytes: float
    ms_by_kind: dict[str, float]
    dominant: list[Dominant]
    memory_bytes: float
    memory_bytes_range: list[float]
    hbm_usable_bytes: float
    fits: str  # yes, no or maybe
    n_params: int
    error_bar: calibration.ErrorBar | None
    memory_error_bar: calibration.ErrorBar | None
    devices_curve: list[scaling.Point]
    source: str
    notes: list[str]


def efficiency(sheet: Datasheet, spec: RunSpec) -> Efficiency:
    """The stated efficiencies and per-op overhead of ``spec``'s framework on ``sheet``'s platform."""
    from twinbench.predict.attention import attention_efficiency

    mm, mem = EFFICIENCY[sheet.platform]
    return Efficiency(mm, mem, op_overhead_us(sheet.platform, spec.framework, spec.strategy.name),
                      attention_efficiency(sheet.platform))


def program_of(spec: RunSpec):
    """The step's ops, read here (JAX: the lowered HLO; torch: one traced step on this CPU)."""
    module, func = PROGRAM_OF[spec.framework].split(":")
    return getattr(importlib.import_module(module), func)(spec)


def predict_one(spec: RunSpec, sheet: Datasheet, points: list[calibration.Point], fitted: dict,
                devices: int = 1, cache: dict | None = None, compile_step: bool = False) -> Prediction:
    """One strategy's prediction on ``sheet``, with its error bar, calibration factor and devices curve;
    ``compile_step``: its memory from the step compiled for the TPU by the TPU compiler (:func:`compiled`)."""
    key = (spec.framework, spec.strategy.name, spec.preset, spec.train.batch, spec.train.seq, spec.model,
           spec.strategy.attention_impl)
    prog = cache.get(key) if cache is not None else None
    if prog is None:
        prog = program_of(spec)
        if cache is not None:
            cache[key] = prog
    eff = efficiency(sheet, spec)
    ops, notes = prog.ops_for(sheet.platform), []
    if fused_in(spec):
        notes.append(f"{spec.strategy.attention_impl} attention: the einsum attention's ops replaced by one fused kernel "
                     "per layer, its scores left out of the memory (predict/attention.py)")
    if sheet.platform == "cpu":
        notes.append("on a CPU the roofline has been fast (the error bar): the step's dots run below the square-"
                     "matmul peak (0.87 of it at the small preset's shapes, alone) and its element-wise kernels "
                     "below the copy bandwidth; other processes on the cores slow a measured step further. "
                     "--calibrate with one measured run of yours scales the predictions of its kind")
    if note := PLATFORM_NOTES.get((spec.framework, sheet.platform)):
        notes.append(note)
    roof = roofline(ops, sheet, eff)
    kind = (sheet.platform, spec.framework)
    pred = Prediction(spec, sheet, roof, prog.memory_bytes, prog.n_params, prog.tokens, prog.grad_bytes,
                      factor=fitted.get(kind, 1.0), error_bar=calibration.error_bar(points, kind),
                      memory_error_bar=calibration.error_bar(points, kind, memory=True),
                      steps_per_call=prog.steps_per_call, source=prog.source, notes=notes)
    if compile_step:
        compiled(pred)
    if devices > 1:
        pred.curve = scaling.curve(pred.step_ms, pred.grad_bytes, sheet, spec.framework, spec.strategy.name, devices)
    return pred


def compiled(pred: Prediction) -> None:
    """``pred``'s step and memory replaced by those of its step compiled for its TPU here (``tpu_compile.py``):
    the step costed kernel by kernel as XLA:TPU built them, the memory the figure a run on the chip reports, so
    the memory error bar of the estimates no longer applies. A torch
    strategy (no XLA program) or a device that is not a TPU keeps the estimate, with a note saying why."""
    from twinbench.predict import tpu_compile
    from twinbench.predict.program import traced_trainer

    if pred.sheet.platform != "tpu":
        pred.notes.append(f"--compile: compiles for TPUs; {pred.sheet.name} keeps the estimate from the shapes")
        return
    if not backends.get(pred.spec.framework).READS_XLA_FLAGS:  # its step is no XLA program
        pred.notes.append("--compile: a torch strategy has no XLA program to compile; its memory is the "
                          "estimate (jax:torchax runs the same torch model as an XLA program)")
        return
    trainer, state, x, y = traced_trainer(pred.spec)
    step = tpu_compile.compile_step(trainer, x, y, device=pred.sheet.name, state=state)
    if step.ops:
        # what the compiled program's kernels leave out is costed as without --compile: the Mosaic kernels (a
        # fused attention's) and the host's dispatch
        kept = [t.op for t in pred.roof.times if t.op.kind in ("attention", "dispatch")]
        pred.roof = roofline([*step.ops, *kept], pred.sheet, efficiency(pred.sheet, pred.spec))
        pred.error_bar = calibration.error_bar(calibration.shipped(), (pred.sheet.platform, pred.spec.framework),
                                               compiled=True)
        if pred.factor != 1.0:  # --calibrate's factor was fitted to the model's predictions, not to these
            pred.notes.append(f"--calibrate: its factor ({pred.factor:.3f}) scales the model's predictions; the "
                              "compiled step's is given unscaled")
            pred.factor = 1.0
        pred.notes.append(f"step: the {len(step.ops)} kernels of the step compiled here for {step.device_kind}, "
                          "each costed by the products, element-wise work and HBM bytes XLA:TPU put in it; "
                          f"{step.kernels} Mosaic kernels (attention) costed by predict/attention.py")
    pred.memory_range = (step.peak_bytes, step.peak_bytes)
    pred.memory_error_bar = None
    s = step.sizes
    pred.notes.append(f"memory: the step compiled here for {step.device_kind} by {step.compiler} (no TPU used): "
                      f"arguments {s['argument'] / 2**30:.2f} + temporaries {s['temp'] / 2**30:.2f} + code "
                      f"{s['generated_code'] / 2**30:.2f} GiB + outputs not aliased to the arguments "
                      f"{(s['output'] - s['alias']) / 2**30:.2f} GiB, the sum a run on the chip reports as its peak")


def predict_point(point: calibration.Point, cache: dict, sheets: dict | None = None) -> float:
    """The (uncalibrated) predicted step of a measured point."""
    pred = predicted(point, cache, sheets)
    return pred.roof.step_ms / pred.steps_per_call


def predicted(point: calibration.Point, cache: dict, sheets: dict | None = None) -> Prediction:
    """The (uncalibrated) prediction of a measured point's configuration on its device."""
    from twinbench.plan import build_specs

    overrides: Overrides = dict(point.overrides())
    spec = build_specs(point.preset, point.framework, point.strategy, overrides,
                       attention_impl=point.attention_impl)[0]
    check_fits(spec, point.device)
    sheet = sheet_of(point.device, spec, {} if sheets is None else sheets)
    return predict_one(spec, sheet, [], {}, cache=cache)


def check_fits(spec: RunSpec, device: str, devices: int = 1) -> None:
    """Refuse (SpecError, one line) a step that cannot fit on ``device`` before its program is read: a model
    too large for the device is too large to read here too (limits.py)."""
    from twinbench import limits

    if device == "here":
        from twinbench.measure.memory import host_available_bytes

        limits.check_device(spec, "this machine (available memory)", host_available_bytes())
        return
    sheet = lookup(device)
    limits.check_device(spec, sheet.name, sheet.hbm_usable_gib * 2**30, devices)


def sheet_of(device: str, spec: RunSpec, sheets: dict[str, Datasheet]) -> Datasheet:
    """The datasheet of ``device`` for ``spec``; ``here`` measured once per framework and dtype (``sheets``)."""
    if device != "here":
        return lookup(device)
    key = f"{spec.framework}/{_dtype(spec)}/{spec.host.threads}"
    if key not in sheets:
        sheets[key] = here_sheet(spec.framework, _dtype(spec), spec.host.threads)
    return sheets[key]


def here_sheet(framework: str, dtype: str = "fp32", threads: int = 0) -> Datasheet:
    """This machine's CPU: the framework's matmul peak of ``dtype`` as a run of it here uses it (the same
    ``twinbench peak`` cache entry: read, or measured, in a fresh process with the run's XLA flags; the other
    dtype is given the same figure; ``threads``: the run's, 0 for all cores) and a quick memory-bandwidth
    measurement."""
    from twinbench.measure import device
    from twinbench.predict.datasheets import cpu_here

    name = device.cpu_name()
    tflops = _run_peak(framework, dtype, threads)
    return cpu_here({"fp32": tflops, "bf16": tflops}, _copy_gbps(), _ram_gib(), name)


class PeakUnavailable(RuntimeError):
    """This machine's matmul peak could not be read or measured."""


def _run_peak(framework: str, dtype: str, threads: int = 0) -> float:
    """The matmul peak (TFLOP/s) a run of ``framework`` on this CPU computes its MFU against. It is looked up
    in a fresh process, as a run does: JAX's entry is keyed on the run's XLA flags, which this process (jax
    already loaded for lowering, without them) does not have; a peak measured in here under another key was
    the largest part of the CPU's prediction error."""
    import json
    import tempfile
    from pathlib import Path

    from twinbench import runner

    with tempfile.TemporaryDirectory(prefix="twinbench-predict-") as tmp:
        out = Path(tmp, "peak.json")
        code, reason = runner.run_module("twinbench.measure.peak", [framework, dtype, str(threads), str(out)],
                                         900.0)
        if code != 0:
            raise PeakUnavailable(f"--device here: this CPU's {framework} {dtype} matmul peak: {reason}")
        return float(json.loads(out.read_text())["tflops"])


def _dtype(spec: RunSpec) -> str:
    return "bf16" if spec.train.precision == "bf16" else "fp32"


def _copy_gbps() -> float:
    """This machine's memory bandwidth: the best of a few 256 MiB array copies (read + write), GB/s."""
    import time

    import numpy as np

    a = np.ones(2**25, dtype=np.float64)
    b = np.empty_like(a)
    best = math.inf
    for _ in range(3):
        t = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t)
    return 2 * a.nbytes / best / 1e9


def _ram_gib() -> float:
    import os

    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def busy_here(specs: list[RunSpec], reading: Reading | None = None) -> list[str]:
    """``--device here`` on a machine other processes share: this CPU's sheet (its matmul peak, its copy
    bandwidth, measured now when not cached) is read while they take cores, so it says so, and the flag that
    keeps a predicted run's threads off theirs: ``--threads N``, N the cores they leave."""
    from twinbench.load_meter import LoadMeter

    r = reading if reading is not None else LoadMeter().now()
    others, cores = r.load_avg_1m_external, r.cpu_count
    if others is None or not cores or others <= 0.5 * cores:
        return []
    free = max(int(cores - others), 1)
    threads = {s.host.threads or cores for s in specs}
    fix = (f"; `--threads {free}` predicts a run on the {free} core(s) they leave (its peak measured at that count)"
           if max(threads) > free else "; measure on a quiet machine for the quiet figure")
    return [f"busy machine: other processes' load {others:.2f} on {cores} core(s) while this CPU's peak and memory "
            f"bandwidth were read: the prediction for `here` is this moment's, slower than a quiet machine's{fix}"]


#: the strategies whose one-device program predict reads (a JAX step it lowers, a torch step it traces on fake
#: tensors); the multi-device ones are the curve of --devices N over one of these, the naive port has no step
PREDICTED = {"jax": ("jit", "scan-layers", "scan-steps", "torchax", "port"),
             "torch": ("eager", "compile", "compile-regional")}


def check_covered(specs: list[RunSpec]) -> None:
    """A strategy predict does not read: one line naming what it covers (SpecError), before any work."""
    for s in specs:
        if s.strategy.base not in PREDICTED.get(s.framework, ()):
            covered = "; ".join(f"{fw}: {', '.join(names)}" for fw, names in PREDICTED.items())
            raise SpecError(f"--strategies {s.framework}:{s.strategy.name}: predict reads one device's program of "
                            f"{covered} (with modifiers such as +bf16); --devices N adds the data-parallel curve")


def run(specs: list[RunSpec], device: str, devices: int = 1, calibrate: Path | None = None,
        compile_step: bool = False, say: Any = None) -> tuple[list[Prediction], list[str]]:
    """Every spec's prediction on ``device``; the lines to print about the calibration used. ``compile_step``:
    memory from the step compiled for a TPU ``device`` here (checked before any work: libtpu is needed).
    ``say(line)``: told before each strategy's program is read (progress)."""
    sheets: dict[str, Datasheet] = {}
    sheet = lookup(device) if device != "here" else None  # an unknown device fails before any work
    if compile_step and sheet is not None and sheet.platform == "tpu":
        from twinbench.predict.tpu_compile import target_device

        target_device(device)  # no TPU compiler here: one line, before any program is read
    check_covered(specs)
    for s in specs:  # a step that cannot fit the device: refused before any program is read
        check_fits(s, device, devices)
    points, lines = calibration.shipped(), []
    fitted: dict = {}
    cache: dict = {}
    if calibrate is not None:
        from twinbench.measure.device import cpu_name

        user, skipped = calibration.points_from_records(calibrate, cpu_name())
        lines += [f"--calibrate: left out {s}" for s in skipped]
        if not user:
            left = f" ({len(skipped)} left out: {skipped[0]})" if skipped else ""
            raise calibration.CalibrationError(f"--calibrate {calibrate}: no usable record (an ok run with a step "
                                               f"time, on a device with a datasheet){left}")
        for p in user:
            try:
                p.predicted_ms = predict_point(p, cache, sheets)
            except SpecError as e:  # the record's values, not a flag the user gave: name the file and line
                where = p.source.rpartition(" line ")[2]
                raise calibration.CalibrationError(f"--calibrate {calibrate} line {where}: {e}") from None
        fitted = calibration.fit(user)
        points = points + user
        for (plat, fw), f in fitted.items():
            n = sum(1 for p in user if p.kind == (plat, fw))
            lines.append(f"--calibrate: {fw} on {plat}: measured / predicted = {f:.2f} over {n} point(s) of "
                         f"{calibrate.name}; predictions of that kind are scaled by it")
    if device == "here":
        lines += busy_here(specs)
    preds = []
    for s in specs:
        if say is not None:
            say(f"reading {s.framework}:{s.strategy.name}'s step ({backends.get(s.framework).PREDICT_READ})")
        preds.append(predict_one(s, sheet_of(device, s, sheets), points, fitted, devices, cache, compile_step))
    return preds, lines
