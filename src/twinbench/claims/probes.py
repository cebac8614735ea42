"""Small experiments for claims that are about behaviour rather than speed, run in their own process:

    python -m twinbench.claims.probes NAME OUT.json

Each probe observes what the frameworks do (how often a function is traced, what a ``print`` shows, whether
two gradients agree) and writes those observations; the verdict rules in the claim modules read them.
Nothing here decides a verdict.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROBES: dict[str, Callable[[], dict[str, Any]]] = {}


def probe(fn: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    PROBES[fn.__name__] = fn
    return fn


def _median_ms(fn: Callable[[], Any], n: int = 20) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2] * 1e3


@probe
def tracing() -> dict[str, Any]:
    """C3/C18: when does ``jax.jit`` trace again? A Python ``if`` on a traced value, a hyperparameter passed
    as a static argument vs as a traced one, and new input shapes vs shapes padded to one length."""
    import functools

    import jax
    import jax.numpy as jnp

    out: dict[str, Any] = {}

    @jax.jit
    def python_if(x):
        if x.sum() > 0:  # a Python bool of a tracer
            return x * 2
        return x

    try:
        python_if(jnp.ones(3)).block_until_ready()
        out["python_if_on_traced_value"] = "ran"
        out["python_if_error_expected"] = False
    except jax.errors.ConcretizationTypeError as e:  # TracerBoolConversionError is one: what the claim says
        out["python_if_on_traced_value"] = type(e).__name__
        out["python_if_error_expected"] = True
    except Exception as e:  # anything else is a broken probe, not evidence for the claim
        out["python_if_on_traced_value"] = f"{type(e).__name__}: {e}"[:300]
        out["python_if_error_expected"] = False

    traces: list[str] = []

    @functools.partial(jax.jit, static_argnums=1)
    def step_static(x, lr):
        traces.append("static")
        return x - lr * x

    @jax.jit
    def step_traced(x, lr):
        traces.append("traced")
        return x - lr * x

    @functools.partial(jax.jit, static_argnums=1)
    def step_flag(x, use_clip):
        traces.append("flag")
        if use_clip:  # a Python if on a static (Python) value: one program per value
            x = jnp.clip(x, -1, 1)
        return x * 2

    x = jnp.ones(8)
    lrs = [0.1, 0.2, 0.3, 0.1]
    for lr in lrs:
        step_static(x, lr).block_until_ready()
        step_traced(x, lr).block_until_ready()
    for flag in (True, False, True, False):
        step_flag(x, flag).block_until_ready()
    out["hyperparameter_values"] = len(set(lrs))
    out["static_hyperparameter_traces"] = traces.count("static")
    out["traced_hyperparameter_traces"] = traces.count("traced")
    out["python_if_static_values"] = 2
    out["python_if_static_traces"] = traces.count("flag")

    shape_traces: list[int] = []

    @jax.jit
    def loss(x):
        shape_traces.append(x.shape[0])
        return jnp.mean(x ** 2)

    lengths = [5, 7, 9, 7, 12, 5]
    for n in lengths:
        loss(jnp.ones(n)).block_until_ready()
    out["distinct_lengths"] = len(set(lengths))
    out["unpadded_traces"] = len(shape_traces)
    shape_traces.clear()
    pad_to = 16
    for n in lengths:
        loss(jnp.pad(jnp.ones(n), (0, pad_to - n))).block_until_ready()
    out["padded_traces"] = len(shape_traces)
    return out


@probe
def doctor_control_flow() -> dict[str, Any]:
    """C3: ``twinbench doctor`` on its example of a Python ``if`` on a traced value inside jit
    (examples/doctor/jax_python_control_flow.py, present in a source checkout): what does it find?"""
    import twinbench
    from twinbench.doctor import run_doctor

    script = Path(twinbench.__file__).resolve().parents[2] / "examples" / "doctor" / "jax_python_control_flow.py"
    if not script.exists():
        return {"available": False, "script": str(script)}
    result = run_doctor(script, [], None, 120.0)
    return {"available": True, "script": "examples/doctor/jax_python_control_flow.py",
            "finding_ids": [f.id for f in result.findings],
            "flagged": any(f.id == "jax-python-control-flow" for f in result.findings)}


@probe
def custom_ops() -> dict[str, Any]:
    """C19: one op (SiLU with a hand-written derivative) as ``jax.custom_vjp`` and ``torch.autograd.Function``:
    do the gradients agree, what do they cost, and what does a ``print`` inside the backward show?"""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    torch.manual_seed(0)
    x_np = np.random.default_rng(0).standard_normal((256, 512)).astype(np.float32)
    printed: dict[str, list[str]] = {"jax": [], "torch": []}

    @jax.custom_vjp
    def silu_j(x):
        return x * jax.nn.sigmoid(x)

    def silu_j_fwd(x):
        return silu_j(x), x

    def silu_j_bwd(x, g):
        printed["jax"].append(repr(x[0, 0]))  # what a user's debugging print would show
        s = jax.nn.sigmoid(x)
        return (g * (s + x * s * (1 - s)),)

    silu_j.defvjp(silu_j_fwd, silu_j_bwd)

    class SiLU(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * torch.sigmoid(x)

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            printed["torch"].append(repr(x[0, 0]))
            s = torch.sigmoid(x)
            return g * (s + x * s * (1 - s))

    grad_j = jax.jit(jax.grad(lambda x: jnp.sum(silu_j(x) ** 2)))
    grad_ref_j = jax.jit(jax.grad(lambda x: jnp.sum((x * jax.nn.sigmoid(x)) ** 2)))

    def grad_t(x: torch.Tensor) -> torch.Tensor:
        x = x.detach().requires_grad_(True)
        (SiLU.apply(x) ** 2).sum().backward()
        return x.grad

    where = shared_device(torch.cuda.is_available(), jax.default_backend())
    jdev = jax.devices()[0] if where == "gpu" else jax.devices("cpu")[0]
    tdev = torch.device("cuda" if where == "gpu" else "cpu")
    sync_t = torch.cuda.synchronize if where == "gpu" else (lambda: None)
    calls = 3
    xj, xt = jax.device_put(x_np, jdev), torch.from_numpy(x_np).to(tdev)
    for _ in range(calls):
        gj = np.asarray(grad_j(xj))
        gt = grad_t(xt).cpu().numpy()
    g_ref = np.asarray(grad_ref_j(xj))
    out: dict[str, Any] = {
        "calls": calls,
        "max_abs_diff_jax_vs_torch": float(np.max(np.abs(gj - gt))),
        "max_abs_diff_custom_vs_autodiff": float(np.max(np.abs(gj - g_ref))),
        "jax_bwd_prints": len(printed["jax"]), "torch_bwd_prints": len(printed["torch"]),
        "jax_bwd_print_example": printed["jax"][0] if printed["jax"] else "",
        "torch_bwd_print_example": printed["torch"][0] if printed["torch"] else "",
        "jax_bwd_print_shows_values": bool(printed["jax"]) and "Tracer" not in printed["jax"][0],
        "torch_bwd_print_shows_values": bool(printed["torch"]) and "Tracer" not in printed["torch"][0],
    }
    printed["jax"].clear()
    printed["torch"].clear()
    out["jax_grad_ms"] = _median_ms(lambda: grad_j(xj).block_until_ready())
    out["torch_grad_ms"] = _median_ms(lambda: (grad_t(xt), sync_t()))
    out["threads"] = torch.get_num_threads()
    out["device"] = where  # both frameworks timed there
    return out


def shared_device(torch_cuda: bool, jax_backend: str) -> str:
    """Where a probe that times both frameworks runs them: ``"gpu"`` when both see the GPU, else ``"cpu"`` for
    both (JAX on a GPU against torch on the CPU would compare devices, not frameworks)."""
    return "gpu" if torch_cuda and jax_backend in ("gpu", "cuda", "rocm") else "cpu"


@probe
def debug_print() -> dict[str, Any]:
    """C21: inside a jitted step, what do a Python ``print`` and ``jax.debug.print`` show over N calls?
    The same step in PyTorch eager for contrast."""
    import jax
    import jax.numpy as jnp
    import torch

    calls = 5

    @jax.jit
    def step(w, x):
        h = jnp.tanh(x @ w)
        print("python print:", h.sum())
        jax.debug.print("debug print: {s}", s=h.sum())
        return w - 0.1 * h.mean()

    buf = io.StringIO()
    w, x = jnp.ones((4, 4)), jnp.ones((2, 4))
    with contextlib.redirect_stdout(buf):
        for _ in range(calls):
            w = step(w, x)
        w.block_until_ready()
        jax.effects_barrier()
    lines = buf.getvalue().splitlines()
    py = [ln for ln in lines if ln.startswith("python print:")]
    dbg = [ln for ln in lines if ln.startswith("debug print:")]

    buf = io.StringIO()
    wt, xt = torch.ones(4, 4), torch.ones(2, 4)
    with contextlib.redirect_stdout(buf):
        for _ in range(calls):
            h = torch.tanh(xt @ wt)
            print("python print:", h.sum())
            wt = wt - 0.1 * h.mean()
    tl = [ln for ln in buf.getvalue().splitlines() if ln.startswith("python print:")]
    return {
        "calls": calls,
        "jit_python_prints": len(py), "jit_python_print_example": py[0] if py else "",
        "jit_python_print_shows_values": bool(py) and "Tracer" not in py[0],
        "jit_debug_prints": len(dbg), "jit_debug_print_example": dbg[0] if dbg else "",
        "jit_debug_print_shows_values": bool(dbg) and "Tracer" not in dbg[0],
        "torch_eager_prints": len(tl), "torch_eager_print_example": tl[0] if tl else "",
    }


def main(argv: list[str]) -> int:
    from twinbench.folder_io import write_file

    name, out = argv[0], Path(argv[1])
    if name not in PROBES:
        write_file(out.parent, out.name, json.dumps({"status": "failed", "error": f"unknown probe {name!r}; allowed: "
                                                                                 f"{', '.join(PROBES)}"}))
        return 2
    try:
        result = {"status": "ok", **PROBES[name]()}
    except Exception as e:
        result = {"status": "failed", "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]}
    write_file(out.parent, out.name, json.dumps(result, indent=1))  # never through a link in the folder
    return 0 if result["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
