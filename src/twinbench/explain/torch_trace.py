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
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from typing import Any

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


def load_json(path: str) -> dict[str, Any]:
    """A Chrome trace as a dict with ``traceEvents`` (plain or gzipped JSON; a bare event list too)."""
    raw = files.read_bytes(path)  # a folder, unreadable, corrupt gzip, over the cap: one line
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise TraceError(f"{path}: not a readable torch Chrome trace (not JSON: {type(e).__name__})") from None
    if isinstance(data, list):
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise TraceError(f"{path}: not a torch Chrome trace (no traceEvents)")
    return data


def load(path: str) -> list[dict[str, Any]]:
    """The complete (``ph: X``) events, categories normalized (``Operator`` -> ``cpu_op``...)."""
    out = []
    for i, e in enumerate(load_json(path)["traceEvents"]):
        if not isinstance(e, dict) or e.get("ph") != "X" or "ts" not in e:
            continue
        cat = str(e.get("cat", "")).lower()
        e["cat"] = _CAT_ALIASES.get(cat, cat)
        e.setdefault("name", "")
        e["name"] = str(e["name"])
        if not isinstance(e.get("args", {}), dict):  # a hand-edited trace: args that are no mapping are none
            e["args"] = {}
        e["ts"], e["dur"] = _time(path, i, "ts", e["ts"]), _time(path, i, "dur", e.get("dur") or 0.0)
        out.append(e)
    return out


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


def _device_of(e: dict[str, Any]) -> int:
    d = e.get("args", {}).get("device")
    if isinstance(d, int):
        return d
    return e.get("pid") if isinstance(e.get("pid"), int) else 0  # type: ignore[return-value]


def find_steps(events: list[dict[str, Any]], marker: str | None) -> st.Steps:
    """The steps of a torch trace (see :mod:`.steps`); raises :class:`TraceError` when none can be found."""
    host = [st.Marked(e["name"], e["ts"], e["ts"] + e["dur"]) for e in events
            if e["cat"] in ("cpu_op", "user_annotation")]
    users = {e["name"] for e in events if e["cat"] == "user_annotation"}
    found = st.from_markers(host, marker, PROFILER_STEPS, users)
    if found:
        return found
    by_tid: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e["cat"] == "cpu_op":
            by_tid[e.get("tid")].append(e)
    if by_tid:
        busiest = max(by_tid.values(), key=lambda evs: sum(e["dur"] for e in evs))
        top = st.top_level([st.Marked(e["name"], e["ts"], e["ts"] + e["dur"]) for e in busiest])
        found = st.repeating_pattern(top)
        if found:
            return found
    raise TraceError("no steps found (no ProfilerStep#N, no step-like record_function annotation, no repeating "
                     "top-level op); name the step's annotation with --step-marker NAME")


def read(path: str, step_marker: str | None = None, device: int | None = None) -> Breakdown:
    """The breakdown of a torch profiler trace: its steps, on one device (``device``; default the first with
    kernels), or its host ops when it has no device activity."""
    events = load(path)
    steps = find_steps(events, step_marker)
    device_events = [e for e in events if e["cat"] in DEVICE_CATS]
    devices = sorted({_device_of(e) for e in device_events})
    if device is not None and device not in devices:
        where = f"devices {', '.join(map(str, devices))}" if devices else "no device activity (a CPU-only trace)"
        raise TraceError(f"{path}: no device {device} in the trace ({where})")
    spans = set(steps.spans)
    host = [e for e in events if e["cat"] in HOST_CATS and not (
        st.base(e["name"]) in PROFILER_STEPS or (e["cat"] == "user_annotation" and (e["ts"], e["ts"] + e["dur"]) in spans))]
    launches = [e for e in events if e["cat"] in LAUNCH_CATS]
    by_tid: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for e in host + launches:
        by_tid[e.get("tid")].append(e)
    scores = structure.torch_scores(host)  # attention by structure: ops on [..., T, T] scores
    info: dict[int, tuple[str, str, str]] = {}  # id(event) -> (phase, category, scope)
    owner: dict[int, dict[str, Any] | None] = {}  # id(launch) -> the innermost cpu_op around it
    for evs in by_tid.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[dict[str, Any]] = []
        for e in evs:
            while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"]:
                stack.pop()
            chain = [s["name"] for s in stack] + [e["name"]]
            cat = taxonomy.torch_any(e["name"])
            if cat not in ("collectives", "attention") and e["cat"] == "cpu_op" and structure.torch_on_scores(e, scores):
                cat = "attention"
            info[id(e)] = (_phase(chain), cat, scope_of(chain))
            if e["cat"] in LAUNCH_CATS:
                owner[id(e)] = next((s for s in reversed(stack) if s["cat"] == "cpu_op"), None)
                continue
            if stack:
                stack[-1]["_child"] = stack[-1].get("_child", 0.0) + e["dur"]
            stack.append(e)
    b = Breakdown(source="torch.profiler", steps_traced=len(steps.spans), step_method=steps.method,
                  cut=step_cut(steps.spans, 1e3))
    if not devices:
        return _host_only(b, steps, host, info)
    dev = devices[0] if device is None else device
    if len(devices) > 1:
        b.notes.append(f"kernels of {len(devices)} devices ({', '.join(map(str, devices))}) in the trace: "
                       f"device {dev} shown (--device N for another)")
    kernels = sorted((e for e in device_events if _device_of(e) == dev), key=lambda e: e["ts"])
    by_corr = {e.get("args", {}).get("correlation"): e for e in launches}
    by_corr.pop(None, None)
    launched = [(k, by_corr.get(k.get("args", {}).get("correlation"))) for k in kernels]
    return _device(b, steps, launched, info, owner, f"GPU {dev}")


def _host_only(b: Breakdown, steps: st.Steps, host: list[dict[str, Any]],
               info: dict[int, tuple[str, str, str]]) -> Breakdown:
    b.device, b.idle = "CPU", "host step time no op covers (dispatch, Python, idle threads)"
    durations = [t1 - t0 for t0, t1 in steps.spans]
    spans = [steps.spans[i] for i in undisturbed(durations, b)]
    for e in host:
        if e["cat"] != "cpu_op" or not any(t0 <= e["ts"] <= t1 for t0, t1 in spans):
            continue
        phase, cat, scope = info[id(e)]
        self_us = max(e["dur"] - e.get("_child", 0.0), 0.0)
        b.add(phase, cat, self_us / 1e3, scope, name=e["name"], shapes=_shapes(e),
              detail={"args": e.get("args"), "id": id(e)})
    step_ms = sum(t1 - t0 for t0, t1 in spans) / len(spans) / 1e3
    return b.finish(len(spans), step_ms)


def _shapes(e: dict[str, Any] | None) -> str:
    dims = (e or {}).get("args", {}).get("Input Dims")
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


def _device(b: Breakdown, steps: st.Steps, launched: list[tuple[dict[str, Any], dict[str, Any] | None]],
            info: dict[int, tuple[str, str, str]], owner: dict[int, dict[str, Any] | None],
            device: str) -> Breakdown:
    b.device = device
    b.idle = "the device idle between kernels within the step"
    per_step: list[list[tuple[dict[str, Any], dict[str, Any] | None]]] = [[] for _ in steps.spans]
    for k, lk in launched:
        ts = lk["ts"] if lk is not None else k["ts"]  # unlinked: by when it ran
        for i, (t0, t1) in enumerate(steps.spans):
            if t0 <= ts <= t1:
                per_step[i].append((k, lk))
                break
    if not any(per_step):
        raise TraceError(f"no kernels of {device} were launched within the {len(steps.spans)} steps found "
                         f"({steps.method})")
    intervals = [[(k["ts"], k["ts"] + k["dur"]) for k, _ in mine] for mine in per_step]
    t0 = steps.spans[0][0]
    windows = st.device_windows(steps.spans, intervals, max((k["ts"] + k["dur"] for k, _ in launched
                                                              if k["ts"] < t0), default=t0))
    busy = [st.union(iv, *w) for iv, w in zip(intervals, windows, strict=True)]
    with_kernels = [i for i, mine in enumerate(per_step) if mine]
    keep = [with_kernels[j] for j in undisturbed([windows[i][1] - windows[i][0] for i in with_kernels], b)]
    unlinked = 0
    for i in keep:
        for k, lk in per_step[i]:
            op = owner.get(id(lk)) if lk is not None else None
            if lk is None:
                unlinked += k["dur"]
            phase, op_cat, scope = info.get(id(op), ("rest", "other", "")) if op is not None else \
                (info[id(lk)][0] if lk is not None else "rest", "other", "")
            cat = kernel_category(k, op_cat)
            b.add(phase, cat, k["dur"] / 1e3, scope, name=k["name"], op=op["name"] if op else "",
                  shapes=_shapes(op),
                  detail={"op": op["name"], "args": op.get("args"), "id": id(op)} if op is not None else None)
    n = len(keep)
    total = sum(k["dur"] for i in keep for k, _ in per_step[i])
    if unlinked > 0.01 * total:
        b.notes.append(f"{unlinked / total:.0%} of kernel time has no launch in the trace: charged by when it "
                       "ran, phase 'rest'")
    step_ms = sum(windows[i][1] - windows[i][0] for i in keep) / n / 1e3
    host_ms = sum(steps.spans[i][1] - steps.spans[i][0] for i in keep) / n / 1e3
    if abs(host_ms - step_ms) > 0.05 * step_ms:
        b.notes.append(f"the host's step is {host_ms:.2f} ms, the device's {step_ms:.2f} ms (from the host step's "
                       "start, or the end of the device's earlier work, to its last kernel's end)")
    return b.finish(n, step_ms, busy_ms=sum(busy[i] for i in keep) / n / 1e3)
