"""``--devices N``: a data-parallel step is one device's step plus the gradient all-reduce.

A ring all-reduce moves ``2 (N - 1) / N x gradient bytes`` per device over the interconnect (ICI on a TPU
slice, NVLink inside a GPU node, InfiniBand between nodes: ``Datasheet.allreduce_gbps``). How much of it
hides behind the backward pass is the framework's: ``OVERLAP`` (stated, not measured here): XLA schedules
the all-reduce of each layer's gradients during the backward pass of the layers before it; DDP overlaps
bucket by bucket; a JAX pmap/naive step reduces after the backward pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from twinbench.predict.datasheets import Datasheet

#: fraction of the all-reduce hidden behind compute, by framework and strategy family
OVERLAP = {("jax", "mesh-dp"): 0.7, ("jax", "jit"): 0.7, ("jax", "mesh-fsdp"): 0.5, ("jax", "pmap"): 0.0,
           ("torch", "ddp"): 0.6, ("torch", "fsdp"): 0.5}
#: the fraction hidden for a strategy OVERLAP does not name, by framework
UNKNOWN_OVERLAP = {"jax": 0.6, "torch": 0.5}
#: an all-reduce's fixed cost per step (latency of the ring's 2 (N - 1) hops and launches), ms
LATENCY_MS = {"tpu": 0.05, "gpu": 0.1, "cpu": 1.0}
#: fraction of the interconnect's datasheet bandwidth a ring all-reduce reaches
LINK_EFFICIENCY = 0.8


@dataclass
class Point:
    devices: int
    step_ms: float
    allreduce_ms: float
    speedup: float      #: tokens/s of N devices over one device's
    link: str


def overlap(framework: str, strategy: str) -> float:
    """The stated overlap of ``strategy`` (its base name), 0 when unknown."""
    base = strategy.split("+")[0]
    return OVERLAP.get((framework, base), UNKNOWN_OVERLAP[framework])


def allreduce_ms(grad_bytes: float, devices: int, sheet: Datasheet) -> tuple[float, str]:
    """A ring all-reduce's time of ``grad_bytes`` over ``devices`` of ``sheet``, and the link it uses."""
    if devices <= 1:
        return 0.0, "-"
    gbps, link = sheet.allreduce_gbps(devices)
    if gbps <= 0:
        return float("inf"), link
    moved = 2 * (devices - 1) / devices * grad_bytes
    return moved / (gbps * 1e9 * LINK_EFFICIENCY) * 1e3 + LATENCY_MS[sheet.platform], link


def step_ms(compute_ms: float, grad_bytes: float, devices: int, sheet: Datasheet, framework: str,
            strategy: str) -> tuple[float, float, str]:
    """(data-parallel step ms, its all-reduce ms, the link) at the same per-device batch. A CPU's "devices"
    share its cores and memory: N of them compute N batches at one device's speed, and reduce through memory."""
    if sheet.platform == "cpu":
        moved = 2 * (devices - 1) / devices * grad_bytes if devices > 1 else 0.0
        ar = moved / (sheet.hbm_gbps * 1e9) * 1e3
        return devices * compute_ms + ar, ar, "shared memory (the same cores)"
    ar, link = allreduce_ms(grad_bytes, devices, sheet)
    hidden = min(ar * overlap(framework, strategy), compute_ms * 0.5)  # hides behind at most the backward
    return compute_ms + ar - hidden, ar, link


def curve(compute_ms: float, grad_bytes: float, sheet: Datasheet, framework: str, strategy: str,
          max_devices: int) -> list[Point]:
    """N -> step and speed-up for N = 1, 2, 4, ... up to ``max_devices`` (and ``max_devices`` itself)."""
    ns, n = [], 1
    while n < max_devices:
        ns.append(n)
        n *= 2
    ns.append(max_devices)
    out = []
    for n in ns:
        ms, ar, link = step_ms(compute_ms, grad_bytes, n, sheet, framework, strategy)
        out.append(Point(n, round(ms, 3), round(ar, 3), round(n * compute_ms / ms, 3), link))
    return out
