"""Small experiments for claims that are about behaviour rather than speed, run in their own process:

    python -m twinbench.claims.probes NAME OUT.json

Each probe observes what the frameworks do (how often a function is traced, what a ``print`` shows, whether
two gradients agree) and writes those observations; the verdict rules in the claim modules read them.
Nothing here decides a verdict.
"""

from __future__ import annotations

import contextlib
import io
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec


class Probe(msgspec.Struct, kw_only=True, frozen=True):
    """What every probe's file holds: ``ok``, or ``failed`` with why (then its own fields keep their defaults)."""

    status: str = "ok"
    error: str = ""
    traceback: str = ""  # the end of a failed probe's traceback


class Tracing(Probe):
    """C3/C18: when ``jax.jit`` traces again."""

    python_if_on_traced_value: str = ""  # "ran", or the error's name (the message too when it is not the tracer's)
    python_if_error_expected: bool = False  # the error was the tracer error the claim is about
    hyperparameter_values: int = 0
    static_hyperparameter_traces: int = 0
    traced_hyperparameter_traces: int = 0
    python_if_static_values: int = 0
    python_if_static_traces: int = 0
    distinct_lengths: int = 0
    unpadded_traces: int = 0
    padded_traces: int = 0


class DoctorControlFlow(Probe):
    """C3: what ``twinbench doctor`` finds on its example of a Python ``if`` on a traced value."""

    available: bool = False  # the example script is there (a source checkout)
    script: str = ""
    finding_ids: list[str] = []
    flagged: bool = False  # jax-python-control-flow among them


class CustomOps(Probe):
    """C19: SiLU with a hand-written derivative in both frameworks: gradients, cost, prints in the backward."""

    calls: int = 0
    max_abs_diff_jax_vs_torch: float = 0.0
    max_abs_diff_custom_vs_autodiff: float = 0.0
    jax_bwd_prints: int = 0
    torch_bwd_prints: int = 0
    jax_bwd_print_example: str = ""
    torch_bwd_print_example: str = ""
    jax_bwd_print_shows_values: bool = False
    torch_bwd_print_shows_values: bool = False
    jax_grad_ms: float = 0.0
    torch_grad_ms: float = 0.0
    threads: int = 0  # torch's
    device: str = ""  # where both frameworks were timed (shared_device)


class DebugPrint(Probe):
    """C21: what a Python ``print`` and ``jax.debug.print`` show inside a jitted step over ``calls`` calls."""

    calls: int = 0
    jit_python_prints: int = 0
    jit_python_print_example: str = ""
    jit_python_print_shows_values: bool = False
    jit_debug_prints: int = 0
    jit_debug_print_example: str = ""
    jit_debug_print_shows_values: bool = False
    torch_eager_prints: int = 0
    torch_eager_print_example: str = ""


P = TypeVar("P", bound=Probe)
#: each probe by name: the function run in the probe's process, and the type its file is read as
PROBES: dict[str, tuple[Callable[[], Probe], type[Probe]]] = {}


def probe(kind: type[P]) -> Callable[[Callable[[], P]], Callable[[], P]]:
    def register(fn: Callable[[], P]) -> Callable[[], P]:
        PROBES[fn.__name__] = (fn, kind)
        return fn
    return register


def read(name: str, data: object) -> Probe:
    """A probe's result (its file's JSON, or a test's dict) as its type; a probe not registered reads as
    :class:`Probe`. A field of another type is a ``msgspec.ValidationError``."""
    kind = PROBES[name][1] if name in PROBES else Probe
    return data if isinstance(data, kind) else msgspec.convert(data, kind)


def failed(name: str, error: str) -> Probe:
    """A probe that gave no result, as its type (its own fields at their defaults)."""
    return (PROBES[name][1] if name in PROBES else Probe)(status="failed", error=error)


def _median_ms(fn: Callable[[], Any], n: int = 20) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2] * 1e3


@probe(Tracing)
def tracing() -> Tracing:
    """C3/C18: when does ``jax.jit`` trace again? A Python ``if`` on a traced value, a hyperparameter passed
    as a static argument vs as a traced one, and new input shapes vs shapes padded to one length."""
    import functools

    import jax
    import jax.numpy as jnp

    @jax.jit
    def python_if(x):
        if x.sum() > 0:  # a Python bool of a tracer
            return x * 2
        return x

    try:
        python_if(jnp.ones(3)).block_until_ready()
        if_result, expected = "ran", False
    except jax.errors.ConcretizationTypeError as e:  # TracerBoolConversionError is one: what the claim says
        if_result, expected = type(e).__name__, True
    except Exception as e:  # anything else is a broken probe, not evidence for the claim
        if_result, expected = f"{type(e).__name__}: {e}"[:300], False

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

    shape_traces: list[int] = []

    @jax.jit
    def loss(x):
        shape_traces.append(x.shape[0])
        return jnp.mean(x ** 2)

    lengths = [5, 7, 9, 7, 12, 5]
    for n in lengths:
        loss(jnp.ones(n)).block_until_ready()
    unpadded = len(shape_traces)
    shape_traces.clear()
    pad_to = 16
    for n in lengths:
        loss(jnp.pad(jnp.ones(n), (0, pad_to - n))).block_until_ready()
    return Tracing(python_if_on_traced_value=if_result, python_if_error_expected=expected,
                   hyperparameter_values=len(set(lrs)), static_hyperparameter_traces=traces.count("static"),
                   traced_hyperparameter_traces=traces.count("traced"), python_if_static_values=2,
                   python_if_static_traces=traces.count("flag"), distinct_lengths=len(set(lengths)),
                   unpadded_traces=unpadded, padded_traces=len(shape_traces))


@probe(DoctorControlFlow)
def doctor_control_flow() -> DoctorControlFlow:
    """C3: ``twinbench doctor`` on its example of a Python ``if`` on a traced value inside jit
    (examples/doctor/jax_python_control_flow.py, present in a source checkout): what does it find?"""
    import twinbench
    from twinbench.doctor import run_doctor

    script = Path(twinbench.__file__).resolve().parents[2] / "examples" / "doctor" / "jax_python_control_flow.py"
    if not script.exists():
        return DoctorControlFlow(available=False, script=str(script))
    result = run_doctor(script, [], None, 120.0)
    return DoctorControlFlow(available=True, script="examples/doctor/jax_python_control_flow.py",
                             finding_ids=[f.id for f in result.findings],
                             flagged=any(f.id == "jax-python-control-flow" for f in result.findings))


@probe(CustomOps)
def custom_ops() -> CustomOps:
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
    pj, pt = list(printed["jax"]), list(printed["torch"])
    printed["jax"].clear()
    printed["torch"].clear()
    return CustomOps(
        calls=calls, max_abs_diff_jax_vs_torch=float(np.max(np.abs(gj - gt))),
        max_abs_diff_custom_vs_autodiff=float(np.max(np.abs(gj - g_ref))),
        jax_bwd_prints=len(pj), torch_bwd_prints=len(pt),
        jax_bwd_print_example=pj[0] if pj else "", torch_bwd_print_example=pt[0] if pt else "",
        jax_bwd_print_shows_values=bool(pj) and "Tracer" not in pj[0],
        torch_bwd_print_shows_values=bool(pt) and "Tracer" not in pt[0],
        jax_grad_ms=_median_ms(lambda: grad_j(xj).block_until_ready()),
        torch_grad_ms=_median_ms(lambda: (grad_t(xt), sync_t())),
        threads=torch.get_num_threads(), device=where)  # both frameworks timed there


def shared_device(torch_cuda: bool, jax_backend: str) -> str:
    """Where a probe that times both frameworks runs them: ``"gpu"`` when both see the GPU, else ``"cpu"`` for
    both (JAX on a GPU against torch on the CPU would compare devices, not frameworks)."""
    return "gpu" if torch_cuda and jax_backend in ("gpu", "cuda", "rocm") else "cpu"


@probe(DebugPrint)
def debug_print() -> DebugPrint:
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
    return DebugPrint(
        calls=calls, jit_python_prints=len(py), jit_python_print_example=py[0] if py else "",
        jit_python_print_shows_values=bool(py) and "Tracer" not in py[0],
        jit_debug_prints=len(dbg), jit_debug_print_example=dbg[0] if dbg else "",
        jit_debug_print_shows_values=bool(dbg) and "Tracer" not in dbg[0],
        torch_eager_prints=len(tl), torch_eager_print_example=tl[0] if tl else "")


def main(argv: list[str]) -> int:
    from twinbench.folder_io import write_file

    name, out = argv[0], Path(argv[1])
    if name not in PROBES:
        unknown = failed(name, f"unknown probe {name!r}; allowed: {', '.join(PROBES)}")
        write_file(out.parent, out.name, msgspec.json.encode(unknown))
        return 2
    try:
        result = PROBES[name][0]()
    except Exception as e:
        result = Probe(status="failed", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()[-2000:])
    # never through a link in the folder
    write_file(out.parent, out.name, msgspec.json.format(msgspec.json.encode(result), indent=1))
    return 0 if result.status == "ok" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
