"""The host's CPU: its model and its instruction set, from /proc/cpuinfo (no framework, no device)."""

from __future__ import annotations

import platform
from functools import cache

#: /proc/cpuinfo's vendor_id -> the vendor's name, for a host whose "model name" says nothing (a VM: "unknown")
CPU_VENDORS = {"AuthenticAMD": "AMD", "GenuineIntel": "Intel", "HygonGenuine": "Hygon", "CentaurHauls": "Centaur"}


def _cpuinfo_text() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return f.read()
    except OSError:
        return ""


@cache
def cpu_name(cpuinfo: str | None = None) -> str:
    """The host CPU's model ("AMD EPYC 7B13"), from /proc/cpuinfo (``cpuinfo``: its text, for tests). A VM
    that hides the model ("model name : unknown", as on a TPU VM) is named by its vendor and family
    ("AMD family 25"); an Arm host by its implementer ("Arm CPU"); never "unknown"."""
    fields: dict[str, str] = {}
    for line in (_cpuinfo_text() if cpuinfo is None else cpuinfo).splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    model = fields.get("model name", "")
    if model and model.lower() not in ("unknown", "-", "n/a"):
        return model
    vendor = fields.get("vendor_id", "")
    if vendor:
        family = fields.get("cpu family", "")
        return CPU_VENDORS.get(vendor, vendor) + (f" family {family}" if family else "")
    if "CPU implementer" in fields:
        return "Arm CPU"
    return platform.processor() or platform.machine() or "CPU"


#: Instruction-set extensions that change what a CPU's matmul and element-wise kernels can do, in the order a
#: person reads them: the widest vector unit, then matrix units and bf16 support (x86: /proc/cpuinfo "flags";
#: Arm: "Features"). The same comparison differs by machine, so every record names these.
ISA_FLAGS = (("amx_tile", "AMX"), ("amx_bf16", "AMX-BF16"), ("avx512_bf16", "AVX512-BF16"), ("avx512f", "AVX-512"),
             ("avx2", "AVX2"), ("fma", "FMA"), ("sve2", "SVE2"), ("sve", "SVE"), ("bf16", "BF16"), ("asimd", "NEON"))


@cache
def cpu_isa(cpuinfo: str | None = None) -> str:
    """The CPU's vector and matrix extensions, widest first ("AVX-512, AVX512-BF16, AMX, AMX-BF16"; "AVX2, FMA";
    "SVE, NEON"), or "" where /proc/cpuinfo cannot be read. ``cpuinfo``: the file's text (tests)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
        except OSError:
            return ""
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags = set(value.split())
            break
    found = [name for flag, name in ISA_FLAGS if flag in flags]
    vector = [n for n in found if n in ("AVX-512", "AVX2", "SVE2", "SVE", "NEON")][:1]  # the widest only
    extra = [n for n in found if n in ("AVX512-BF16", "AMX", "AMX-BF16", "BF16") and not (n == "BF16" and "AMX" in found)]
    if "FMA" in found and vector == ["AVX2"]:
        extra.insert(0, "FMA")
    return ", ".join(vector + extra)


def host_cpu() -> str:
    """The host's CPU and its instruction set, e.g. "Intel(R) Xeon(R) Processor (AVX-512, AVX512-BF16, AMX)"."""
    isa = cpu_isa()
    return f"{cpu_name()} ({isa})" if isa else cpu_name()
