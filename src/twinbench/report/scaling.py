"""Strong and weak scaling efficiency per strategy, from the records of a sweep over ``devices``.

Strong scaling keeps the global batch fixed: ``efficiency(n) = T(1) / (n * T(n))`` (1.0: n devices are n
times faster). Weak scaling keeps the batch per device fixed (global batch ``n * b``):
``efficiency(n) = T(1, b) / T(n, n * b)`` (1.0: n devices do n times the work in the same time). ``T`` is
the median steady-state step time; the one-device reference is the same strategy at ``devices == 1``
(the same framework, model, sequence length and precision).

Where data parallelism starts to pay (:func:`payoff`): for each per-device batch ``b``, the speed-up of ``n``
devices over one device on the same global batch ``n * b``, ``T(1, n b) / T(n, n b)``; it pays from the smallest
measured ``b`` above which every speed-up is at least ``PAYS`` (5% faster: a smaller gain is within the noise of
one run on a shared machine; claim C12: overhead eats the gain at small batches).

Simulated CPU devices share the machine's cores, so there the figures measure the overhead of the
parallel formulation (collectives, resharding, extra processes) and check that it runs, not a speed-up:
:func:`caveat` says so next to every table that shows them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from twinbench.record import Record

PAYS = 1.05  # the speed-up over one device from which data parallelism counts as paying


@dataclass(frozen=True)
class Row:
    """One ok run of a device sweep: its devices and batches, step time, and both efficiencies (None without a
    one-device reference); ``speedup`` is set on :func:`payoff`'s rows."""

    framework: str
    strategy: str
    devices: int
    batch: int
    batch_per_device: int
    step_ms: float
    strong_efficiency: float | None = None
    weak_efficiency: float | None = None
    time_vs_one_device: float | None = None  # T(n, B) / T(1, B): below 1, the n devices are faster
    platform: str | None = None
    threads: int | None = None
    speedup: float | None = None  # T(1, B) / T(n, B)


def _group(r: Record) -> tuple:
    return (r.run.framework, r.run.strategy, r.run.preset, r.run.layers, r.run.d_model, r.run.seq, r.run.precision)


def efficiency(records: Iterable[Record]) -> list[Row]:
    """One row per ok record: devices, batches, step time and both efficiencies (None without a reference)."""
    ok = [r for r in records if r.ok and r.timing.step_ms]
    one = {(_group(r), r.run.batch): r for r in ok if (r.run.device_count or 1) == 1}
    rows = []
    for r in ok:
        n, batch, step = r.run.device_count or 1, r.run.batch or 0, r.timing.step_ms or 0.0
        per_device = batch // n
        strong = one.get((_group(r), batch))
        weak = one.get((_group(r), per_device)) if batch % n == 0 else None
        strong_ms = strong.timing.step_ms if strong else None
        weak_ms = weak.timing.step_ms if weak else None
        rows.append(Row(
            framework=str(r.run.framework), strategy=str(r.run.strategy), devices=n, batch=batch,
            batch_per_device=per_device, step_ms=step,
            strong_efficiency=strong_ms / (n * step) if strong_ms else None,
            weak_efficiency=weak_ms / step if weak_ms else None,
            time_vs_one_device=step / strong_ms if strong_ms else None,
            platform=r.conditions.platform, threads=r.conditions.threads,
        ))
    return sorted(rows, key=lambda x: (x.framework, x.strategy, x.batch_per_device, x.devices))


def caveat(on_cpu_devices: Iterable[tuple[str | None, int]], cores: int | None = None) -> str | None:
    """The sentence that must accompany CPU figures: simulated devices share the cores. ``on_cpu_devices``:
    the (platform, devices) of each run shown."""
    if not any(platform == "cpu" and devices > 1 for platform, devices in on_cpu_devices):
        return None
    import os

    cores = cores or len(os.sched_getaffinity(0))
    return (f"On CPU the simulated devices (JAX host-platform devices, torchrun processes) share this machine's "
            f"{cores} cores, so these efficiencies measure the correctness and overhead of each parallel "
            f"formulation, not a speed-up; on n real accelerators the ideal is 1.0.")


def lines(records: Iterable[Record]) -> list[str]:
    """Plain-text lines for a report: one per multi-device run, then the caveat where it applies."""
    records = list(records)
    rows = efficiency(records)
    out = []
    for r in rows:
        if r.devices == 1:
            continue
        fmt = lambda v: "—" if v is None else f"{v:.2f}"  # noqa: E731
        out.append(f"{r.framework}/{r.strategy} on {r.devices} devices, batch {r.batch} "
                   f"({r.batch_per_device} per device): {r.step_ms:.1f} ms/step, "
                   f"{fmt(r.time_vs_one_device)}x the 1-device time; strong efficiency "
                   f"{fmt(r.strong_efficiency)}, weak efficiency {fmt(r.weak_efficiency)}")
    out += payoff_lines(records)
    note = caveat((r.platform, r.devices) for r in rows)
    return out + ([note] if note and out else [])


def payoff(records: Iterable[Record]) -> list[Row]:
    """Per multi-device run that has a one-device run of the same strategy on the same global batch: its
    per-device batch and the speed-up ``T(1, B) / T(n, B)`` (> 1: the n devices finish the batch sooner)."""
    return [replace(r, speedup=1.0 / r.time_vs_one_device) for r in efficiency(records)
            if r.devices > 1 and r.time_vs_one_device]


def curves(rows: list[Row]) -> dict[tuple[str, str, int], list[tuple[int, float]]]:
    """The rows of :func:`payoff` per (framework, strategy, devices): (batch per device, speed-up), by batch."""
    out: dict[tuple[str, str, int], list[tuple[int, float]]] = {}
    for r in rows:
        if r.speedup is not None:
            out.setdefault((r.framework, r.strategy, r.devices), []).append((r.batch_per_device, r.speedup))
    return {k: sorted(v) for k, v in out.items()}


def _pays_from(pts: list[tuple[int, float]]) -> int | None:
    start = None
    for b, sp in reversed(pts):
        if sp < PAYS:
            break
        start = b
    return start


def pays_from(rows: list[Row]) -> dict[tuple[str, str, int], int | None]:
    """Per (framework, strategy, devices): the smallest per-device batch from which every measured speed-up
    is at least :data:`PAYS`, or None when it does not pay at the largest one measured."""
    return {key: _pays_from(pts) for key, pts in curves(rows).items()}


def payoff_lines(records: Iterable[Record]) -> list[str]:
    """One line per (strategy, devices): the speed-up at each per-device batch and where it starts to pay."""
    out = []
    for (fw, st, n), pts in curves(payoff(records)).items():
        if len(pts) < 2:
            continue
        start = _pays_from(pts)
        text = ", ".join(f"{sp:.2f}x at {b}" for b, sp in pts)
        verdict = (f"pays from {start} per device" if start is not None
                   else f"does not pay up to {pts[-1][0]} per device")
        out.append(f"{fw}/{st} on {n} devices vs 1 device, same global batch, by batch per device: {text}: "
                   f"{verdict}")
    return out
