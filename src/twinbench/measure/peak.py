"""The peak MFU is measured against: best dense matmul FLOP/s of a framework on this device, and datasheets.

How it is measured: square matmuls of a few sizes, each size timed ``REPEATS`` times (device synchronised)
after one untimed warm-up call, smallest first, stopping after a size whose calls take over 50 ms (already
at peak; bf16 on a CPU would otherwise take tens of seconds); the peak is the best repeat of the fastest
size, and the *spread* of that size's repeats (max/min - 1) says how far they agree. A measurement whose
repeats disagree by more than ``MAX_SPREAD`` (10%) is taken again (that size only), up to ``ATTEMPTS``
times (once on a busy machine, whose figure is not trusted anyway); if none agrees, the one that agrees best is
kept but not trusted, and every record that uses it carries a warning (``twinbench peak --remeasure`` exits 1).

The cache (``peaks.json`` in the twinbench cache directory, keyed on framework, platform, device, dtype,
threads and the framework's versions: an upgrade measures again) and its entries (:class:`Peak`) are
``peak_cache.py``; its names are importable from here too.

Load policy. A peak measured on a busy machine is too low, by any factor, and inflates every later MFU, so an
entry is *trusted* only if its repeats agree and the load per core
(1-minute load average / cores, other processes only: see ``runner.py``) was at most ``HIGH_LOAD`` (0.5)
when it was measured. An untrusted entry is measured again as soon as the machine is quiet (load per core
<= 0.5); while it is busy the untrusted entry is used as it is (measuring again under load would not give
a better figure) and the records say so. A trusted entry is never replaced automatically, even when the
current load is high: the run's own record then carries the load warning. ``twinbench peak --remeasure``
measures again unconditionally; a refused measurement never replaces a trusted one.

For known GPUs and TPUs the datasheet dense peak is reported beside the measured one (:func:`datasheet`).
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from twinbench import backends, xla_flags
from twinbench.machine import HIGH_LOAD, LOAD_ENV, MAX_SPREAD
from twinbench.measure import device, platforms
from twinbench.measure.peak_cache import (  # the cache; re-exported: callers import them from here
    FORMAT,
    Method,
    Peak,
    PeakFields,
    age_s,
    cache_key,
    cache_path,
    cached_peaks,
    fmt_age,
    framework_versions,
    measuring,
    read_cache,
    table,
    write_peak,
)

__all__ = [
    "ATTEMPTS", "DATASHEETS", "DATASHEET_TFLOPS", "FORMAT", "LONG_CALL_S", "MAX_CALLS", "MIN_REPEAT_S", "REPEATS",
    "Datasheet", "Method", "Peak", "PeakFields", "age_s", "cache_key", "cache_path", "cached_peaks", "calls_per_repeat",
    "current_load_per_core", "datasheet", "datasheet_tflops", "fmt_age", "for_record", "framework_versions",
    "gpu_model", "lookup", "measure", "measured_tflops", "read_cache", "spread", "table", "tpu_model",
]

GB = 10**9
GiB = 2**30


@dataclass(frozen=True)
class Datasheet:
    """A device's vendor figures, dense (no sparsity): what a step-time model or an MFU divides by.

    ``fp32_tflops``: the fp32 matmul peak (no TF32); on a TPU, whose matrix unit multiplies bf16 only, the
    rate of fp32 matmuls at JAX's ``highest`` precision (6 bf16 passes): bf16 / 6. ``hbm_gbs``: memory
    bandwidth (GB/s = 1e9 bytes/s); ``hbm_bytes``: memory size; ``interconnect_gbs``: the chip-to-chip
    bandwidth of one device (NVLink, Infinity Fabric, a TPU's ICI), None where it has none."""

    name: str
    bf16_tflops: float | None
    fp32_tflops: float | None
    hbm_gbs: float | None
    hbm_bytes: int | None
    interconnect_gbs: float | None = None
    tf32_tflops: float | None = None
    int8_tops: float | None = None

    def tflops(self, dtype: str) -> float | None:
        """The dense peak of ``dtype`` ("bf16", "fp32", "tf32", "int8")."""
        return {"bf16": self.bf16_tflops, "fp32": self.fp32_tflops, "tf32": self.tf32_tflops,
                "int8": self.int8_tops}.get(dtype)


#: Vendor datasheets, by GPU model and form factor, or TPU generation. Form factors differ (an H100 PCIe has
#: ~3/4 of an SXM's tensor throughput), so a GPU is matched on its model AND form factor (:func:`gpu_model`);
#: a device that matches no entry exactly (A10G, a new GPU) has no datasheet figure, and the record says so
#: rather than borrowing a neighbour's. TPUs are matched on ``device_kind`` (:func:`tpu_model`); their
#: interconnect is the ICI bandwidth per chip (Cloud TPU system architecture pages).
DATASHEETS: dict[str, Datasheet] = {d.name: d for d in (
    Datasheet("H200 SXM", 989.4, 67.0, 4800, 141 * GB, 900, 494.7, 1979),
    Datasheet("H200 NVL", 835.5, 60.0, 4800, 141 * GB, 900, 417.5, 1671),
    Datasheet("H100 SXM", 989.4, 67.0, 3350, 80 * GB, 900, 494.7, 1979),
    Datasheet("H100 PCIe", 756.0, 51.2, 2000, 80 * GB, 600, 378.0, 1513),
    Datasheet("H100 NVL", 835.5, 60.0, 3900, 94 * GB, 600, 417.5, 1671),
    Datasheet("A100", 312.0, 19.5, 2039, 80 * GB, 600, 156.0, 624),  # SXM4 80GB; the 40GB: 1555 GB/s
    Datasheet("L40S", 362.1, 91.6, 864, 48 * GB, None, 183.0, 733),
    Datasheet("L40", 181.0, 90.5, 864, 48 * GB, None, 90.5, 362),
    Datasheet("L4", 121.0, 30.3, 300, 24 * GB, None, 60.0, 242),
    Datasheet("A10", 125.0, 31.2, 600, 24 * GB, None, 62.5, 250),
    Datasheet("V100 SXM", None, 15.7, 900, 32 * GB, 300),
    Datasheet("V100 PCIe", None, 14.0, 900, 32 * GB, None),
    Datasheet("MI300X", 1307.4, 163.4, 5300, 192 * GB, 896, 653.7, 2614.9),
    # TPUs: bf16 dense, int8, HBM bandwidth and size, ICI per chip
    Datasheet("TPU v4", 275.0, 275.0 / 6, 1228, 32 * GiB, 300, None, 275.0),
    Datasheet("TPU v5e", 197.0, 197.0 / 6, 819, 16 * GiB, 200, None, 394.0),
    Datasheet("TPU v5p", 459.0, 459.0 / 6, 2765, 95 * GiB, 600, None, 918.0),
    Datasheet("TPU v6e", 918.0, 918.0 / 6, 1640, 32 * GiB, 448, None, 1836.0),
)}
#: The dense peak TFLOP/s of each datasheet by dtype (fp32 = no TF32, tf32, bf16): the table older code reads.
DATASHEET_TFLOPS: dict[str, dict[str, float]] = {
    k: {dt: v for dt in ("fp32", "tf32", "bf16") if (v := d.tflops(dt)) is not None} for k, d in DATASHEETS.items()}
#: Models sold in several form factors with different peaks; the others have one entry under their model name.
FORM_FACTORS = {"H200": ("SXM", "NVL"), "H100": ("SXM", "PCIe", "NVL"), "V100": ("SXM", "PCIe")}
#: TPU ``device_kind`` strings -> the datasheet entry: JAX names a v5e "TPU v5 lite" and a v6e "TPU v6 lite";
#: a v5p says "TPU v5p" or, on older runtimes, "TPU v5".
TPU_KINDS = {"v4": "TPU v4", "v5 lite": "TPU v5e", "v5e": "TPU v5e", "v5litepod": "TPU v5e", "v5": "TPU v5p",
             "v5p": "TPU v5p", "v6 lite": "TPU v6e", "v6e": "TPU v6e"}


def tpu_model(device_name: str) -> str | None:
    """The datasheet entry of a TPU's ``device_kind``: ``"TPU v5 lite"`` -> ``"TPU v5e"``, ``"TPU v5"`` ->
    ``"TPU v5p"``, ``"TPU v6 lite"`` -> ``"TPU v6e"``; None for a GPU's name or an unknown generation."""
    import re

    m = re.fullmatch(r"\s*tpu\s*(v\d+\s*(?:lite(?:pod)?|[a-z])?)\s*", device_name.lower())
    if not m:
        return None
    kind = " ".join(m.group(1).split())  # "v5  lite" -> "v5 lite"
    return TPU_KINDS.get(kind)


def gpu_model(device_name: str) -> str | None:
    """The datasheet entry of a device name, matched on whole tokens: ``"NVIDIA H100 PCIe"`` -> ``"H100 PCIe"``,
    ``"NVIDIA H100 80GB HBM3"`` -> ``"H100 SXM"``, ``"NVIDIA L40S"`` -> ``"L40S"`` (never ``"L4"``),
    ``"AMD Instinct MI300X"`` -> ``"MI300X"``, ``"NVIDIA A10G"`` -> None (no datasheet of its own)."""
    import re

    tokens = [t for t in re.split(r"[\s\-_/]+", device_name.upper()) if t]
    models = {k.split()[0].upper(): k.split()[0] for k in DATASHEETS if not k.startswith("TPU")}
    model = next((models[t] for t in tokens if t in models), None)
    if model is None:
        return None
    if model not in FORM_FACTORS:
        return model
    if "PCIE" in tokens:
        form = "PCIe"
    elif "NVL" in tokens:
        form = "NVL"
    else:  # SXM modules report ``SXM``, ``SXM5`` or only their memory (``80GB HBM3``, ``H200``)
        form = "SXM"
    key = f"{model} {form}"
    return key if key in DATASHEETS else None


def datasheet(device_name: str | None) -> Datasheet | None:
    """The vendor datasheet of a device, by the name a record gives it (torch's CUDA device name, JAX's
    ``device_kind``): a GPU matched on model and form factor, a TPU on its generation; None when nothing
    matches exactly (a CPU, an unlisted device). An A100 whose name says ``40GB`` gets that model's memory."""
    if not device_name:
        return None
    model = tpu_model(device_name) or gpu_model(device_name)
    if model is None:
        return None
    sheet = DATASHEETS[model]
    if model == "A100" and "40GB" in device_name.upper().replace(" ", ""):
        from dataclasses import replace

        sheet = replace(sheet, hbm_gbs=1555, hbm_bytes=40 * GB)
    return sheet


def datasheet_tflops(device_name: str, dtype: str) -> float | None:
    """The datasheet dense peak of this device and dtype, or None when no entry matches it exactly."""
    sheet = datasheet(device_name)
    return sheet.tflops(dtype) if sheet else None


REPEATS = 7  # timed repeats per matmul size
LONG_CALL_S = 0.05  # a matmul this long is at the device's peak already: larger sizes are not timed
ATTEMPTS = 3  # measurements tried before a disagreeing one is kept as refused


def current_load_per_core() -> float | None:
    """The load per core the runner measured when it started this process, else the machine's own now."""
    value = os.getenv(LOAD_ENV)
    if value:
        try:
            return float(value)
        except ValueError:
            pass
    try:
        return os.getloadavg()[0] / max(len(os.sched_getaffinity(0)), 1)
    except (OSError, AttributeError):
        return None


# -- measuring ---------------------------------------------------------------------------------------------
def _sizes(platform: str) -> tuple[int, ...]:
    return (4096, 8192, 16384) if platforms.get(platform).accelerator else (512, 1024, 2048)


#: On an accelerator one matmul of the smallest size is short enough that the dispatch and the sync around a
#: single call would be a visible share of it. A timed repeat there runs as many back-to-back calls as fill this long (after
#: one timed call estimates a call's length), then syncs once. On the CPU a call is long already: one per repeat.
MIN_REPEAT_S = 0.05
MAX_CALLS = 1000


def spread(values: list[float]) -> float:
    """max/min - 1: how far the repeats of one measurement disagree."""
    return max(values) / min(values) - 1 if values and min(values) > 0 else float("inf")


def calls_per_repeat(platform: str, one_call_s: float) -> int:
    """Back-to-back calls per timed repeat: 1 on the CPU, enough to fill ``MIN_REPEAT_S`` on an accelerator."""
    if not platforms.get(platform).accelerator or one_call_s <= 0:
        return 1
    return max(1, min(MAX_CALLS, int(MIN_REPEAT_S / one_call_s) + 1))


def _rates(run: Any, sync: Any, n: int, reps: int, platform: str = "cpu") -> list[float]:
    """TFLOP/s of ``reps`` timed repeats of an n x n matmul, after one untimed warm-up call; a repeat is
    :func:`calls_per_repeat` calls and one sync."""
    run()
    sync()
    t0 = time.perf_counter()
    run()
    sync()
    calls = calls_per_repeat(platform, time.perf_counter() - t0)
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            run()
        sync()
        out.append(calls * 2 * n**3 / (time.perf_counter() - t0) / 1e12)
    return out


def _long(n: int, rates: list[float]) -> bool:
    """Whether the median call of this size took longer than ``LONG_CALL_S`` (bf16 on a CPU, a slow device)."""
    return 2 * n**3 / sorted(rates)[len(rates) // 2] / 1e12 > LONG_CALL_S


def _per_size(framework: str, platform: str, dtype: str, reps: int,
              sizes: tuple[int, ...] | None = None) -> dict[int, list[float]]:
    """Timed repeats (TFLOP/s) for each matmul size (``sizes``, default all of the platform's)."""
    out: dict[int, list[float]] = {}
    sizes = sizes or _sizes(platform)
    backend = backends.get(framework)
    for n in sizes:
        run, sync = backend.matmul(platform, dtype, 1, n, n, n)
        out[n] = _rates(run, sync, n, reps, platform)
        if _long(n, out[n]):
            break
    return out


def measure(framework: str, platform: str, device_name: str, dtype: str, threads: int,
            load_per_core: float | None = None) -> Peak:
    """Measure now: up to ``ATTEMPTS`` times until the repeats of the fastest size agree within 10%.

    The first attempt times every size and picks the fastest (by median); later attempts time that size only.
    On a busy machine (``load_per_core`` above ``HIGH_LOAD``) one attempt is made: its figure is not trusted
    whatever its spread, and is measured again once the machine is quiet (:func:`lookup`).
    """
    versions = framework_versions(framework)
    others = device.other_device_processes(platform)  # before and after: a job that used the GPU meanwhile shows
    best: Peak | None = None
    sizes: tuple[int, ...] | None = None
    tried: list[int] = []
    attempts = 1 if load_per_core is not None and load_per_core > HIGH_LOAD else ATTEMPTS
    for attempt in range(1, attempts + 1):
        per_size = _per_size(framework, platform, dtype, REPEATS, sizes)
        n = max(per_size, key=lambda s: sorted(per_size[s])[len(per_size[s]) // 2])  # fastest by median
        tried = tried if sizes else list(per_size)
        sizes, reps = (n,), per_size[n]
        peak = Peak(framework, platform, device_name, dtype, threads, versions, max(reps),
                    [round(r, 6) for r in reps], spread(reps),
                    datetime.now(UTC).isoformat(timespec="seconds"), load_per_core,
                    Method(op="square matmul, best timed repeat of the fastest size", sizes=tried,
                           size=n, repeats=REPEATS, warmup_calls=1, attempts=attempt))
        if best is None or peak.spread < best.spread:
            best = peak
        if peak.spread <= MAX_SPREAD:
            break
    else:
        assert best is not None
        best.method.attempts = attempts
        peak = best
    others = max(others, device.other_device_processes(platform))
    if others:
        peak.method.other_device_processes = others
    return peak


def lookup(framework: str, platform: str, device_name: str, dtype: str, threads: int,
           remeasure: bool = False) -> Peak:
    """The peak of ``framework`` here: from the cache, or measured now and cached (see the load policy)."""
    load = current_load_per_core()
    versions = framework_versions(framework)
    key = cache_key(framework, platform, device_name, dtype, threads, versions)
    old = Peak.from_json(read_cache().get(key))
    if old is not None and not remeasure and (old.trusted or (load is not None and load > HIGH_LOAD)):
        return old
    with measuring():  # one measurement at a time here; another process may have measured it meanwhile
        newer = Peak.from_json(read_cache().get(key))
        if not remeasure and newer is not None and newer.trusted:  # old was missing or untrusted: another's
            return newer
        new = measure(framework, platform, device_name, dtype, threads, current_load_per_core())
        if old is not None and old.trusted and not new.trusted:
            return new  # a refused or busy measurement never replaces a trusted one
        if new.method.other_device_processes:
            return new  # another process shared the GPU: this figure is not cached at all
        write_peak(new)
        return new


def for_record(framework: str, platform: str, device_name: str, dtype: str,
               threads: int) -> tuple[float, PeakFields]:
    """(peak TFLOP/s, the record's peak fields) for a run: ``peak_measured_at``, ``peak_spread``, ..."""
    peak = lookup(framework, platform, device_name, dtype, threads)
    return peak.tflops, peak.record_fields()


def measured_tflops(framework: str, platform: str, device_name: str, dtype: str, threads: int) -> float:
    """Best matmul TFLOP/s of ``framework`` here, from the cache or measured now (then cached)."""
    return lookup(framework, platform, device_name, dtype, threads).tflops


# -- `twinbench peak --remeasure`: one framework per process, started by the runner -------------------------
def main(argv: list[str]) -> int:
    """``python -m twinbench.measure.peak FRAMEWORK DTYPE THREADS OUT.json [--remeasure]``.

    Pins the process to THREADS cores (0: all), sets full-fp32 matmuls as a run does, looks the peak up
    (measuring it with ``--remeasure``) and writes it to OUT.json.
    """
    framework, dtype, threads_arg, out = argv[:4]
    cpus = sorted(os.sched_getaffinity(0))
    threads = int(threads_arg)
    if threads and threads < len(cpus):
        cpus = cpus[:threads]
        os.sched_setaffinity(0, cpus)  # XLA and torch both size their thread pools from the affinity mask
    xla_flags.apply("tuned")  # the XLA flags a default run uses (part of a JAX peak's key), before jax loads
    backends.get(framework).set_threads(len(cpus))
    device.set_fp32_matmul(framework)
    platform, device_name, _ = device.describe(framework)
    peak = lookup(framework, platform, device_name, dtype, len(cpus), remeasure="--remeasure" in argv)
    Path(out).write_text(json.dumps(peak.to_json()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
