"""TPU: a ``jax.profiler`` profile of a TPU (``/device:TPU:N`` planes), read with :mod:`.xplane`.

The device plane's ``XLA Ops`` line holds each executed HLO instruction, and its event metadata says what
the instruction is: ``hlo_category`` (``convolution fusion`` = a matmul, ``loop fusion``, ``data formatting``
= a copy/transpose, ``copy-done``...), ``tf_op`` (JAX's ``op_name`` path: the phase and the model op), and
XLA's ``flops`` and ``bytes_accessed``. Steps are the executions of the main XLA module (``XLA Modules``
line: the module with the most device time), start to start, so a step includes the device's idle time
before the next one; a profile needs no twinbench markers. Phases come from the ``op_name`` path
(``jvp(...)`` forward, ``transpose(jvp(...))`` backward, an ``optimizer`` scope); an op outside both after the
backward pass began is the parameter update (optimizer), as in a plain ``optax`` loop with no scopes; an op
with no path takes the phase of the op before it. Categories follow the model's operation first (an
attention product or softmax is attention whatever the TPU fused it into), then the ``hlo_category``.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec

from twinbench.explain import hlo, taxonomy, xplane, xplane_stream
from twinbench.explain import steps as st
from twinbench.explain.breakdown import Breakdown, undisturbed
from twinbench.explain.flops import XlaCost
from twinbench.explain.steps import TraceError
from twinbench.measure import peak

_TPU = re.compile(r"^/device:TPU:(\d+)$")
_TARGET = re.compile(r'custom_call_target="([^"]*)"')

#: ``hlo_category`` (as the TPU profiler names it) -> category; a fusion not listed is decided by its op
_BY_HLO_CATEGORY = {
    "convolution": "matmul", "convolution fusion": "matmul", "convolution base fusion": "matmul",
    "data formatting": "data movement", "copy-start": "data movement", "copy-done": "data movement",
    "async-start": "data movement", "async-done": "data movement", "iota": "data movement",
    "gather": "data movement", "scatter": "data movement", "dynamic-update-slice": "data movement",
    "host send": "data movement", "host recv": "data movement", "send": "data movement",
    "recv": "data movement", "infeed": "data movement", "outfeed": "data movement",
    "non-fusion elementwise": "element-wise", "sort": "reductions", "reduce": "reductions",
    "reduce fusion": "reductions", "all-reduce": "collectives", "all-gather": "collectives",
    "reduce-scatter": "collectives", "all-to-all": "collectives", "collective-permute": "collectives",
    "all-reduce fusion": "collectives", "all-gather fusion": "collectives",
    "reduce-scatter fusion": "collectives", "megacore fusion": "collectives",
}
taxonomy.declared("tpu_trace._BY_HLO_CATEGORY", _BY_HLO_CATEGORY.values())


def is_tpu(plane_names: list[str]) -> bool:
    return any(_TPU.match(n) for n in plane_names)


class _OpStats(msgspec.Struct, kw_only=True, frozen=True):
    """The stats of a TPU op's event metadata this reader uses (the profiler writes others, which vary by
    version: those are not read), decoded once per metadata."""

    hlo_category: str | None = None  # "convolution fusion", "loop fusion", "data formatting"...
    tf_op: str | None = None  # JAX's op_name path ("jit(step)/transpose(jvp(...))/dot_general:")
    program_id: int | str | None = None  # the XLA program the op belongs to
    flops: float | None = None  # XLA's count, per execution
    bytes_accessed: float | None = None

    @classmethod
    def of(cls, md: xplane.EventMetadata) -> _OpStats:
        try:
            return msgspec.convert(md.stats, cls, strict=False)
        except msgspec.ValidationError:  # a stat of another type than the TPU profiler's: none of them read
            return cls()


class _Info:
    """What an op's event metadata says of it, read once per metadata (every execution of an op shares it);
    what it is attributed as (:meth:`attributed`), decided once too."""

    __slots__ = ("_as", "bytes", "category", "flops", "name", "op_name", "program", "target")

    def __init__(self, md: xplane.EventMetadata) -> None:
        s = _OpStats.of(md)
        text = md.name if md.name.startswith("%") else md.display_name  # the instruction's HLO text
        self.name = md.display_name if md.name.startswith("%") else md.name
        self.name = self.name or text.split(" ", 1)[0].lstrip("%")
        self.category = s.hlo_category or ""
        self.op_name = (s.tf_op or "").rstrip(":")
        self.program = "" if s.program_id is None else str(s.program_id)
        self.flops = s.flops or 0.0
        self.bytes = s.bytes_accessed or 0.0
        t = _TARGET.search(text)
        self.target = t.group(1) if t else ""
        self._as: tuple[str, str, str, str, XlaCost] | None = None

    def attributed(self, instrs: dict[str, hlo.Instr]) -> tuple[str, str, str, str, XlaCost]:
        """(category, the op_name's phase or "", scope, where in the model, the detail the op groups read)."""
        if self._as is None:
            cat = category(self.category, self.op_name, self.name, self.target)
            ins = instrs.get(self.name)
            if ins is not None and cat in ("reductions", "element-wise") and hlo.category(ins) == "attention":
                cat = "attention"  # a softmax fused on its own (its op_name says only reduce_sum); one fused
                # into a matmul (the LM head's backward with the loss's softmax) stays a matmul
            where = "/".join(self.op_name.split("/")[-3:])  # what the op is and where in the model
            self._as = (cat, hlo.phase(self.op_name) if self.op_name else "", hlo.scope(self.op_name), where,
                        XlaCost(self.flops, self.bytes, where,
                                opaque=bool(self.target) and not self.flops))  # a Pallas kernel: XLA counts nothing
        return self._as


class _Op:
    __slots__ = ("end", "info", "start")

    def __init__(self, info: _Info, start: float, dur: float) -> None:
        self.info, self.start, self.end = info, start, start + dur


class _Unsorted(Exception):
    """An op of a step already attributed: the line's ops are not in time order."""


def category(hlo_category: str, op_name: str, name: str = "", target: str = "") -> str:
    """The category of one TPU op: collectives by what they are; the model's operation when the ``op_name``
    names attention or a normalization (a softmax or score product fused into anything); a custom call by its
    target or op_name (a Pallas kernel: ``splash``/``flash`` attention); else the ``hlo_category``; else, for a
    fusion, the primitive its ``op_name`` ends with; else element-wise (a fusion) or other."""
    hc = hlo_category.lower()
    by_cat = _BY_HLO_CATEGORY.get(hc, "")
    if by_cat == "collectives" or taxonomy.custom_call(name) == "collectives":
        return "collectives"
    scoped = taxonomy.scope_category(op_name)
    if scoped:
        return scoped
    if hc == "custom-call" or target:
        cat = taxonomy.custom_call(f"{target} {op_name}")
        if cat != "other":
            return cat
        if "ConcatBitcast" in target or not target:
            return "data movement"
    if by_cat:
        return by_cat
    if "fusion" in hc or hc == "custom fusion":
        cat = taxonomy.jax_op_name(op_name)
        if cat != "other":
            return cat
        return "data movement" if hc == "custom fusion" else "element-wise"
    return taxonomy.hlo_op(hc) if hc else "other"


def read(path: Path, src: xplane_stream.Source, device: int | None = None, module: str = "",
         hlo_text: str = "", hlo_for: Callable[[str], str] | None = None,
         steps: tuple[int | None, int | None] | None = None) -> Breakdown:
    """The breakdown of a TPU profile: the main module's executions on one TPU core (default the first;
    ``steps``: a window of them, :func:`steps.select`). With the module's compiled HLO text (``hlo_text``, or
    ``hlo_for(module name)``), a fusion whose instructions make a softmax (max, exp, sum) counts as attention,
    as it does on the CPU and GPU. Only the chosen core's plane is read, from the file (``src``), its ``XLA
    Ops`` one event at a time and attributed a step at a time (:func:`_attribute`): what is held is the
    plane's metadata, the module's executions and one step's ops."""
    assert src.f is not None
    f = src.f
    found = {int(m.group(1)): at for at in xplane_stream.planes(f, src.size()) for m in [_TPU.match(at.name)] if m}
    planes = sorted(found)
    if device is not None and device not in planes:
        raise TraceError(f"{path}: no device {device} in the trace (TPU cores {', '.join(map(str, planes))})")
    dev = min(planes) if device is None else device
    plane = xplane_stream.plane(f, found[dev])
    lines = {ln.name: ln for ln in plane.lines}
    op_line, mod_line = lines.get("XLA Ops"), lines.get("XLA Modules")  # a plane's lines as the profiler named them
    if op_line is None or next(xplane_stream.events(f, op_line), None) is None:
        raise TraceError(f"{path}: no XLA ops on TPU {dev} (was the profile stopped before the step ran?)")
    runs: dict[str, list[tuple[float, float]]] = {}
    if mod_line is not None:
        mbase = mod_line.timestamp_ns * 1000
        for mid, offset, dur in xplane_stream.events(f, mod_line):
            md = plane.event_metadata.get(mid)
            if md is not None:
                t = (mbase + offset) / 1e3
                runs.setdefault(md.name, []).append((t, t + dur / 1e3))
    if not runs:
        raise TraceError(f"{path}: no XLA module executions on TPU {dev}")
    if module:
        chosen = [m for m in runs if m == module or m.split("(")[0] == module]
        if not chosen:
            raise TraceError(f"{path}: no module {module} on TPU {dev} (modules: {', '.join(sorted(runs))})")
        main = chosen[0]
    else:
        main = max(runs, key=lambda m: sum(e - s for s, e in runs[m]))
    if hlo_for is not None and not hlo_text:
        hlo_text = hlo_for(main.split("(")[0])
    instrs = hlo.parse(hlo_text) if hlo_text else {}
    execs = sorted(runs[main])
    if len(execs) > 1:  # start to start: a step holds the idle time before the next execution
        spans = [(execs[i][0], execs[i + 1][0]) for i in range(len(execs) - 1)]
        method = f"the executions of the XLA module {main.split('(')[0]} on TPU {dev}, start to start"
    else:
        spans = [execs[0]]
        method = f"the one execution of the XLA module {main.split('(')[0]} on TPU {dev}"
    window_notes: list[str] = []
    if steps is not None:
        lo, hi, window_notes = st.bounds(len(spans), steps, method)
        method = f"{method}; steps {lo} to {hi - 1} of {len(spans)} (--steps)"
        spans, execs = spans[lo:hi], execs[lo:hi]

    device_type = plane.stats.get("device_type_string")  # the plane's stats vary by producer: read by name
    kind = "" if device_type is None else str(device_type)

    def breakdown() -> Breakdown:
        b = Breakdown(source="jax.profiler (TPU: hlo_category, op_name and XLA's FLOPs per op)"
                      + (" + HLO" if instrs else ""),
                      steps_traced=len(spans), step_method=method, compiler="XLA")
        b.device = f"TPU {dev} ({kind or 'TPU'})"
        b.idle = "the TPU idle between ops within the step (waiting on the host, the next step's dispatch)"
        sheet = peak.datasheet(kind)  # a profile read on its own carries no measured peak: the datasheet's
        if sheet and sheet.bf16_tflops:
            b.peak_tflops, b.peak_source = sheet.bf16_tflops, f"{sheet.name} datasheet bf16 peak"
        b.notes.extend(window_notes)
        if len(planes) > 1:
            b.notes.append(f"{len(planes)} TPU cores in the trace: TPU {dev} shown (--device-index N for another)")
        return b

    b = breakdown()
    keep = [spans[i] for i in undisturbed([e - s for s, e in (execs[i] for i in range(len(spans)))], b)]
    infos: dict[int, _Info] = {}
    base = op_line.timestamp_ns * 1000

    def ops() -> Iterator[_Op]:
        for mid, offset, dur in xplane_stream.events(f, op_line):
            info = infos.get(mid)
            if info is None:
                md = plane.event_metadata.get(mid)
                if md is None:
                    continue
                info = infos[mid] = _Info(md)
            yield _Op(info, (base + offset) / 1e3, dur / 1e3)

    try:
        busy, any_op = _attribute(b, keep, ops(), instrs, stream=True)
    except _Unsorted:  # ops out of time order: a step's ops are complete only at the line's end
        b = breakdown()
        undisturbed([e - s for s, e in (execs[i] for i in range(len(spans)))], b)
        busy, any_op = _attribute(b, keep, ops(), instrs, stream=False)
    if not any_op:
        raise TraceError(f"{path}: no ops of TPU {dev} ran within the {len(keep)} steps found ({method})")
    n = len(keep)
    step_ms = sum(e - s for s, e in keep) / n / 1e6
    return b.finish(n, step_ms, busy_ms=busy / n / 1e6)


def _attribute(b: Breakdown, keep: list[tuple[float, float]], ops: Iterator[_Op], instrs: dict[str, hlo.Instr],
               stream: bool) -> tuple[float, bool]:
    """Each op of the steps ``keep`` added to ``b``, a step at a time in time order; (the steps' busy time, any
    op seen). With ``stream``, a step is attributed once an op starts past its end (the line in time order;
    :class:`_Unsorted` otherwise), so that one step's ops are held, not the line's."""
    starts = [s for s, _ in keep]
    pending: dict[int, list[_Op]] = {}
    done = -1  # the steps up to this one are attributed
    busy, seen = 0.0, False
    for o in ops:
        i = bisect.bisect_right(starts, o.start) - 1
        if stream:
            while done + 1 < len(keep) and keep[done + 1][1] <= o.start:
                done += 1
                busy += _step(b, keep[done], pending.pop(done, []), instrs)
        if i < 0 or not (keep[i][0] <= o.start < keep[i][1]):
            continue
        if i <= done:
            raise _Unsorted
        pending.setdefault(i, []).append(o)
        seen = True
    for i in range(done + 1, len(keep)):
        busy += _step(b, keep[i], pending.pop(i, []), instrs)
    return busy, seen


def _step(b: Breakdown, span: tuple[float, float], mine: list[_Op], instrs: dict[str, hlo.Instr]) -> float:
    """One step's ops (in time order) added to ``b``; returns the time any op ran within the step."""
    mine.sort(key=lambda o: o.start)
    phase_before, backward_seen = "rest", False
    for o in mine:
        p = o.info
        cat, op_phase, scope, where, detail = p.attributed(instrs)
        phase = op_phase if p.op_name else phase_before
        if phase == "backward":
            backward_seen = True
        elif phase == "rest" and p.op_name and backward_seen:
            phase = "optimizer"  # outside jvp/transpose after the backward pass: the parameter update
        if p.op_name:
            phase_before = phase
        b.add(phase, cat, (o.end - o.start) / 1e6, scope, name=p.name, op=where or p.category, detail=detail)
    b.close_ops()
    return st.union([(o.start, o.end) for o in mine], *span)
