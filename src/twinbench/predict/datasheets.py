"""Datasheet figures of the devices ``twinbench predict`` can target: peak FLOP/s per dtype, HBM, interconnect.

The figures are ``measure/peak.py``'s (one table of vendor datasheets in the package, dense, no sparsity);
this module adds what the roofline needs beside them: the --device names, the label a measured record gives
the device, how devices are linked (node size, the network between nodes) and per-op overheads. A TPU's MXU
multiplies bf16: an fp32 matmul at ``highest`` precision runs as ~6 bf16 passes, so its fp32 peak is bf16 / 6
(an estimate, not a datasheet figure). Interconnect bandwidth here is per chip and per direction, the figure a
ring all-reduce moves data at.
"""

from __future__ import annotations

from dataclasses import dataclass

#: element-wise ops a second, measured: a v5e's vector unit on fp32 multiply-adds (benchmarks/tpu_vector_rates.py;
#: the figures and the exact GELU's check against them are in benchmarks/RESULTS.md, "The twelfth sitting")
VECTOR_OPS_PER_S = {"tpu-v5e": 4.49e12}

#: host time (µs) per argument array of a jitted call before the chip starts it, in a step synchronised each time:
#: a TPU v5e VM's, measured by benchmarks/tpu_sync_gap.py (the whole of the synchronised step's lead over the
#: back-to-back one; benchmarks/RESULTS.md, "The eleventh sitting")
DISPATCH_US_PER_ARRAY = {"tpu": 7.0}

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
    measure_key: str = ""           #: its entry in ``measure/peak.py``'s DATASHEETS

    @property
    def vector_ops_per_s(self) -> float:
        """Element-wise ops a second (``hlo.VECTOR``, one an element). A v5e's is measured
        (``VECTOR_OPS_PER_S``); another TPU's is the v5e's in proportion to its matrix peak (an estimate); a GPU's or
        a CPU's is its fp32 peak (its vector units are its fp32 units)."""
        if self.name in VECTOR_OPS_PER_S:
            return VECTOR_OPS_PER_S[self.name]
        if self.platform == "tpu":
            return VECTOR_OPS_PER_S["tpu-v5e"] * self.tflops["bf16"] / DATASHEETS["tpu-v5e"].tflops["bf16"]
        return self.tflops["fp32"] * 1e12

    @property
    def hbm_usable_gib(self) -> float:
        """What a program may allocate: a TPU's runtime keeps a 64th of the HBM for itself (what its
        out-of-memory message offers); a GPU's CUDA context and allocator keep a GiB (a CPU: what is installed)."""
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


def _sheet(name: str, label: str, platform: str, model: str, link: str, node_size: int = 0) -> Datasheet:
    """A --device entry whose figures are ``measure.peak``'s datasheet of ``model`` (one table of vendor figures
    in the package): dense bf16/fp32 peaks, HBM, and the interconnect, whose total per chip (both directions) is
    halved here to the per-direction rate a ring all-reduce moves data at."""
    from twinbench.measure.peak import DATASHEETS as SHEETS

    d = SHEETS[model]
    return Datasheet(name, label, platform, {"bf16": d.bf16_tflops or 0.0, "fp32": d.fp32_tflops or 0.0},
                     float(d.hbm_gbs or 0), (d.hbm_bytes or 0) / 2**30, (d.interconnect_gbs or 0) / 2, link,
                     node_size=node_size, measure_key=model)


#: The devices --device names, with the figures of ``measure/peak.py``'s datasheets (Cloud TPU system
#: architecture pages per chip; the GPU vendors' datasheets, SXM/OAM parts) and how they are linked.
DATASHEETS: dict[str, Datasheet] = {d.name: d for d in (
    _sheet("tpu-v4", "TPU v4", "tpu", "TPU v4", "ICI"),
    _sheet("tpu-v5e", "TPU v5 lite", "tpu", "TPU v5e", "ICI"),
    _sheet("tpu-v5p", "TPU v5", "tpu", "TPU v5p", "ICI"),
    _sheet("tpu-v6e", "TPU v6 lite", "tpu", "TPU v6e", "ICI"),
    _sheet("a100", "NVIDIA A100-SXM4-80GB", "gpu", "A100", "NVLink 3", node_size=8),
    _sheet("h100", "NVIDIA H100 80GB HBM3", "gpu", "H100 SXM", "NVLink 4", node_size=8),
    _sheet("h200", "NVIDIA H200", "gpu", "H200 SXM", "NVLink 4", node_size=8),
    _sheet("mi300x", "AMD Instinct MI300X", "gpu", "MI300X", "Infinity Fabric", node_size=8),
)}
#: the names --device takes: the datasheets and ``here`` (this machine's CPU, measured: see cpu_here)
DEVICES = (*DATASHEETS, "here")


class UnknownDevice(ValueError):
    """A --device name that is not in the table."""


def lookup(name: str) -> Datasheet:
    """The datasheet of a --device name."""
    key = name.strip().lower()
    if key not in DATASHEETS:
        raise UnknownDevice(f"--device: unknown device {name!r}; known: {', '.join(DEVICES)}")
    return DATASHEETS[key]


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
    how = f"{framework}-compile" if strategy.startswith("compile") else f"{framework}-eager"
    return per[how] if how in per else per[framework]  # torch's by compile or eager, JAX's one
