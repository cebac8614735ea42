"""torch: the Chrome trace ``torch.profiler`` exports (``.json`` or ``.json.gz``, one file per rank).

Each host op's phase comes from its parent chain (the ``optimizer``/``Optimizer.step#`` and ``input``/
``enumerate(DataLoader)`` annotations, the autograd engine's ``evaluate_function`` events for the backward
pass, the forward otherwise). On a GPU trace the device's kernels, memcpys and memsets are what is attributed:
each is charged to the host op that launched it (its ``correlation`` id joins it to the ``cuda_runtime`` or
``cuda_driver`` launch, ``cudaLaunchKernel`` or ``cuLaunchKernel`` as Triton uses; ROCm's ``hip*`` launches the
same way), its category told by the kernel's name when the name says (cuBLAS/CUTLASS gemm, flash/fmha
attention, NCCL, Triton by what it fuses), else by the launching op's aten name. ``idle`` is the device idle
between kernels within each step's window (:func:`steps.device_window`). On a CPU-only trace each op's
exclusive (self) time is attributed and ``idle`` is the host step time no op covers.

The file is never held whole: :func:`load` streams it (ijson's C backend) and keeps each event it reads as a
few columns (:class:`Events`), which go to a temporary folder a chunk at a time (:mod:`.spill`); the nesting of
host ops, the join of kernels to their launches and the attribution read them back a bucket of steps at a time
(:mod:`.torch_walk`). Memory is bounded by a chunk, a bucket and the trace's distinct names; time grows with
the file.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from twinbench.explain import files, spill, structure, taxonomy, torch_walk
from twinbench.explain import steps as st
from twinbench.explain.breakdown import COMPILING, Breakdown, compile_time, step_cut, undisturbed
from twinbench.explain.flops import OpArgs, TorchOp
from twinbench.explain.steps import TraceError

_SCOPE = re.compile(r"^(block\d+(?:\.(?:attn|mlp))?|embed|head|loss)$")
_PART = re.compile(r"^(attn|mlp)$")
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver")
HOST_CATS = ("cpu_op", "user_annotation", "python_function")
#: older kineto traces name the categories differently
_CAT_ALIASES = {"operator": "cpu_op", "runtime": "cuda_runtime", "driver": "cuda_driver", "memcpy": "gpu_memcpy",
                "memset": "gpu_memset", "cuda_driver_api": "cuda_driver", "cuda_runtime_api": "cuda_runtime"}
PROFILER_STEPS = ("ProfilerStep", "twinbench_step")

#: the longest name kept (an event's, a kernel's): a longer one is cut where it is read, so that no name makes
#: the classification or the printed table slow (templated kernel names run to a few thousand characters)
MAX_NAME = 4096
#: the ``args`` an event keeps: what steps, launches and FLOPs are read from (the rest is dropped as it is read)
_ARGS = ("Input Dims", "Input Strides", "Input type", "Concrete Inputs")
_KEPT_CATS = (*HOST_CATS, *LAUNCH_CATS, *DEVICE_CATS)
_NO_CORR = -1
_CAT_CODE = {c: i for i, c in enumerate(_KEPT_CATS)}
_CPU_OP, _USER = _CAT_CODE["cpu_op"], _CAT_CODE["user_annotation"]
_HOST = {_CAT_CODE[c] for c in HOST_CATS}
_LAUNCH = {_CAT_CODE[c] for c in LAUNCH_CATS}
_DEVICE = {_CAT_CODE[c] for c in DEVICE_CATS}


def _ijson() -> Any:
    """The streaming JSON parser (a dependency of twinbench); its absence is one line, not a traceback."""
    try:
        import ijson
    except ImportError:
        raise TraceError("reading a torch Chrome trace needs ijson (pip install 'ijson>=3.2')") from None
    return ijson


def _parse_events(path: str, f: Any) -> Iterator[Any]:
    """The trace's events one at a time, from ``traceEvents`` or a bare list: ijson's C backend (yajl2_c), so
    that only the event being read is held, never the file."""
    ijson = _ijson()

    head = files.head(path).removeprefix(b"\xef\xbb\xbf").lstrip()
    prefix = "item" if head[:1] == b"[" else "traceEvents.item"
    try:
        yield from ijson.items(f, prefix, use_float=True, buf_size=files.JSON_READ)
    except (ijson.JSONError, RecursionError, UnicodeDecodeError) as e:
        raise TraceError(f"{path}: not a readable torch Chrome trace (not JSON: {type(e).__name__})") from None


class Events(spill.Columns):
    """A torch Chrome trace's complete (``ph: X``) events of the categories explain reads, as columns: one
    pass over the file, each event reduced to its category, name (interned, cut at :data:`MAX_NAME`), times,
    thread, correlation id, device and the shape ``args`` FLOPs are read from (interned). A few tens of bytes
    an event, where the parsed JSON held hundreds; past a chunk they go to disk (:class:`spill.Columns`), and
    what the steps need without reading them back is counted as they come: the user annotations' names, each
    device's kernels."""

    def __init__(self, store: spill.Spill | None = None, chunk: int | None = None) -> None:
        self.store = store or spill.Spill()
        # cat: index into _KEPT_CATS; name: into names; tid: into tids, a device event's device (its thread is
        # never read); extra: a cpu_op's shapes (index into args_of, -1: none), a launch's or device event's
        # correlation id (_NO_CORR: none; a value no plain id is interned, :meth:`_corr`)
        super().__init__(self.store, {"cat": "b", "name": "i", "ts": "d", "dur": "d", "tid": "i", "extra": "q"},
                         chunk)
        self.names: list[str] = []
        self.args_of: list[OpArgs] = []  # each distinct set of a cpu_op's recorded inputs, once
        self.users: set[int] = set()  # the names of user annotations
        self.devices: dict[int, int] = {}  # device -> its kernels, memcpys and memsets
        self.threads: dict[int, float] = {}  # thread -> its cpu_ops' time
        self._name_ids: dict[str, int] = {}
        self._tid_ids: dict[Any, int] = {}
        self._args_ids: dict[str, int] = {}
        self._corr_ids: dict[Any, int] = {}
        self._codes: dict[str, int] = {}  # a category as the file spells it -> its code (-1: not read)

    def close(self) -> None:
        """The columns on disk, removed."""
        self.store.close()

    def name_id(self, name: str) -> int:
        i = self._name_ids.get(name)
        if i is None:
            i = self._name_ids[name] = len(self.names)
            self.names.append(name)
        return i

    def _tid(self, tid: Any) -> int:
        try:
            return self._tid_ids.setdefault(tid, len(self._tid_ids))
        except TypeError:  # a list or a mapping where a thread id belongs: one thread per spelling
            return self._tid_ids.setdefault(repr(tid), len(self._tid_ids))

    def _corr(self, c: Any) -> int:
        if c is None:
            return _NO_CORR
        if isinstance(c, float) and c.is_integer():
            c = int(c)  # 5.0 joins 5, as a dict key did
        if type(c) is int and c >= 0:
            return c
        try:
            return self._corr_ids.setdefault(c, -2 - len(self._corr_ids))  # anything else: its own negative id
        except TypeError:
            return _NO_CORR

    def _args(self, args: dict[str, Any]) -> int:
        # the raw event's args (keys vary by producer): per event only the shape keys' text is made, for the
        # key; the typed OpArgs once per distinct set
        if "Input Dims" not in args and "Concrete Inputs" not in args and "Input type" not in args:
            return -1
        kept = {k: args[k] for k in _ARGS if k in args}
        key = json.dumps(kept, sort_keys=True, default=str)
        i = self._args_ids.get(key)
        if i is None:
            i = self._args_ids[key] = len(self.args_of)
            self.args_of.append(OpArgs.of(kept))
        return i

    def add(self, path: str, i: int, e: dict[str, Any]) -> None:
        """One raw Chrome trace event (as ijson parsed it: its fields and its ``args`` vary by producer and
        version, so they are read with ``.get`` here, once, and kept as typed columns)."""
        raw_cat = e.get("cat", "")
        code = self._codes.get(raw_cat) if isinstance(raw_cat, str) else None
        if code is None:
            cat = str(raw_cat).lower()
            code = _CAT_CODE.get(_CAT_ALIASES.get(cat, cat), -1)
            if isinstance(raw_cat, str):
                self._codes[raw_cat] = code
        ts, dur = e["ts"], e.get("dur") or 0.0
        if type(ts) is not float or not -1e18 <= ts <= 1e18:  # a float in range is a time as it is
            ts = _time(path, i, "ts", ts)
        if type(dur) is not float or not 0.0 <= dur <= MAX_US:
            dur = _time(path, i, "dur", dur)
        if code < 0:
            return
        args = e.get("args")
        args = args if isinstance(args, dict) else {}  # a hand-edited trace: args that are no mapping are none
        name = e.get("name", "")
        n = self._name_ids.get(name) if type(name) is str else None
        if n is None:
            n = self.name_id((name if isinstance(name, str) else str(name))[:MAX_NAME])
        self.cat.append(code)
        self.name.append(n)
        self.ts.append(ts)
        self.dur.append(dur)
        if code in _DEVICE:
            d, pid = args.get("device"), e.get("pid")
            tid = d if isinstance(d, int) else pid if isinstance(pid, int) else 0
            self.devices[tid] = self.devices.get(tid, 0) + 1
        else:
            t = e.get("tid")
            try:
                tid = self._tid_ids[t]
            except (KeyError, TypeError):
                tid = self._tid(t)
            if code == _USER:
                self.users.add(n)
            elif code == _CPU_OP:
                self.threads[tid] = self.threads.get(tid, 0.0) + dur
        self.tid.append(tid)
        self.extra.append(self._args(args) if code == _CPU_OP else
                          self._corr(args.get("correlation")) if code in _LAUNCH or code in _DEVICE else -1)
        if len(self.cat) >= self.chunk:
            self.flush()


def load(path: str, chunk: int | None = None) -> Events:
    """The complete (``ph: X``) events explain reads, categories normalized (``Operator`` -> ``cpu_op``...),
    streamed from the file (plain or gzipped JSON; a bare event list too); one :class:`TraceError` line for a
    file that is no trace, an event whose time is no time, or a read past the cap. The caller closes the
    events (:meth:`Events.close`: what went to disk)."""
    ev = Events(chunk=chunk)
    seen = False
    try:
        with files.stream(path, json_tokens=True) as f:  # a folder, unreadable, corrupt gzip, over a cap: one line
            for i, e in enumerate(_parse_events(path, f)):
                seen = True
                # a raw event (its fields vary by producer): only complete events with a time are kept
                if isinstance(e, dict) and e.get("ph") == "X" and "ts" in e:
                    ev.add(path, i, e)
        if not seen and not _has_events(path):
            raise TraceError(f"{path}: not a torch Chrome trace (no traceEvents)")
    except BaseException:
        ev.close()
        raise
    return ev


def _has_events(path: str) -> bool:
    """Whether a trace with no events has a ``traceEvents`` list at all (an empty one: no steps, said later)."""
    ijson = _ijson()

    head = files.head(path).removeprefix(b"\xef\xbb\xbf").lstrip()
    if head[:1] == b"[":
        return True
    with files.stream(path, json_tokens=True) as f:
        try:
            return any(p == "traceEvents" and ev == "start_array" for p, ev, _ in ijson.parse(f, buf_size=files.JSON_READ))
        except (ijson.JSONError, RecursionError, UnicodeDecodeError) as e:
            raise TraceError(f"{path}: not a readable torch Chrome trace (not JSON: {type(e).__name__})") from None


#: the largest time a trace event may carry, in microseconds (a year): beyond it a field is no time
MAX_US = 365 * 86400 * 1e6


def _time(path: str, i: int, field: str, value: object) -> float:
    """A ``ts``/``dur`` field as microseconds: a number (or numeric string) that is finite, and for ``dur`` not
    negative, within a year; anything else is one :class:`TraceError` line naming the event."""
    try:
        t = float(value) if not isinstance(value, bool) else math.nan  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        t = math.nan
    if not (math.isfinite(t) and abs(t) <= (MAX_US if field == "dur" else 1e18)) or (field == "dur" and t < 0):
        raise TraceError(f"{path}: event {i} has {field} {str(value)[:40]!r}, not a time in microseconds "
                         f"({'0 to a year' if field == 'dur' else 'a finite number'}); a corrupt or hand-edited trace")
    return t


def scope_of(chain: list[str]) -> str:
    """The innermost scope of a parent chain; ``block0`` then ``attn`` reads ``block0.attn``."""
    names = [n for n in chain if _SCOPE.match(n) or _PART.match(n)]
    if names and _PART.match(names[-1]):
        blocks = [n for n in names if n.startswith("block")]
        return f"{blocks[-1] if blocks else 'block'}.{names[-1]}"
    return names[-1] if names else ""


def _phase(chain: list[str]) -> str:
    if any(taxonomy.compile_event(n) for n in chain):  # torch.compile at work: its ops are its compile time
        return COMPILING
    if chain and _UPDATE_OP.match(chain[-1]) and not any(_is_backward(n) for n in chain):
        return "optimizer"  # a multi-tensor (foreach) or fused update outside Optimizer.step: clipping, a manual loop
    for name in reversed(chain):  # innermost decides
        if name == "optimizer" or name.startswith("Optimizer.step"):
            return "optimizer"
        if name.startswith("Optimizer.zero_grad"):
            return "rest"
        if name == "input" or name.startswith("enumerate(DataLoader)"):
            return "input"
        if name.startswith("autograd::engine::evaluate_function") or name.endswith("Backward0"):
            return "backward"
    return "forward"


_UPDATE_OP = re.compile(r"^aten::(_foreach_\w+|_fused_(adam|adamw|sgd|adagrad)\w*)$")


def _is_backward(name: str) -> bool:
    return name.startswith("autograd::engine::evaluate_function") or name.endswith("Backward0")


def _marked(ev: Events, wanted: np.ndarray) -> list[st.Marked]:
    """The cpu_ops and user annotations whose names ``wanted`` holds (by name index)."""
    host: list[st.Marked] = []
    for _, c in ev.chunks(("cat", "name", "ts", "dur")):
        cat, name_of = c["cat"], c["name"]
        m = ((cat == _CPU_OP) | (cat == _USER)) & wanted[name_of]
        host.extend(st.Marked(ev.names[n], t, t + d) for n, t, d in
                    zip(name_of[m].tolist(), c["ts"][m].tolist(), c["dur"][m].tolist(), strict=True))
    return host


def find_steps(ev: Events, marker: str | None) -> st.Steps:
    """The steps of a torch trace (see :mod:`.steps`); raises :class:`TraceError` when none can be found."""
    # from_markers looks only at events named by the marker, the profiler's step names or a user annotation;
    # the user annotations only where there is neither (a long trace has many, its steps few)
    profiler = np.array([st.base(name) in PROFILER_STEPS for name in ev.names] or [False], dtype=bool)
    named = np.array([bool(marker and (name == marker or st.base(name) == marker)) for name in ev.names] or [False],
                     dtype=bool)
    users = np.zeros(len(named), dtype=bool)
    users[list(ev.users)] = True
    user_names = {ev.names[n] for n in ev.users}
    found = None
    for wanted in ([named] if marker else [profiler, profiler | users]):
        host = _marked(ev, wanted)
        if marker or host:
            found = st.from_markers(host, marker, PROFILER_STEPS, user_names)
        if found:
            return found
    if ev.threads:
        busiest = max(ev.threads, key=lambda t: ev.threads[t])  # the first of equals, as before
        mine: list[st.Marked] = []  # no markers: that thread's ops are held to find the pattern (a short trace)
        for _, c in ev.chunks(("cat", "name", "ts", "dur", "tid")):
            m = (c["cat"] == _CPU_OP) & (c["tid"] == busiest)
            mine.extend(st.Marked(ev.names[n], t, t + d) for n, t, d in
                        zip(c["name"][m].tolist(), c["ts"][m].tolist(), c["dur"][m].tolist(), strict=True))
        found = st.repeating_pattern(st.top_level(mine))
        if found:
            return found
    raise TraceError("no steps found (no ProfilerStep#N, no step-like record_function annotation, no repeating "
                     "top-level op); name the step's annotation with --step-marker NAME")


_CODES = torch_walk.Codes(_CPU_OP, _USER, _HOST, _LAUNCH, _DEVICE, _NO_CORR)


def read(path: str, step_marker: str | None = None, device: int | None = None,
         steps: tuple[int | None, int | None] | None = None, chunk: int | None = None) -> Breakdown:
    """The breakdown of a torch profiler trace: its steps (``steps``: a window of them, :func:`steps.select`),
    on one device (``device``; default the first with kernels), or its host ops when it has no device
    activity. ``chunk``: the events held in memory at a time (default :data:`spill.CHUNK`)."""
    ev = load(path, chunk)
    try:
        return _read(path, ev, step_marker, device, steps)
    finally:
        ev.close()


def _read(path: str, ev: Events, step_marker: str | None, device: int | None,
          steps: tuple[int | None, int | None] | None) -> Breakdown:
    found = find_steps(ev, step_marker)
    markers = set(found.spans)  # the step annotations themselves are no op, whichever steps are explained
    found = st.select(found, steps)
    devices = sorted(ev.devices)
    if device is not None and device not in devices:
        where = f"devices {', '.join(map(str, devices))}" if devices else "no device activity (a CPU-only trace)"
        raise TraceError(f"{path}: no device {device} in the trace ({where})")
    step_name = np.array([st.base(n) in PROFILER_STEPS for n in ev.names] or [False], dtype=bool)
    marker_starts = np.array(sorted({t0 for t0, _ in markers}), dtype=np.float64)
    host_cats, launch_cats = np.array(sorted(_HOST), dtype=np.int8), np.array(sorted(_LAUNCH), dtype=np.int8)

    def walked(c: dict[str, np.ndarray]) -> np.ndarray:
        """The host ops (not the step annotations) and launches of a chunk."""
        cat = c["cat"]
        is_host = np.isin(cat, host_cats) & ~step_name[c["name"]]
        user = np.flatnonzero(is_host & (cat == _USER) & np.isin(c["ts"], marker_starts))
        for i, t, d in zip(user.tolist(), c["ts"][user].tolist(), c["dur"][user].tolist(), strict=True):
            is_host[i] = (t, t + d) not in markers  # a user annotation that marks the steps
        return is_host | np.isin(cat, launch_cats)

    b = Breakdown(source="torch.profiler", steps_traced=len(found.spans), step_method=found.method,
                  cut=step_cut(found.spans, 1e3))
    b.notes.extend(found.notes)
    parts = torch_walk.buckets(ev, found.spans, walked, ev.store)
    scores = structure.torch_scores((ev.names[n], ev.args_of[a]) for n, a in _shaped(ev, walked))
    compiling = _compiling(ev)
    if not devices:
        return _host_only(b, found, ev, parts, scores, compiling)
    dev = devices[0] if device is None else device
    if len(devices) > 1:
        b.notes.append(f"kernels of {len(devices)} devices ({', '.join(map(str, devices))}) in the trace: "
                       f"device {dev} shown (--device-index N for another)")
    n = max(1, -(-max(ev.devices[dev], 1) // spill.PART))  # partitions by correlation id
    launches = spill.Parts(ev.store, torch_walk.LAUNCH, n)
    w = torch_walk.Walk(ev, _CODES, scores, _phase_scope, launches, None)
    torch_walk.walk(ev, parts, w)
    kernels = spill.Parts(ev.store, torch_walk.KERNEL, n)
    before = torch_walk.kernels_of(ev, dev, _CODES, kernels, found.spans[0][0])
    per_bucket = max(1, len(found.spans) * spill.PART // max(ev.devices[dev], 1))
    joined = spill.Parts(ev.store, torch_walk.JOINED, -(-len(found.spans) // per_bucket))
    torch_walk.join(launches, kernels, st.Within(found.spans), per_bucket, _NO_CORR, joined)

    def category(cat: int, name: str, op_cat: str) -> str:
        return kernel_category(_KEPT_CATS[cat], name, op_cat)

    return torch_walk.attribute(b, found, joined, before, ev, w, category, f"GPU {dev}", compiling)


def _phase_scope(chain: list[str]) -> tuple[str, str]:
    return _phase(chain), scope_of(chain)


def _shaped(ev: Events, walked: Callable[[dict[str, np.ndarray]], np.ndarray]) -> list[tuple[int, int]]:
    """The host ops with shapes, each (name, shapes) once, in order: what the attention scores are read from."""
    pairs: set[tuple[int, int]] = set()
    for _, c in ev.chunks(("cat", "name", "ts", "dur", "extra")):
        m = walked(c) & (c["cat"] == _CPU_OP) & (c["extra"] >= 0)
        if m.any():
            both = np.unique(np.stack([c["name"][m].astype(np.int64), c["extra"][m]]), axis=1)
            pairs.update(zip(both[0].tolist(), both[1].tolist(), strict=True))
    return sorted(pairs)


def _compiling(ev: Events) -> list[tuple[float, float, str]]:
    """The host's compile events (``torch.compile``'s Dynamo and Inductor phases: :func:`taxonomy.compile_event`),
    as ``(start, end, name)`` in microseconds."""
    wanted = np.array([taxonomy.compile_event(n) for n in ev.names] or [False], dtype=bool)
    out: list[tuple[float, float, str]] = []
    if not wanted.any():
        return out
    for _, c in ev.chunks(("cat", "name", "ts", "dur")):
        m = ((c["cat"] == _USER) | (c["cat"] == _CPU_OP)) & wanted[c["name"]]
        out.extend((t, t + d, ev.names[n]) for n, t, d in
                   zip(c["name"][m].tolist(), c["ts"][m].tolist(), c["dur"][m].tolist(), strict=True))
    return out


def _host_only(b: Breakdown, steps: st.Steps, ev: Events, parts: spill.Parts, scores: Any,
               compiling: list[tuple[float, float, str]]) -> Breakdown:
    """A CPU-only trace: each cpu_op's self time (its time less its nested ops') in the undisturbed steps; the
    time a compiler ran in a step is its compilation, the ops it ran inside it none of their own."""
    b.device, b.idle = "CPU", "host step time no op covers (dispatch, Python, idle threads)"
    durations = [t1 - t0 for t0, t1 in steps.spans]
    comp_ms, comp_n = compile_time(steps.spans, compiling)
    kept = undisturbed(durations, b, comp_ms)
    b.compiling([v / 1e3 for v in comp_ms], comp_n, kept)
    spans = [steps.spans[i] for i in kept]
    inside = st.Within(spans)
    details: dict[int, TorchOp] = {}
    shapes: dict[int, str] = {}

    def on_pop(op: list[Any]) -> None:  # [row, end, name, cat, kind, shapes, dur, child time, start]
        if op[3] != _CPU_OP or inside.first(op[8]) < 0:
            return
        phase, cat, scope = w.kinds[op[4]]
        if phase == COMPILING:  # inside a compile event: counted in the step's compile time
            return
        a = op[5]
        if a not in details:
            details[a] = TorchOp(ev.args_of[a] if a >= 0 else None)
            shapes[a] = torch_walk.shapes_text(ev.args_of, a)
        b.add(phase, cat, max(op[6] - op[7], 0.0) / 1e3, scope, name=ev.names[op[2]], shapes=shapes[a],
              detail=details[a])

    w = torch_walk.Walk(ev, _CODES, scores, _phase_scope, None, on_pop)
    torch_walk.walk(ev, parts, w)
    step_ms = sum(t1 - t0 for t0, t1 in spans) / len(spans) / 1e3
    return b.finish(len(spans), step_ms)


def kernel_category(cat: str, name: str, op_category: str) -> str:
    """A device event's category (``cat``: its trace category, normalized): memcpy/memset move data; a kernel
    whose name says what it does (gemm, attention, NCCL, Triton...) is that; a generic one (element-wise,
    reduce templates) counts for the op that launched it, or by its own name when that op says nothing."""
    if cat in ("gpu_memcpy", "gpu_memset"):
        return "data movement"
    by_name = taxonomy.kernel(name)
    if op_category == "attention" and by_name in ("matmul", "element-wise", "reductions", "data movement"):
        return "attention"  # a gemm or softmax kernel of a written-out attention (its op works on the scores)
    if by_name:
        return by_name
    if op_category != "other":
        return op_category
    return taxonomy.generic_kernel(name)
