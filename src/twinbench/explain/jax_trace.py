"""JAX: per-HLO events of a ``jax.profiler`` trace (read with ``jax.profiler.ProfileData``, no TensorFlow)
joined to the compiled HLO text of the step. XLA:CPU records each executed instruction (thunk) on the host
plane's XLA threads with an ``hlo_op`` stat; XLA:GPU records kernels on the ``/device:GPU:N`` planes with the
same stat. The steps are the ``twinbench_step`` annotations (``StepTraceAnnotation``) on the Python thread.
"""

from __future__ import annotations

from pathlib import Path

from twinbench.explain import hlo
from twinbench.explain.breakdown import Breakdown, undisturbed


class TraceError(ValueError):
    """A trace that cannot be read."""


def xplane_of(trace_path: str) -> Path:
    p = Path(trace_path)
    d = p if p.is_dir() else p.parent
    found = sorted(d.rglob("*.xplane.pb"))
    if not found:
        raise TraceError(f"no *.xplane.pb next to {trace_path}")
    return found[-1]


def read(trace_path: str, hlo_text: str, module: str = "") -> Breakdown:
    """The breakdown of the traced steps of ``trace_path`` (its xplane), ops named by ``hlo_text``."""
    from jax.profiler import ProfileData

    path = xplane_of(trace_path)
    try:
        data = ProfileData.from_file(str(path))
    except Exception as e:
        raise TraceError(f"{path}: not a readable profile ({type(e).__name__})") from e
    instrs = hlo.parse(hlo_text)
    steps: list[tuple[float, float]] = []
    ops: list[tuple[str, float, float, str]] = []  # (hlo_op, start, dur, module)
    device = [pl for pl in data.planes if pl.name.startswith("/device:GPU")]
    for plane in data.planes:
        if plane.name not in ("/host:CPU",) and plane not in device:
            continue
        for line in plane.lines:
            for ev in line.events:
                if ev.name == "twinbench_step" and plane.name == "/host:CPU":
                    steps.append((ev.start_ns, ev.duration_ns))
                    continue
                if device and plane.name == "/host:CPU":
                    continue  # on a GPU, the kernels are what runs
                stats = dict(ev.stats)
                op = stats.get("hlo_op")
                if op:
                    ops.append((str(op), ev.start_ns, ev.duration_ns, str(stats.get("hlo_module", ""))))
    if not steps:
        raise TraceError(f"{path}: no twinbench_step annotations")
    modules = {m for *_, m in ops}
    main = module or max(modules, key=lambda m: sum(d for _, _, d, mm in ops if mm == m), default="")
    b = Breakdown(source="jax.profiler + HLO", steps_traced=len(steps))
    steps = [steps[i] for i in undisturbed([d for _, d in steps])]
    step_ms = sum(d for _, d in steps) / len(steps) / 1e6
    for name, start, dur, mod in ops:
        if not any(s <= start <= s + d for s, d in steps):
            continue
        ins = instrs.get(name) if mod == main else None
        if ins is None:
            b.add("rest", "other", dur / 1e6, name=f"{mod}:{name}")
            continue
        b.add(hlo.phase(ins.op_name), hlo.category(ins), dur / 1e6, hlo.scope(ins.op_name), name=name)
    return b.finish(len(steps), step_ms)
