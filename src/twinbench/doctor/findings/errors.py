"""The script failed: ``script-error`` (any error, with what it means) and ``jax-python-control-flow``
(a Python branch on a traced value)."""

from __future__ import annotations

from collections.abc import Callable

from twinbench.doctor.findings.base import JAX_DOCS, TORCH_DOCS, Finding, Obs, finding
from twinbench.doctor.observations import ScriptError

# -- script-error -----------------------------------------------------------------------------------------
TRACER_ERRORS = ("TracerBoolConversionError", "ConcretizationTypeError", "TracerIntegerConversionError",
                 "TracerArrayConversionError")
MEANINGS: list[tuple[Callable[[ScriptError], bool], str]] = [
    (lambda e: e.type in TRACER_ERRORS,
     "a Python `if`/`while`/`int()` on a value traced by jit: see jax-python-control-flow"),
    (lambda e: any(m in e.message for m in ("concrete values", "Traced<", "tracer", "Tracer")),
     "a value traced by jit sets an array's shape or a Python decision: make that argument of the jitted "
     "function static, @functools.partial(jax.jit, static_argnames=('name',)) (an int, a shape, a flag or a "
     "function argument: jax-eager-ops' fix names them from the values the step was called with)"),
    (lambda e: any(m in e.message + e.traceback_tail for m in
                   ("out of memory", "RESOURCE_EXHAUSTED", "OutOfMemoryError")),
     "out of memory: lower the batch size, use bf16, or rematerialise activations (jax.checkpoint, "
     "torch.utils.checkpoint)"),
    (lambda e: e.type in ("ModuleNotFoundError", "ImportError"),
     "a module is missing from this environment: install it in the interpreter twinbench runs with"),
    (lambda e: e.type == "FileNotFoundError",
     "a file was not found: the doctor runs the script in its own folder, so paths relative to that folder work"),
    (lambda e: e.type == "SystemExit", "the script ended itself with a non-zero exit code"),
    (lambda e: e.type == "KeyboardInterrupt", "the script was interrupted"),
]


ERROR_DOCS = {"jax": f"{JAX_DOCS}/errors.html", "torch": f"{TORCH_DOCS}/torch.compiler_troubleshooting.html",
              "builtins": "https://docs.python.org/3/library/exceptions.html"}


@finding(
    id='script-error',
    severity='error',
    about='script',
    threshold='the script raised, or exited non-zero',
    fix='the traceback tail and, where known, what it means (tracer errors, out of memory, missing module, relative paths)',
    example='script_error',
    locate=False,
)
def script_error(obs: Obs) -> Finding | None:
    """Threshold: the script raised, or exited with a non-zero code."""
    err = obs.error
    if not err:
        return None
    meaning = next((m for test, m in MEANINGS if test(err)), "fix the error above: the doctor diagnoses a "
                   "script that runs, and reports what it saw up to the failure")
    first = err.message.strip().splitlines()
    return Finding("script-error", "error", f"the script failed: {err.type}: {first[0][:160] if first else ''}",
                   f"after {obs.steps} steps; traceback tail:\n{err.traceback_tail}",
                   meaning, ERROR_DOCS.get(err.module.split(".")[0], ERROR_DOCS["builtins"]))


# -- jax-python-control-flow --------------------------------------------------------------------------------
@finding(
    id='jax-python-control-flow',
    severity='error',
    about='script',
    threshold='the script failed with `TracerBoolConversionError` / `ConcretizationTypeError` / `TracerIntegerConversionError`',
    fix='`jnp.where`, `lax.cond`, `lax.while_loop`; or `static_argnames` for a Python setting',
    example='jax_python_control_flow',
)
def jax_python_control_flow(obs: Obs) -> Finding | None:
    """Threshold: the script failed with a tracer conversion error (a Python branch on a traced value)."""
    err = obs.error
    if not err or err.type not in TRACER_ERRORS:
        return None
    where = [ln.strip() for ln in err.traceback_tail.splitlines() if ln.strip().startswith("File ")]
    return Finding(
        "jax-python-control-flow", "error",
        "a Python if/while (or int/bool) decides on a value traced by jit",
        f"{err.type} raised {'at ' + where[-1] if where else ''}",
        "Branch inside the computation instead of in Python:\n"
        "  if x > 0: y = f(x)          ->  y = jnp.where(x > 0, f(x), g(x))\n"
        "  (both sides expensive)      ->  y = jax.lax.cond(x > 0, f, g, x)\n"
        "  while err > tol: ...        ->  jax.lax.while_loop(cond_fn, body_fn, init)\n"
        "If the value is a Python setting (not data), make it static: jax.jit(step, static_argnames=('mode',)).",
        f"{JAX_DOCS}/control-flow.html")
