"""The cache of measured matmul peaks (``peaks.json`` in the twinbench cache directory) and its entries.

The cache is keyed on framework, platform, device, dtype, threads AND the framework's versions (torch [+ CUDA],
or jax + jaxlib, and XLA_FLAGS when set): an upgrade measures again. Each entry (:class:`Peak`) stores when it
was measured (ISO time, UTC), how (sizes, repeats, attempts), every repeat, the spread, and the machine's load
per core at the time; entries of the first cache format (a bare number) are stale and measured again. Writes
are a fresh read and an atomic replace, so concurrent runs lose nothing.

How a peak is measured, and when a cached one is trusted or measured again, is ``peak.py`` (which re-exports
these names).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from twinbench import backends
from twinbench.machine import HIGH_LOAD, MAX_SPREAD, cache_root

FORMAT = 2  # entries of format 1 were bare numbers


def cache_path() -> Path:
    return cache_root() / "peaks.json"


@dataclass
class Method:
    """How a peak was measured."""

    op: str = ""
    sizes: list[int] = field(default_factory=list)  # the matrix sizes tried
    size: int = 0  # the fastest, whose repeats are the peak's
    repeats: int = 0
    warmup_calls: int = 1
    attempts: int = 1  # measurements made until the repeats agreed (or the attempts ran out)
    other_device_processes: int = 0  # other processes that held the GPU while it was measured (NVML)


@dataclass
class Peak:
    """One measured peak: the value, how and when it was measured, and how far its repeats agreed."""

    framework: str
    platform: str
    device: str
    dtype: str
    threads: int
    versions: dict[str, str]
    tflops: float  # the best timed repeat of the fastest size
    repeats_tflops: list[float]  # every timed repeat of that size
    spread: float  # max/min - 1 over repeats_tflops
    measured_at: str  # ISO 8601, UTC
    load_per_core: float | None  # the machine's load per core (others) when it was measured
    method: Method = field(default_factory=Method)
    format: int = FORMAT

    @property
    def key(self) -> str:
        return cache_key(self.framework, self.platform, self.device, self.dtype, self.threads, self.versions)

    def problems(self) -> list[str]:
        """Why this peak is not to be trusted (empty when it is)."""
        out = []
        if self.spread > MAX_SPREAD:
            out.append(f"its repeats disagree by {self.spread:.0%} (more than {MAX_SPREAD:.0%}) after "
                       f"{self.method.attempts} attempt(s)")
        if self.load_per_core is not None and self.load_per_core > HIGH_LOAD:
            out.append(f"it was measured on a busy machine (load {self.load_per_core:.2f} per core, "
                       f"above {HIGH_LOAD})")
        if self.method.other_device_processes:
            out.append(f"{self.method.other_device_processes} other process(es) used the device while it was "
                       "measured")
        return out

    @property
    def trusted(self) -> bool:
        return not self.problems()

    def status(self) -> str:
        """``ok``, or why not in a few words: ``repeats disagree (14%)``, ``measured busy (1.20/core)``."""
        out = []
        if self.spread > MAX_SPREAD:
            out.append(f"repeats disagree ({self.spread:.0%})")
        if self.load_per_core is not None and self.load_per_core > HIGH_LOAD:
            out.append(f"measured busy ({self.load_per_core:.2f}/core)")
        if self.method.other_device_processes:
            out.append("device shared while measured")
        return ", ".join(out) or "ok"

    def age_s(self, now: float | None = None) -> float | None:
        return age_s(self.measured_at, now)

    def record_fields(self) -> PeakFields:
        """What a run's Record carries about the peak it was measured against."""
        return PeakFields(peak_measured_at=self.measured_at, peak_spread=self.spread,
                          peak_load_per_core=self.load_per_core,
                          peak_device_shared=self.method.other_device_processes)

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, entry: object) -> Peak | None:
        """A cached entry, or None for anything not of the current format (old entries are stale)."""
        try:
            peak = msgspec.convert(entry, cls)
        except msgspec.ValidationError:
            return None
        return peak if peak.format == FORMAT and peak.tflops > 0 and peak.repeats_tflops else None


@dataclass(frozen=True)
class PeakFields:
    """The record's fields of the peak a run was measured against (its speed section)."""

    peak_measured_at: str | None
    peak_spread: float | None
    peak_load_per_core: float | None
    peak_device_shared: int  # other processes on the GPU while it was measured, 0 when none or on the CPU


def age_s(measured_at: str | None, now: float | None = None) -> float | None:
    """Seconds since an ISO time (None when it cannot be read)."""
    if not measured_at:
        return None
    try:
        then = datetime.fromisoformat(measured_at)
    except ValueError:
        return None
    if then.tzinfo is None:
        then = then.replace(tzinfo=UTC)
    return max((time.time() if now is None else now) - then.timestamp(), 0.0)


def fmt_age(seconds: float | None) -> str:
    """3600 -> '1.0 h'; None -> 'unknown'."""
    if seconds is None:
        return "unknown"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def installed_at() -> float | None:
    """When this twinbench was installed (its package metadata's time), None when that cannot be read."""
    from importlib import metadata

    try:
        dist = metadata.distribution("twinbench")
        files = [f for f in dist.files or [] if f.name == "METADATA"]
        return os.path.getmtime(str(dist.locate_file(files[0]))) if files else None
    except (metadata.PackageNotFoundError, OSError, IndexError):
        return None


def provenance(measured_at: str | None, now: float | None = None, installed: float | None = None) -> str:
    """Where a run's peak came from, in words: when it was measured, and that it is the machine's cached figure
    (``cache_path``, shared by every twinbench on the machine with the same framework versions and threads), so
    a peak older than this install reads "before this twinbench was installed" instead of passing for this
    checkout's own measurement. ``installed``: the install time (default :func:`installed_at`); the path and
    the way to measure again are :func:`cache_note`, said once per line of peaks."""
    when = (measured_at or "").replace("T", " ")[:16]
    age = age_s(measured_at, now)
    if age is None:
        return "from the machine's peak cache"
    then = (time.time() if now is None else now) - age
    installed = installed_at() if installed is None else installed
    if installed is not None and then < installed:
        return (f"measured {when} UTC, {fmt_age(age)} ago, before this twinbench was installed: reused from the "
                "machine's shared peak cache")
    return f"measured {when} UTC, {fmt_age(age)} ago"


def cache_note() -> str:
    """The line's end that says where every peak is kept and how to measure it again."""
    return f"peaks kept in {cache_path()} (shared by every twinbench here); `twinbench peak --remeasure` measures again"


def table(shown: list[tuple[str, Peak | None]]) -> Any:
    """The terminal table of cached or just measured peaks (rich), ``(cache key, Peak)`` each; ``None``: an entry
    of the first cache format, shown as stale."""
    from rich.table import Table

    table = Table(header_style="bold", title=f"matmul peaks ({cache_path()})", title_justify="left")
    for c in ("framework", "device", "dtype", "threads", "versions", "GFLOP/s", "spread", "age", "load/core",
              "status"):
        table.add_column(c, justify="right" if c in ("threads", "GFLOP/s", "spread", "age", "load/core") else "left")
    for key, p in shown:
        if p is None:  # an entry of the first cache format: a bare number, never used again
            parts = [*key.split("|"), "", "", "", ""]
            table.add_row(parts[0], f"{parts[2]} ({parts[1]})", parts[3], parts[4].removeprefix("threads="), "—",
                          "—", "—", "—", "—", "stale (old format)", style="dim")
            continue
        vers = ", ".join(f"{k} {v}" for k, v in sorted(p.versions.items()))
        load = "—" if p.load_per_core is None else f"{p.load_per_core:.2f}"
        table.add_row(p.framework, f"{p.device} ({p.platform})", p.dtype, str(p.threads), vers,
                      f"{p.tflops * 1e3:,.1f}", f"{p.spread:.1%}", fmt_age(p.age_s()), load,
                      p.status(), style=None if p.trusted else "yellow")
    return table


def cache_key(framework: str, platform: str, device: str, dtype: str, threads: int,
              versions: dict[str, str]) -> str:
    vers = ",".join(f"{k}={v}" for k, v in sorted(versions.items()))
    return f"{framework}|{platform}|{device}|{dtype}|threads={threads}|{vers}"


def framework_versions(framework: str) -> dict[str, str]:
    """The versions a peak depends on: torch (and its CUDA), or jax and jaxlib (and XLA_FLAGS when set)."""
    return backends.get(framework).peak_versions()


def read_cache(path: Path | None = None) -> dict[str, Any]:
    """The raw cache: key -> entry (current entries are dicts, first-format entries bare numbers)."""
    try:
        data = json.loads((path or cache_path()).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def cached_peaks(path: Path | None = None) -> list[tuple[str, Peak | None]]:
    """Every cache entry: (key, Peak), or (key, None) for a stale entry of an old format."""
    return [(k, Peak.from_json(v)) for k, v in sorted(read_cache(path).items())]


@contextlib.contextmanager
def measuring() -> Iterator[None]:
    """Held while this process measures a peak: one measurement at a time on the machine (a lock file beside the
    cache), so two runs starting together do not time their matmuls against each other, and the second reads what
    the first measured. Where the lock cannot be taken (no ``fcntl``, a cache that cannot be written) it is not."""
    try:
        import fcntl

        cache_root().mkdir(parents=True, exist_ok=True)
        fd = os.open(cache_root() / "peaks.lock", os.O_RDWR | os.O_CREAT, 0o644)
    except (ImportError, OSError):
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def write_peak(peak: Peak) -> None:
    """Add or replace ``peak``'s entry in the cache (a cache that cannot be written is left as it is)."""
    path = cache_path()
    try:  # a fresh read, then an atomic replace: concurrent runs lose nothing
        path.parent.mkdir(parents=True, exist_ok=True)
        cached = read_cache(path)
        cached[peak.key] = peak.to_json()
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cached, indent=1, sort_keys=True))
        tmp.replace(path)
    except OSError:
        pass
