"""JAX: a ``jax.profiler`` trace (its ``*.xplane.pb``, walked a field at a time by :mod:`.xplane_stream`),
joined, when there is one, to the compiled HLO text of the step.

XLA:GPU records kernels on the ``/device:GPU:N`` planes with ``hlo_op``/``hlo_module`` stats (and on some
versions the ``op_name`` path as ``name``); one device is attributed (``device``; default the first with
kernels), never the sum of all. A kernel is joined to its HLO instruction by ``hlo_op``, or, inside a command
buffer (CUDA graph, ``hlo_op`` = ``command_buffer_N``), by its own name (XLA names a fusion's kernel after it:
``fusion.949`` runs as ``fusion_949``). Its category: the kernel's name when it says (cuBLAS, cuDNN flash,
NCCL...), else the instruction (a fusion by what it fuses, a custom call by its ``custom_call_target``), else
the fusion's name (``loop_add_fusion``) or the primitive ending its ``op_name``. Its phase: the ``op_name``
path (``jvp(...)`` forward, ``transpose(jvp(...))`` backward, the ``optimizer`` scope); a kernel with no
path (cuBLAS inside a command buffer) takes the phase of the kernel before it on its stream. XLA:CPU records
each executed instruction (thunk) on the host plane's threads with the same ``hlo_op`` stat. A TPU profile
(``/device:TPU:N`` planes) is read by :mod:`.tpu_trace`.
"""

from __future__ import annotations

import itertools
import re
import struct
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from twinbench.explain import hlo, taxonomy, tpu_trace, xplane, xplane_stream
from twinbench.explain import steps as st
from twinbench.explain.breakdown import WHOLE_ITERATION, Breakdown, compile_time, step_cut, undisturbed
from twinbench.explain.steps import TraceError
from twinbench.explain.torch_trace import MAX_NAME

__all__ = ["TraceError", "read", "xplane_of"]

PROFILER_STEPS = ("twinbench_step", "ProfilerStep")
_DERIVED = {"XLA Modules", "XLA Ops", "Steps", "TensorFlow Ops", "TensorFlow Name Scope", "Framework Ops",
            "Framework Name Scope", "Source code", "XLA TraceMe", "Launch Stats", "SparseCore Ops"}
_GPU = re.compile(r"^/device:(GPU|ROCM|CUDA):(\d+)")


def xplane_of(trace_path: str) -> Path:
    p = Path(trace_path)
    if p.is_file() and p.name.endswith((".xplane.pb", ".xplane.pb.gz")):
        return p
    d = p if p.is_dir() else p.parent
    found = sorted(d.rglob("*.xplane.pb"))
    if not found:
        raise TraceError(f"no *.xplane.pb in or next to {trace_path}")
    return found[-1]


class _Kernel:
    __slots__ = ("child", "end", "hlo_op", "line", "module", "name", "op_name", "start")

    def __init__(self, name: str, start: float, dur: float, line: str, stats: dict[str, xplane.Stat]) -> None:
        self.name = name[:MAX_NAME].removesuffix(".kd")  # a name is cut where it is read (see MAX_NAME)
        self.start, self.end, self.line = start, start + dur, line
        self.child = 0.0  # time of the thunks nested in it (a while loop's body): XLA:CPU's own time excludes it
        # interned: every execution of an op names the same instruction, module and path. An event's own stats
        # are the profiler's (which it carries varies by producer and version): read by name, once, here
        self.hlo_op = sys.intern(str(stats.get("hlo_op", ""))[:MAX_NAME])
        self.module = sys.intern(str(stats.get("hlo_module", ""))[:MAX_NAME])
        op_name = str(stats.get("name", ""))[:MAX_NAME]
        self.op_name = sys.intern(op_name) if "/" in op_name else ""


class _HostNames:
    """Which host events steps may be found from (:func:`_steps`): the marker's, the profilers' step names and
    step-like annotations; decided once per name. The host's other events are not kept."""

    def __init__(self, marker: str | None) -> None:
        self.marker = marker
        self.seen: dict[str, bool] = {}

    def __call__(self, name: str) -> bool:
        n = name[:MAX_NAME]  # the key too: a 10 MB name is not kept whole
        hit = self.seen.get(n)
        if hit is None:
            hit = self.seen[n] = bool(st.base(n) in PROFILER_STEPS or st.is_steplike(n) or (
                self.marker and (n == self.marker or st.base(n) == self.marker)))
        return hit


class _Ev:
    """One event as ``jax.profiler.ProfileData`` gives it: its metadata's name, start and duration in ns, its own
    stats."""

    __slots__ = ("duration_ns", "name", "start_ns", "stats")

    def __init__(self, name: str, start_ns: float, duration_ns: float, stats: dict[str, xplane.Stat]) -> None:
        self.name, self.start_ns, self.duration_ns, self.stats = name, start_ns, duration_ns, stats


def _events(f: IO[bytes], plane: xplane_stream.Plane, line: xplane_stream.LineHead) -> Iterator[_Ev]:
    md = plane.event_metadata
    for mid, offset, dur, stats in xplane_stream.events_with_stats(f, line, plane.stat_names):
        m = md.get(mid)
        yield _Ev(m.name if m is not None else "", line.timestamp_ns + offset / 1000, dur / 1000, stats)


def _planes(f: IO[bytes], at: list[xplane_stream.PlaneAt], device: int | None, step_marker: str | None,
            compiling: list[tuple[float, float, str]]) -> tuple[
        list[st.Marked], set[str], list[_Kernel], dict[int, list[_Kernel]], set[int]]:
    """One pass over the host's and the GPUs' planes, a line and an event at a time: (the host's step
    annotations, the names of those with a step number, XLA:CPU's thunks, the kernels of the one device read,
    every device with kernels); the host's compile events go to ``compiling``."""
    compile_names: dict[str, bool] = {}
    host: list[st.Marked] = []
    step_nums: set[str] = set()
    host_ops: list[_Kernel] = []
    gpus: dict[int, list[_Kernel]] = {}  # the one device read: its kernels
    found_gpus: set[int] = set()  # every device with kernels
    keep = _HostNames(step_marker)
    for where in at:
        name = where.name
        g = _GPU.match(name)
        if name != "/host:CPU" and not g:
            continue
        plane = xplane_stream.plane(f, where)
        if name == "/host:CPU":
            for line in plane.lines:
                for ev in _events(f, plane, line):
                    stats = ev.stats
                    if "hlo_op" in stats and "device_id" not in stats:  # an XLA:CPU thunk (not a GPU launch)
                        host_ops.append(_Kernel(ev.name, ev.start_ns, ev.duration_ns, line.name, stats))
                        continue
                    hit = compile_names.get(ev.name)
                    if hit is None:
                        hit = compile_names[ev.name[:MAX_NAME]] = taxonomy.compile_event(ev.name[:MAX_NAME])
                    if hit:  # a compiler at work inside a step: its own row (breakdown.compile_time)
                        compiling.append((ev.start_ns, ev.start_ns + ev.duration_ns, ev.name[:MAX_NAME]))
                        continue
                    stepped = "step_num" in stats
                    if stepped:
                        step_nums.add(ev.name[:MAX_NAME])
                    if stepped or keep(ev.name):  # only what steps are found from is kept
                        host.append(st.Marked(ev.name[:MAX_NAME], ev.start_ns, ev.start_ns + ev.duration_ns))
        elif g:
            n = int(g.group(2))
            if (device is not None and n != device) or (device is None and gpus and min(gpus) < n):
                if any(ln.name not in _DERIVED and next(xplane_stream.events(f, ln), None) is not None
                       for ln in plane.lines):
                    found_gpus.add(n)  # another device's kernels: only that it has some is kept
                continue
            ks = [_Kernel(ev.name, ev.start_ns, ev.duration_ns, line.name, ev.stats)
                  for line in plane.lines if line.name not in _DERIVED for ev in _events(f, plane, line)]
            if ks:
                found_gpus.update(gpus)
                gpus = {n: ks}
    return host, step_nums, host_ops, gpus, found_gpus


def read(trace_path: str, hlo_text: str = "", module: str = "", step_marker: str | None = None,
         device: int | None = None, hlo_for: Callable[[str], str] | None = None,
         steps: tuple[int | None, int | None] | None = None) -> Breakdown:
    """The breakdown of the traced steps of ``trace_path`` (its xplane; ``steps``: a window of them,
    :func:`steps.select`), ops named by ``hlo_text`` if given, or by ``hlo_for(module)``, the HLO text of the
    module the traced ops ran (an ``--xla_dump_to`` directory holds every module a process compiled).

    The profile is walked from its file a field at a time (:mod:`.xplane_stream`), never decoded whole; of its
    events only the device's kernels (or XLA:CPU's thunks) and the host's step annotations are kept, as small
    records (a TPU's ops are attributed a step at a time, :mod:`.tpu_trace`)."""
    path = xplane_of(trace_path)
    with xplane_stream.Source(path) as src:  # read from the file, a field at a time
        assert src.f is not None
        try:
            at = xplane_stream.planes(src.f, src.size())
        except (OSError, EOFError, ValueError, IndexError, TypeError, UnicodeDecodeError) as e:
            raise TraceError(f"{path}: not a readable profile ({type(e).__name__})") from e
        names = [p.name for p in at]
        compiling: list[tuple[float, float, str]] = []
        if not names:  # a protobuf of another message decodes as an XSpace with no planes
            raise TraceError(f"{path}: not a readable profile (no planes: not a JAX profile's XSpace)")
        if tpu_trace.is_tpu(names):
            try:
                return tpu_trace.read(path, src, device, module, hlo_text, hlo_for, steps)
            except TraceError:
                raise
            except (IndexError, KeyError, TypeError, AttributeError, ValueError, struct.error) as e:
                raise TraceError(f"{path}: not a readable profile ({type(e).__name__})") from None  # prepared
        try:
            host, step_nums, host_ops, gpus, found_gpus = _planes(src.f, at, device, step_marker, compiling)
        except TraceError:
            raise
        except (EOFError, ValueError, IndexError, TypeError, UnicodeDecodeError, struct.error) as e:
            raise TraceError(f"{path}: not a readable profile ({type(e).__name__})") from None
    found_gpus.update(gpus)
    if device is not None and device not in found_gpus:
        where = (f"devices {', '.join(map(str, sorted(found_gpus)))}" if found_gpus
                 else "no device activity (a CPU-only trace)")
        raise TraceError(f"{path}: no device {device} in the trace ({where})")
    if gpus:
        dev = min(gpus) if device is None else device
        ops = gpus[dev]
    else:
        dev, ops = -1, host_ops
    modules = Counter[str]()
    for k in ops:
        if k.module:
            modules[k.module] += int(k.end - k.start)
    main = module or (modules.most_common(1)[0][0] if modules else "")
    if hlo_for is not None:
        hlo_text = hlo_for(main)
    instrs = hlo.parse(hlo_text) if hlo_text else {}
    found = st.select(_steps(host, step_nums, step_marker, ops, main), steps)
    source = "jax.profiler + HLO" if instrs else "jax.profiler (no HLO text: phases from op_name paths only)"
    b = Breakdown(source=source, steps_traced=len(found.spans), step_method=found.method,
                  cut=step_cut(found.spans, 1e6), compiler="XLA")
    b.notes.extend(found.notes)
    if len(found_gpus) > 1:
        b.notes.append(f"kernels of {len(found_gpus)} devices ({', '.join(map(str, sorted(found_gpus)))}) in the "
                       f"trace: device {dev} shown (--device-index N for another)")
    if not instrs:
        b.notes.append("no compiled HLO text: categories from kernel, hlo_op and op_name names; phases where "
                       "the trace names them (--hlo FILE for more)")
    if gpus:
        return _device(b, found, ops, instrs, main, f"GPU {dev}", compiling)
    if not ops:
        raise TraceError(f"{path}: no XLA ops in the trace (neither device kernels nor XLA:CPU thunks)")
    b = _host(b, found, ops, instrs, main, compiling)
    if not instrs:
        _needs_hlo(b, path)
    return b


def _aligned(b: Breakdown, spans: list[tuple[float, float]], ops: list[_Kernel],
             main: str) -> list[tuple[float, float]]:
    """The step windows to attribute: the annotations themselves, or, when an annotation spans only the step's
    dispatch (no ``block_until_ready`` inside it: most of the program's ops run after it ends), each step from
    its start to the next one's, the whole loop iteration, and a note saying so."""
    mine = [k for k in ops if k.module == main] or ops
    total = sum(k.end - k.start for k in mine)
    within = st.Within(spans)
    inside = sum(k.end - k.start for k in mine if within.first(k.start) >= 0)
    if len(spans) < 3 or not total or inside >= 0.5 * total or b.cut.get("coverage", 1.0) >= WHOLE_ITERATION:
        return spans
    s = sorted(spans)
    b.notes.append(f"the step annotation spans only {b.cut['span_ms']:.1f} ms of the loop's "
                   f"{b.cut['iteration_ms']:.1f} ms iteration and {1 - inside / total:.0%} of the XLA ops ran "
                   "after it (no block_until_ready inside it?): steps taken start to start, the whole iteration")
    b.cut["aligned"] = 1.0
    return [(a[0], c[0]) for a, c in itertools.pairwise(s)]


def _nest(ops: list[_Kernel]) -> None:
    """Each thunk's nested thunks' time (``child``): a ``while`` thunk's event spans its body's thunks on the
    same thread, which are recorded too; only its own time is its."""
    by_line: dict[str, list[_Kernel]] = {}
    for k in ops:
        by_line.setdefault(k.line, []).append(k)
    for mine in by_line.values():
        stack: list[_Kernel] = []
        for k in sorted(mine, key=lambda k: (k.start, -k.end)):
            while stack and k.start >= stack[-1].end:
                stack.pop()
            if stack:
                stack[-1].child += k.end - k.start
            stack.append(k)


def _needs_hlo(b: Breakdown, path: Path) -> None:
    """An XLA:CPU profile without its compiled HLO: its thunks are named only by their fusion
    (``ynn_fusion.67``) and carry no ``op_name``, so most of the step would be 'other' and 'rest'. Rather
    than a table and a gap that mean nothing, one line naming the flag and what it adds."""
    cats = b.categories()
    work = sum(v for k, v in cats.items() if k != "idle")
    if not work:
        return
    categorized = 1 - cats.get("other", 0.0) / work
    phased = sum(v for p, v in b.phases().items() if p != "rest") / work  # idle is rest's only (finish)
    if categorized >= 0.9 and phased >= 0.5:
        return
    raise TraceError(f"{path}: this XLA:CPU profile names its ops only by fusion ({categorized:.0%} of op time "
                     f"categorized, {phased:.0%} in a phase): give --hlo DIR, the compiled HLO of the same run "
                     "(XLA_FLAGS=--xla_dump_to=DIR), for every op's category, phase (forward, backward, update), "
                     "FLOPs and bytes")


def _steps(host: list[st.Marked], step_nums: set[str], marker: str | None, ops: list[_Kernel],
           main: str) -> st.Steps:
    if not marker and step_nums:  # StepTraceAnnotation
        name = max(step_nums, key=lambda n: sum(1 for e in host if e.name == n))
        return st.Steps([(e.start, e.end) for e in st.top_level([e for e in host if e.name == name])],
                        f"StepTraceAnnotation {name!r}")
    found = st.from_markers(host, marker, PROFILER_STEPS)
    if found:
        return found
    if not main and ops:  # no module names (an older XLA): all the device's activity is one step
        return st.Steps([(min(k.start for k in ops), max(k.end for k in ops))],
                        "the whole trace (no step annotations, no XLA module names)")
    runs = _executions(ops, main)
    if runs:
        return st.Steps(runs, f"the executions of the XLA module {main} on the device (no step annotations)")
    raise TraceError("no steps found (no StepTraceAnnotation, no step-like TraceAnnotation, no repeated XLA "
                     "module); name the step's annotation with --step-marker NAME")


def _executions(ops: list[_Kernel], main: str) -> list[tuple[float, float]]:
    """The main module's executions: each starts at the kernel that runs once per execution and comes first."""
    mine = sorted((k for k in ops if k.module == main), key=lambda k: k.start)
    if not mine:
        return []
    counts = Counter(k.hlo_op or k.name for k in mine)
    fewest = min(counts.values())
    first = next(k.hlo_op or k.name for k in mine if counts[k.hlo_op or k.name] == fewest)
    starts = [k.start for k in mine if (k.hlo_op or k.name) == first]
    ends = [*starts[1:], max(k.end for k in mine)]
    return list(zip(starts, ends, strict=True))


def _resolve(k: _Kernel, instrs: dict[str, hlo.Instr], by_name: dict[str, hlo.Instr],
             main: str) -> tuple[str, str, str, str, str]:
    """(category, op_name path, scope, the instruction's name, its phase: "" when no instruction says) of one
    kernel."""
    ins = None
    if instrs and (not main or k.module in ("", main)):
        ins = instrs.get(k.hlo_op) or by_name.get(k.name) or by_name.get(re.sub(r"[.\-]", "_", k.hlo_op))
    by_kernel = taxonomy.kernel(k.name)
    if ins is not None:
        cat = hlo.category(ins)
        if cat == "other" or (by_kernel and by_kernel not in ("element-wise",)):
            cat = by_kernel or cat
        return cat, ins.op_name, hlo.scope(ins.op_name), ins.name, hlo.phase_of(ins)
    cat = by_kernel or taxonomy.custom_call(k.hlo_op)
    if cat == "other":
        cat = taxonomy.xla_kernel(k.hlo_op) or taxonomy.jax_op_name(k.op_name)
    if cat == "other":
        cat = taxonomy.generic_kernel(k.name)
    return cat, k.op_name, hlo.scope(k.op_name), k.hlo_op, ""


def _device(b: Breakdown, steps: st.Steps, ops: list[_Kernel], instrs: dict[str, hlo.Instr], main: str,
            device: str, compiling: list[tuple[float, float, str]] | None = None) -> Breakdown:
    b.device = device
    b.idle = "the device idle between kernels within the step"
    by_name = hlo.by_kernel_name(instrs) if instrs else {}
    ops = sorted(ops, key=lambda k: k.start)
    per_step: list[list[_Kernel]] = [[] for _ in steps.spans]
    inside = st.Within(steps.spans)
    for k in ops:
        i = inside.first(k.start)  # the first step holding it
        if i >= 0:
            per_step[i].append(k)
    if not any(per_step):
        raise TraceError(f"no kernels of {device} ran within the {len(steps.spans)} steps found ({steps.method})")
    intervals = [[(k.start, k.end) for k in mine] for mine in per_step]
    t0 = steps.spans[0][0]
    windows = st.device_windows(steps.spans, intervals,
                                max((k.end for k in ops if k.start < t0), default=t0))
    busy = [st.union(iv, *w) for iv, w in zip(intervals, windows, strict=True)]
    with_kernels = [i for i, mine in enumerate(per_step) if mine]
    comp_ms, comp_n = compile_time([windows[i] for i in with_kernels], compiling or [])
    kept = undisturbed([windows[i][1] - windows[i][0] for i in with_kernels], b, comp_ms)
    keep = [with_kernels[j] for j in kept]
    b.compiling([v / 1e6 for v in comp_ms], comp_n, kept)
    last_phase: dict[str, str] = {}
    for i in keep:
        for k in per_step[i]:
            if "memcpy" in k.name.lower() or "memset" in k.name.lower():
                phase = "input" if "h2d" in k.name.lower() else "rest"
                b.add(phase, "data movement", (k.end - k.start) / 1e6, name=k.name, op=k.hlo_op)
                continue
            cat, op_name, scope, op, ph = _resolve(k, instrs, by_name, main)
            phase = ph or (hlo.phase(op_name) if op_name else last_phase.get(k.line, "rest"))
            if op_name:
                last_phase[k.line] = phase
            b.add(phase, cat, (k.end - k.start) / 1e6, scope, name=k.name, op=op)
    n = len(keep)
    step_ms = sum(windows[i][1] - windows[i][0] for i in keep) / n / 1e6
    return b.finish(n, step_ms, busy_ms=sum(busy[i] for i in keep) / n / 1e6)


def _host(b: Breakdown, steps: st.Steps, ops: list[_Kernel], instrs: dict[str, hlo.Instr],
          main: str, compiling: list[tuple[float, float, str]] | None = None) -> Breakdown:
    """XLA:CPU: the thunks on the host's XLA threads; ``idle`` is the step time neither a thunk nor a compile
    covers."""
    b.device, b.idle = "CPU", "host step time no XLA op covers (dispatch, Python, idle threads)"
    windows = _aligned(b, steps.spans, ops, main)
    comp_ms, comp_n = compile_time(windows, compiling or [])
    kept = undisturbed([t1 - t0 for t0, t1 in windows], b, comp_ms)
    b.compiling([v / 1e6 for v in comp_ms], comp_n, kept)
    spans = [windows[i] for i in kept]
    _nest(ops)
    within = st.Within(spans)
    for k in ops:
        if within.first(k.start) < 0:
            continue
        ins = instrs.get(k.hlo_op) if k.module == main else None
        if ins is None:
            if instrs:
                b.add("rest", "other", (k.end - k.start - k.child) / 1e6, name=f"{k.module}:{k.hlo_op}")
            else:
                cat, op_name, scope, op, _ = _resolve(k, instrs, {}, main)
                b.add(hlo.phase(op_name) if op_name else "rest", cat, (k.end - k.start - k.child) / 1e6, scope,
                      name=k.hlo_op, op=hlo.where(op_name) or op)
            continue
        b.add(hlo.phase_of(ins), hlo.category(ins), (k.end - k.start - k.child) / 1e6, hlo.scope(ins.op_name),
              name=k.hlo_op, op=hlo.where(ins.op_name) or ins.name)
    step_ms = sum(e - s for s, e in spans) / len(spans) / 1e6
    return b.finish(len(spans), step_ms)
