"""torch: the Chrome trace ``torch.profiler`` exports. Each op's exclusive (self) time is attributed to a
phase by its parent chain (the ``optimizer``/``Optimizer.step#`` and ``input`` annotations, the autograd
engine's ``evaluate_function`` events for the backward pass, the forward otherwise) and to a category by its
aten name. The steps are the ``twinbench_step_N`` annotations. On a GPU, kernels (``cat: kernel``) are
attributed to the op that launched them (the ``correlation`` of their ``cuda_runtime`` launch).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from twinbench.explain import taxonomy
from twinbench.explain.breakdown import Breakdown, undisturbed
from twinbench.explain.jax_trace import TraceError

_SCOPE = re.compile(r"^(block\d+(?:\.(?:attn|mlp))?|embed|head|loss)$")
_PART = re.compile(r"^(attn|mlp)$")


def load(path: str) -> list[dict[str, Any]]:
    try:
        data = json.loads(Path(path).read_text())
        return [e for e in data["traceEvents"] if e.get("ph") == "X"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise TraceError(f"{path}: not a readable torch Chrome trace ({type(e).__name__})") from e


def scope_of(chain: list[str]) -> str:
    """The innermost scope of a parent chain; ``block0`` then ``attn`` reads ``block0.attn``."""
    names = [n for n in chain if _SCOPE.match(n) or _PART.match(n)]
    if names and _PART.match(names[-1]):
        blocks = [n for n in names if n.startswith("block")]
        return f"{blocks[-1] if blocks else 'block'}.{names[-1]}"
    return names[-1] if names else ""


def _phase(chain: list[str]) -> str:
    for name in reversed(chain):  # innermost decides
        if name == "optimizer" or name.startswith("Optimizer.step"):
            return "optimizer"
        if name.startswith("Optimizer.zero_grad"):
            return "rest"
        if name == "input":
            return "input"
        if name.startswith("autograd::engine::evaluate_function") or name.endswith("Backward0"):
            return "backward"
    return "forward"


def read(path: str) -> Breakdown:
    events = load(path)
    steps = sorted((e for e in events if e.get("name", "").startswith("twinbench_step_")), key=lambda e: e["ts"])
    if not steps:
        raise TraceError(f"{path}: no twinbench_step annotations")
    kernels = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    host = [e for e in events if e.get("cat") in ("cpu_op", "user_annotation", "python_function")
            and not e["name"].startswith("twinbench_step_")]
    by_tid: dict[Any, list[dict[str, Any]]] = {}
    for e in host:
        by_tid.setdefault(e["tid"], []).append(e)
    b = Breakdown(source="torch.profiler", steps_traced=len(steps))
    steps = [steps[i] for i in undisturbed([s["dur"] for s in steps])]
    spans = [(s["ts"], s["ts"] + s["dur"]) for s in steps]
    info: dict[int, tuple[str, str, str]] = {}  # id(event) -> (phase, category, scope)
    for evs in by_tid.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[dict[str, Any]] = []
        for e in evs:
            while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"]:
                stack.pop()
            if stack:
                stack[-1]["_child"] = stack[-1].get("_child", 0.0) + e["dur"]
            chain = [s["name"] for s in stack] + [e["name"]]
            info[id(e)] = (_phase(chain), taxonomy.torch_any(e["name"]), scope_of(chain))
            e["_chain_cpu"] = [s for s in stack if s.get("cat") == "cpu_op"]
            stack.append(e)

    def within(ts: float) -> bool:
        return any(t0 <= ts <= t1 for t0, t1 in spans)

    if kernels:  # GPU: the device's time, each kernel charged to the op that launched it
        launch = {e["args"].get("correlation"): e for e in events if e.get("cat") == "cuda_runtime"}
        for k in kernels:
            lk = launch.get(k.get("args", {}).get("correlation"))
            if lk is None or not within(lk["ts"]):
                continue
            owner = _owner(lk, by_tid.get(lk["tid"], []))
            phase, cat, scope = info.get(id(owner), ("rest", "other", "")) if owner else ("rest", "other", "")
            if owner is not None and cat == "other":
                cat = taxonomy.torch_any(k["name"])
            b.add(phase, cat, k["dur"] / 1e3, scope, name=k["name"][:60],
                  detail={"op": owner["name"], "args": owner.get("args"), "id": id(owner)} if owner else None)
    else:
        for e in host:
            if e.get("cat") != "cpu_op" or not within(e["ts"]):
                continue
            phase, cat, scope = info[id(e)]
            self_us = max(e["dur"] - e.get("_child", 0.0), 0.0)
            b.add(phase, cat, self_us / 1e3, scope, name=e["name"], detail={"args": e.get("args"), "id": id(e)})
    step_ms = sum(s["dur"] for s in steps) / len(steps) / 1e3
    return b.finish(len(steps), step_ms)


def _owner(launch: dict[str, Any], evs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The innermost cpu_op enclosing a CUDA runtime launch on its thread."""
    best = None
    for e in evs:
        if (e.get("cat") == "cpu_op" and e["ts"] <= launch["ts"] <= e["ts"] + e["dur"]
                and (best is None or e["dur"] <= best["dur"])):
            best = e
    return best
