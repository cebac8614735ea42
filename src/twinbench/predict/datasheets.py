"""Datasheet figures of the devices ``twinbench predict`` can target: peak FLOP/s per dtype, HBM, interconnect.

The table lives here for now; ``measure/peak.py`` keeps the GPUs' dense peaks (``DATASHEET_TFLOPS``, keyed by
model and form factor) and is growing per-device datasheets of its own. Each :class:`Datasheet` names its
entry there (``measure_key``): :func:`lookup` takes the peak from ``measure/peak.py`` when that entry exists and
falls back on this table otherwise, so switching to measure's table is deleting the figures here.

Figures are vendor datasheet values (dense, no sparsity). A TPU's MXU multiplies bf16: an fp32 matmul at
``highest`` precision runs as ~6 bf16 passes, so its fp32 peak is bf16 / 6 (an estimate, not a datasheet
figure). Interconnect bandwidth is per chip and per direction, the figure a ring all-reduce moves data at.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

#: per-op cost (µs) beyond its roofline time: XLA on a TPU runs fusions back to back from one program;
#: XLA:GPU launches kernels (CUDA graphs cut it); eager torch pays the Python dispatch of every aten op
OP_OVERHEAD_US = {"tpu": 1.0, "gpu": {"jax": 3.0, "torch-eager": 8.0, "torch-compile": 4.0}, "cpu": 2.0}


@dataclass(frozen=True)
class Datasheet:
    """One device as the roofline sees it."""

    name: str                       #: the --device name
    label: str                      #: what a measured record calls it ("TPU v5 lite", "NVIDIA H200")
    platform: str                   #: tpu, gpu or cpu
    tflops: dict[str, float]        #: dense peak TFLOP/s by dtype (bf16, fp32)
    hbm_gbps: float                 #: memory bandwidth, GB/s
    hbm_gib: float                  #: device memory, GiB
    link_gbps: float                #: per-chip, per-direction bandwidth of the interconnect inside a node/slice, GB/s
    link: str                       #: what the interconnect is
    node_size: int = 0              #: devices one node holds on ``link`` (0: the slice is one ``link`` domain)
    network_gbps: float = 50.0      #: per-device bandwidth between nodes (InfiniBand NDR 400 Gb/s), GB/s
    measure_key: str = ""           #: the entry of ``measure/peak.py``'s DATASHEET_TFLOPS, when it has one

    @property
    def hbm_usable_gib(self) -> float:
        """What a program may allocate: the TPU v5e's runtime offered 15.75 of 16 GiB (its out-of-memory
        message), ~98%; a GPU's CUDA context and allocator keep ~1 GiB (a CPU: what is installed)."""
        if self.platform == "tpu":
            return self.hbm_gib * 15.75 / 16
        return self.hbm_gib - 1.0 if self.platform == "gpu" else self.hbm_gib

    def peak(self, dtype: str) -> float:
        """Peak FLOP/s of ``dtype`` (bf16 or fp32)."""
        return self.tflops["bf16" if dtype in ("bf16", "f16") else "fp32"] * 1e12

    def allreduce_gbps(self, devices: int) -> tuple[float, str]:
        """The per-device bandwidth a ring all-reduce over ``devices`` runs at, and which link it is."""
        if self.node_size and devices > self.node_size:
            return self.network_gbps, "InfiniBand (between nodes)"
        return self.link_gbps, self.link


def _tpu(name: str, label: str, bf16: float, gbps: float, gib: float, ici_gbit: float) -> Datasheet:
    # ICI: the datasheet's per-chip figure (Gbit/s, both directions together) -> GB/s per direction
    return Datasheet(name, label, "tpu", {"bf16": bf16, "fp32": round(bf16 / 6, 1)}, gbps, gib,
                     ici_gbit / 8 / 2, "ICI")


#: Cloud TPU system-architecture pages (per chip) and the GPU vendors' datasheets (SXM/OAM parts).
DATASHEETS: dict[str, Datasheet] = {d.name: d for d in (
    _tpu("tpu-v4", "TPU v4", 275.0, 1200.0, 32.0, 2400.0),
    _tpu("tpu-v5e", "TPU v5 lite", 197.0, 819.0, 16.0, 1600.0),
    _tpu("tpu-v5p", "TPU v5", 459.0, 2765.0, 95.0, 4800.0),
    _tpu("tpu-v6e", "TPU v6 lite", 918.0, 1640.0, 32.0, 3584.0),
    Datasheet("a100", "NVIDIA A100-SXM4-80GB", "gpu", {"bf16": 312.0, "fp32": 19.5}, 2039.0, 80.0, 300.0,
              "NVLink 3", node_size=8, measure_key="A100"),
    Datasheet("h100", "NVIDIA H100 80GB HBM3", "gpu", {"bf16": 989.4, "fp32": 67.0}, 3350.0, 80.0, 450.0,
              "NVLink 4", node_size=8, measure_key="H100 SXM"),
    Datasheet("h200", "NVIDIA H200", "gpu", {"bf16": 989.4, "fp32": 67.0}, 4800.0, 141.0, 450.0, "NVLink 4",
              node_size=8, measure_key="H200 SXM"),
    Datasheet("mi300x", "AMD Instinct MI300X", "gpu", {"bf16": 1307.4, "fp32": 163.4}, 5300.0, 192.0, 448.0,
              "Infinity Fabric", node_size=8),
)}
#: the names --device takes: the datasheets and ``here`` (this machine's CPU, measured: see cpu_here)
DEVICES = (*DATASHEETS, "here")


class UnknownDevice(ValueError):
    """A --device name that is not in the table."""


def lookup(name: str) -> Datasheet:
    """The datasheet of a --device name; GPU peaks from ``measure/peak.py`` where it has the entry."""
    key = name.strip().lower()
    if key not in DATASHEETS:
        raise UnknownDevice(f"--device: unknown device {name!r}; known: {', '.join(DEVICES)}")
    sheet = DATASHEETS[key]
    if sheet.measure_key:
        from twinbench.measure.peak import DATASHEET_TFLOPS

        measured = DATASHEET_TFLOPS.get(sheet.measure_key, {})
        sheet = replace(sheet, tflops={**sheet.tflops, **{k: v for k, v in measured.items() if k in ("bf16", "fp32")}})
    return sheet


def for_label(device_label: str) -> str | None:
    """The --device name of a measured record's ``device`` ("TPU v5 lite" -> tpu-v5e), or None."""
    label = device_label.lower()
    for sheet in DATASHEETS.values():
        if label == sheet.label.lower():
            return sheet.name
    if label.startswith("nvidia"):
        from twinbench.measure.peak import gpu_model

        model = gpu_model(device_label)
        return next((s.name for s in DATASHEETS.values() if model and s.measure_key == model), None)
    return None


def cpu_here(tflops: dict[str, float], gbps: float, gib: float, label: str) -> Datasheet:
    """This machine's CPU as a datasheet: its measured matmul peaks and memory bandwidth (no interconnect)."""
    return Datasheet("here", label, "cpu", tflops, gbps, gib, 0.0, "none")


def op_overhead_us(platform: str, framework: str, strategy: str) -> float:
    """The per-op cost beyond the roofline on ``platform`` for a framework's strategy."""
    per = OP_OVERHEAD_US[platform]
    if isinstance(per, float):
        return per
    if framework == "jax":
        return per["jax"]
    return per["torch-compile" if strategy.startswith("compile") else "torch-eager"]
