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
few columns (:class:`Events`); the nesting of host ops (:func:`_nest`) and the attribution work on those
columns. Memory grows with the events, at tens of bytes each; time with the file.
"""

from __future__ import annotations

import json
import math
import re
from array import array
from collections.abc import Iterator
from typing import Any

import numpy as np

from twinbench.explain import files, structure, taxonomy
from twinbench.explain import steps as st
from twinbench.explain.breakdown import Breakdown, step_cut, undisturbed
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


class Events:
    """A torch Chrome trace's complete (``ph: X``) events of the categories explain reads, as columns: one
    pass over the file, each event reduced to its category, name (interned, cut at :data:`MAX_NAME`), times,
    thread, correlation id, device and the shape ``args`` FLOPs are read from (interned). A few tens of bytes
    an event, where the parsed JSON held hundreds."""

    def __init__(self) -> None:
        self.cat = array("b")  # index into _KEPT_CATS
        self.name = array("i")  # index into names
        self.ts, self.dur = array("d"), array("d")
        self.tid = array("i")  # index into tids; a device event's device (its thread is never read)
        #: a cpu_op's shapes (index into args_of, -1: none); a launch's or device event's correlation id
        #: (_NO_CORR: none; a value no plain id is interned, :meth:`_corr`)
        self.extra = array("q")
        self.names: list[str] = []
        self.args_of: list[dict[str, Any]] = []
        self._name_ids: dict[str, int] = {}
        self._tid_ids: dict[Any, int] = {}
        self._args_ids: dict[str, int] = {}
        self._corr_ids: dict[Any, int] = {}
        self._codes: dict[str, int] = {}  # a category as the file spells it -> its code (-1: not read)

    def __len__(self) -> int:
        return len(self.cat)

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
        if "Input Dims" not in args and "Concrete Inputs" not in args and "Input type" not in args:
            return -1
        kept = {k: args[k] for k in _ARGS if k in args}
        key = json.dumps(kept, sort_keys=True, default=str)
        i = self._args_ids.get(key)
        if i is None:
            i = self._args_ids[key] = len(self.args_of)
            self.args_of.append(kept)
        return i

    def add(self, path: str, i: int, e: dict[str, Any]) -> None:
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
        name = name if isinstance(name, str) else str(name)
        self.cat.append(code)
        self.name.append(self.name_id(name[:MAX_NAME]))
        self.ts.append(ts)
        self.dur.append(dur)
        if code in _DEVICE:
            d, pid = args.get("device"), e.get("pid")
            self.tid.append(d if isinstance(d, int) else pid if isinstance(pid, int) else 0)
        else:
            self.tid.append(self._tid(e.get("tid")))
        self.extra.append(self._args(args) if code == _CPU_OP else
                          self._corr(args.get("correlation")) if code in _LAUNCH or code in _DEVICE else -1)

    def args_at(self, i: int) -> int:
        """The shapes of event ``i`` (an index into :attr:`args_of`; -1: none): only a cpu_op has them."""
        return self.extra[i] if self.cat[i] == _CPU_OP else -1


def load(path: str) -> Events:
    """The complete (``ph: X``) events explain reads, categories normalized (``Operator`` -> ``cpu_op``...),
    streamed from the file (plain or gzipped JSON; a bare event list too); one :class:`TraceError` line for a
    file that is no trace, an event whose time is no time, or a read past the cap."""
    ev = Events()
    seen = False
    with files.stream(path, json_tokens=True) as f:  # a folder, unreadable, corrupt gzip, over a cap: one line
        for i, e in enumerate(_parse_events(path, f)):
            seen = True
            if isinstance(e, dict) and e.get("ph") == "X" and "ts" in e:
                ev.add(path, i, e)
    if not seen and not _has_events(path):
        raise TraceError(f"{path}: not a torch Chrome trace (no traceEvents)")
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


def find_steps(ev: Events, marker: str | None) -> st.Steps:
    """The steps of a torch trace (see :mod:`.steps`); raises :class:`TraceError` when none can be found."""
    cat, name_of = np.frombuffer(ev.cat, dtype=np.int8), np.frombuffer(ev.name, dtype=np.int32)
    users = set(np.unique(name_of[cat == _USER]).tolist())
    # from_markers looks only at events named by the marker, the profiler's step names or a user annotation
    wanted = np.array([n in users or st.base(name) in PROFILER_STEPS
                       or bool(marker and (name == marker or st.base(name) == marker))
                       for n, name in enumerate(ev.names)] or [False], dtype=bool)
    marked = np.flatnonzero(((cat == _CPU_OP) | (cat == _USER)) & wanted[name_of])
    host = [st.Marked(ev.names[ev.name[i]], ev.ts[i], ev.ts[i] + ev.dur[i]) for i in marked.tolist()]
    found = st.from_markers(host, marker, PROFILER_STEPS, {ev.names[n] for n in users})
    if found:
        return found
    cpu = np.flatnonzero(np.frombuffer(ev.cat, dtype=np.int8) == _CPU_OP)
    if len(cpu):
        tids = np.frombuffer(ev.tid, dtype=np.int32)[cpu]
        busy = np.bincount(tids, weights=np.frombuffer(ev.dur)[cpu])
        order = np.unique(tids, return_index=True)
        firsts = sorted(zip(order[1], order[0], strict=True))  # threads in the order their first op appears
        busiest = max((t for _, t in firsts), key=lambda t: busy[t])  # the first of equals, as before
        mine = cpu[tids == busiest]
        top = st.top_level([st.Marked(ev.names[ev.name[i]], ev.ts[i], ev.ts[i] + ev.dur[i]) for i in mine.tolist()])
        found = st.repeating_pattern(top)
        if found:
            return found
    raise TraceError("no steps found (no ProfilerStep#N, no step-like record_function annotation, no repeating "
                     "top-level op); name the step's annotation with --step-marker NAME")


class _Ops:
    """What the nesting of host ops says of each host op and launch: its (phase, category, scope), interned;
    each launch's innermost enclosing ``cpu_op``; each host op's time in ops nested in it."""

    def __init__(self, n: int, child: bool) -> None:
        self.info = array("i", bytes(4 * n))  # index into kinds
        self.owner = array("i", [-1]) * n  # launch -> the cpu_op around it (-1: none)
        self.child = array("d", bytes(8 * n if child else 0))  # only a CPU-only trace reads it (self time)
        self.kinds: list[tuple[str, str, str]] = []
        self._kind_ids: dict[tuple[str, str, str], int] = {}

    def kind(self, k: tuple[str, str, str]) -> int:
        i = self._kind_ids.get(k)
        if i is None:
            i = self._kind_ids[k] = len(self.kinds)
            self.kinds.append(k)
        return i


def _nest(ev: Events, host: np.ndarray, launches: np.ndarray, child: bool) -> _Ops:
    """Each thread's host ops and launches in time order (outer before inner), walked with a stack: a launch's
    op and every event's phase, category and scope (from its parent chain); with ``child``, each op's nested
    time."""
    out = _Ops(len(ev), child)
    both = np.concatenate([host, launches])
    ts, dur = np.frombuffer(ev.ts), np.frombuffer(ev.dur)
    # per thread, by (start, longest first); lexsort is stable: ties in the order host ops then launches,
    # each in file order
    order = both[np.lexsort((-dur[both], ts[both], np.frombuffer(ev.tid, dtype=np.int32)[both]))]
    del both
    cats_h = np.frombuffer(ev.cat, dtype=np.int8)[host]
    args_h = np.frombuffer(ev.extra, dtype=np.int64)[host]
    shaped = (cats_h == _CPU_OP) & (args_h >= 0)  # the ops with shapes: each (name, shapes) once
    pairs = np.unique(np.stack([np.frombuffer(ev.name, dtype=np.int32)[host][shaped], args_h[shaped]]), axis=1)
    scores = structure.torch_scores([{"cat": "cpu_op", "name": ev.names[n], "args": ev.args_of[a]}
                                     for n, a in pairs.T.tolist()])
    by_name: dict[int, str] = {}
    on_scores: dict[tuple[int, int], bool] = {}
    chains: dict[tuple[int, ...], tuple[str, str]] = {}
    names, args, cats, tid_of = ev.names, ev.extra, ev.cat, ev.tid
    stack: list[int] = []
    ends: list[float] = []
    chain: list[int] = []
    current = -1
    for i in _ints(order):
        if tid_of[i] != current:
            current, stack, ends, chain = tid_of[i], [], [], []
        t = ev.ts[i]
        while stack and t >= ends[-1]:
            stack.pop()
            ends.pop()
            chain.pop()
        n = ev.name[i]
        key = (*chain, n)
        pc = chains.get(key)
        if pc is None:
            named = [names[x] for x in key]
            pc = chains[key] = (_phase(named), scope_of(named))
        cat = by_name.get(n)
        if cat is None:
            cat = by_name[n] = taxonomy.torch_any(names[n])
        if cat not in ("collectives", "attention") and cats[i] == _CPU_OP and scores:
            a = args[i]
            hit = on_scores.get((n, a))
            if hit is None:
                hit = on_scores[n, a] = structure.torch_on_scores(
                    {"name": names[n], "args": ev.args_of[a] if a >= 0 else {}}, scores)
            if hit:
                cat = "attention"
        out.info[i] = out.kind((pc[0], cat, pc[1]))
        if cats[i] in _LAUNCH:
            out.owner[i] = next((s for s in reversed(stack) if cats[s] == _CPU_OP), -1)
            continue
        if stack and child:
            out.child[stack[-1]] += ev.dur[i]
        stack.append(i)
        ends.append(t + ev.dur[i])
        chain.append(n)
    return out


def _ints(idx: np.ndarray, chunk: int = 1 << 16) -> Iterator[int]:
    """The indices of ``idx`` as Python ints, a chunk at a time (a whole list would hold ~36 bytes an event)."""
    for s in range(0, len(idx), chunk):
        yield from idx[s:s + chunk].tolist()


def read(path: str, step_marker: str | None = None, device: int | None = None,
         steps: tuple[int | None, int | None] | None = None) -> Breakdown:
    """The breakdown of a torch profiler trace: its steps (``steps``: a window of them, :func:`steps.select`),
    on one device (``device``; default the first with kernels), or its host ops when it has no device
    activity."""
    ev = load(path)
    found = find_steps(ev, step_marker)
    markers = set(found.spans)  # the step annotations themselves are no op, whichever steps are explained
    found = st.select(found, steps)
    cat = np.frombuffer(ev.cat, dtype=np.int8)
    dev_of = np.frombuffer(ev.tid, dtype=np.int32)  # a device event's device
    device_idx = np.flatnonzero(np.isin(cat, list(_DEVICE)))
    devices = sorted(set(dev_of[device_idx].tolist()))
    if device is not None and device not in devices:
        where = f"devices {', '.join(map(str, devices))}" if devices else "no device activity (a CPU-only trace)"
        raise TraceError(f"{path}: no device {device} in the trace ({where})")
    step_name = np.array([st.base(n) in PROFILER_STEPS for n in ev.names] or [False], dtype=bool)
    is_host = np.isin(cat, list(_HOST)) & ~step_name[np.frombuffer(ev.name, dtype=np.int32)]
    for i in np.flatnonzero(is_host & (cat == _USER)).tolist():  # a user annotation that marks the steps
        is_host[i] = (ev.ts[i], ev.ts[i] + ev.dur[i]) not in markers
    host = np.flatnonzero(is_host)
    launches = np.flatnonzero(np.isin(cat, list(_LAUNCH)))
    nest = _nest(ev, host, launches, child=not devices)
    b = Breakdown(source="torch.profiler", steps_traced=len(found.spans), step_method=found.method,
                  cut=step_cut(found.spans, 1e3))
    b.notes.extend(found.notes)
    if not devices:
        return _host_only(b, found, ev, host, nest)
    dev = devices[0] if device is None else device
    if len(devices) > 1:
        b.notes.append(f"kernels of {len(devices)} devices ({', '.join(map(str, devices))}) in the trace: "
                       f"device {dev} shown (--device-index N for another)")
    mine = device_idx[dev_of[device_idx] == dev]
    kernels = mine[np.argsort(np.frombuffer(ev.ts)[mine], kind="stable")]
    return _device(b, found, ev, kernels, _launch_of(ev, kernels, launches), nest, f"GPU {dev}")


def _launch_of(ev: Events, kernels: np.ndarray, launches: np.ndarray) -> np.ndarray:
    """Each kernel's launch (-1: none in the trace), joined by correlation id; of launches sharing an id, the
    last in the file."""
    corr = np.frombuffer(ev.extra, dtype=np.int64)  # a launch's and a kernel's correlation id
    lc = corr[launches]
    order = np.argsort(lc, kind="stable")
    sorted_c = lc[order]
    kc = corr[kernels]
    j = np.searchsorted(sorted_c, kc, side="right") - 1
    ok = (j >= 0) & (kc != _NO_CORR)
    ok[ok] &= sorted_c[j[ok]] == kc[ok]
    out = np.full(len(kernels), -1, dtype=np.int64)
    out[ok] = launches[order[j[ok]]]
    return out


def _host_only(b: Breakdown, steps: st.Steps, ev: Events, host: np.ndarray, nest: _Ops) -> Breakdown:
    b.device, b.idle = "CPU", "host step time no op covers (dispatch, Python, idle threads)"
    durations = [t1 - t0 for t0, t1 in steps.spans]
    spans = [steps.spans[i] for i in undisturbed(durations, b)]
    inside = st.Within(spans)
    for i in _ints(host):
        if ev.cat[i] != _CPU_OP or inside.first(ev.ts[i]) < 0:
            continue
        phase, cat, scope = nest.kinds[nest.info[i]]
        self_us = max(ev.dur[i] - nest.child[i], 0.0)
        a = ev.args_at(i)
        b.add(phase, cat, self_us / 1e3, scope, name=ev.names[ev.name[i]], shapes=_shapes(ev, a),
              detail={"args": ev.args_of[a] if a >= 0 else {}, "id": i})
    step_ms = sum(t1 - t0 for t0, t1 in spans) / len(spans) / 1e3
    return b.finish(len(spans), step_ms)


def _shapes(ev: Events, a: int) -> str:
    dims = ev.args_of[a].get("Input Dims") if a >= 0 else None
    return json.dumps(dims, separators=(",", ":")) if dims else ""


def kernel_category(kernel: dict[str, Any], op_category: str) -> str:
    """A device event's category: memcpy/memset move data; a kernel whose name says what it does (gemm,
    attention, NCCL, Triton...) is that; a generic one (element-wise, reduce templates) counts for the op
    that launched it, or by its own name when that op says nothing."""
    if kernel["cat"] in ("gpu_memcpy", "gpu_memset"):
        return "data movement"
    by_name = taxonomy.kernel(kernel["name"])
    if op_category == "attention" and by_name in ("matmul", "element-wise", "reductions", "data movement"):
        return "attention"  # a gemm or softmax kernel of a written-out attention (its op works on the scores)
    if by_name:
        return by_name
    if op_category != "other":
        return op_category
    return taxonomy.generic_kernel(kernel["name"])


def _device(b: Breakdown, steps: st.Steps, ev: Events, kernels: np.ndarray, launch: np.ndarray, nest: _Ops,
            device: str) -> Breakdown:
    b.device = device
    b.idle = "the device idle between kernels within the step"
    per_step: list[list[int]] = [[] for _ in steps.spans]  # positions in kernels
    ts, dur = ev.ts, ev.dur
    when = np.where(launch >= 0, np.frombuffer(ts)[np.maximum(launch, 0)], np.frombuffer(ts)[kernels])
    inside = st.Within(steps.spans)  # unlinked: by when it ran
    for j, t in enumerate(when.tolist()):
        i = inside.first(t)
        if i >= 0:
            per_step[i].append(j)
    if not any(per_step):
        raise TraceError(f"no kernels of {device} were launched within the {len(steps.spans)} steps found "
                         f"({steps.method})")
    k_ts = np.frombuffer(ts)[kernels]
    k_end = k_ts + np.frombuffer(dur)[kernels]
    intervals = [[(ts[kernels[j]], ts[kernels[j]] + dur[kernels[j]]) for j in mine] for mine in per_step]
    t0 = steps.spans[0][0]
    before = k_end[k_ts < t0]
    windows = st.device_windows(steps.spans, intervals, float(before.max()) if len(before) else t0)
    busy = [st.union(iv, *w) for iv, w in zip(intervals, windows, strict=True)]
    with_kernels = [i for i, mine in enumerate(per_step) if mine]
    keep = [with_kernels[j] for j in undisturbed([windows[i][1] - windows[i][0] for i in with_kernels], b)]
    unlinked = 0.0
    categories: dict[tuple[int, int, str], str] = {}
    for i in keep:
        details: dict[int, dict[str, Any]] = {}  # one per op: its kernels share it
        for j in per_step[i]:
            k, lk = int(kernels[j]), int(launch[j])
            op = nest.owner[lk] if lk >= 0 else -1
            if lk < 0:
                unlinked += dur[k]
            phase, op_cat, scope = nest.kinds[nest.info[op]] if op >= 0 else \
                (nest.kinds[nest.info[lk]][0] if lk >= 0 else "rest", "other", "")
            key = (ev.cat[k], ev.name[k], op_cat)
            cat = categories.get(key)
            if cat is None:
                cat = categories[key] = kernel_category({"cat": _KEPT_CATS[ev.cat[k]], "name": ev.names[ev.name[k]]},
                                                        op_cat)
            detail = None
            if op >= 0:
                detail = details.get(op)
                if detail is None:
                    a = ev.args_at(op)
                    detail = details[op] = {"op": ev.names[ev.name[op]], "args": ev.args_of[a] if a >= 0 else {},
                                            "id": op}
            b.add(phase, cat, dur[k] / 1e3, scope, name=ev.names[ev.name[k]],
                  op=ev.names[ev.name[op]] if op >= 0 else "", shapes=_shapes(ev, ev.args_at(op)) if op >= 0 else "",
                  detail=detail)
    n = len(keep)
    total = sum(dur[int(kernels[j])] for i in keep for j in per_step[i])
    if unlinked > 0.01 * total:
        b.notes.append(f"{unlinked / total:.0%} of kernel time has no launch in the trace: charged by when it "
                       "ran, phase 'rest'")
    step_ms = sum(windows[i][1] - windows[i][0] for i in keep) / n / 1e3
    host_ms = sum(steps.spans[i][1] - steps.spans[i][0] for i in keep) / n / 1e3
    if abs(host_ms - step_ms) > 0.05 * step_ms:
        b.notes.append(f"the host's step is {host_ms:.2f} ms, the device's {step_ms:.2f} ms (from the host step's "
                       "start, or the end of the device's earlier work, to its last kernel's end)")
    return b.finish(n, step_ms, busy_ms=sum(busy[i] for i in keep) / n / 1e3)
