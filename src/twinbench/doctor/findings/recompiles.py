"""Compiling again after step 1: ``jax-recompile`` (tracing cache misses and their cause), ``torch-recompile``
(Dynamo guard failures) and ``torch-graph-break``."""

from __future__ import annotations

import re
from collections import Counter

from twinbench.doctor.findings.base import JAX_DOCS, TORCH_DOCS, Finding, Obs, _steady_notes, finding
from twinbench.doctor.observations import Note

# -- jax-recompile ------------------------------------------------------------------------------------------
RECOMPILE_WARN = 2  # tracing cache misses of a known function after step 1: 1 = info, >= 2 = warning
RECOMPILE_FIX = {
    "shape": "Give the step a few fixed shapes: pad the inputs whose shape changes to a few fixed sizes (with a "
             "mask), or drop a smaller last batch (drop_last=True).",
    "dtype": "Cast inputs to one dtype before the call, every step: x = jnp.asarray(x, jnp.float32).",
    "weak type": "Pass the same kind of value every step: make it an array once, lr = jnp.asarray(lr, "
                 "jnp.float32), instead of a Python float on some steps and an array on others.",
    "static argument": "Do not mark a value that changes every step as static: drop it from "
                       "static_argnums/static_argnames and pass it as an array, step(state, jnp.asarray(i)).",
    "new function object": "Create the jitted function once, before the loop: step = jax.jit(train_step); "
                           "not jax.jit(lambda ...) or jax.jit(functools.partial(...)) inside it.",
    "pytree structure": "Keep the arguments' structure fixed: the same dict keys, list lengths and None-ness "
                        "every step.",
}


def recompile_cause(message: str) -> str:
    """Classify one ``jax_explain_cache_misses`` message."""
    if "never seen function" in message:
        return "new function object"
    if "weak_type" in message:
        return "weak type"
    if "Static" in message or "static" in message:
        return "static argument"
    if "different input types" in message:
        m = re.search(r"now (\w+)\[[^\]]*\][^ ]* and before (\w+)\[", message)
        return "dtype" if m and m.group(1) != m.group(2) else "shape"
    if "pytree" in message:
        return "pytree structure"
    return "other"


LIBRARY_PATHS = ("/jax/", "/jaxlib/", "/flax/", "/optax/", "/site-packages/", "/dist-packages/")


def _is_user_recompile(message: str) -> bool:
    """A retrace of a function the script compiled before (not a first trace, not a library's own)."""
    if "never seen function" in message and "seen another function defined on the same line" not in message:
        return False
    m = re.search(r"defined at (\S+)", message)
    return not (m and any(p in m.group(1) for p in LIBRARY_PATHS))


SHAPES = re.compile(r"\* at ([^,]+), now (\w+)\[([\d,]*)\]\S* and before (\w+)\[([\d,]*)\]")


def changed_axes(messages: list[str]) -> tuple[dict[int, set[int]], int, str]:
    """From ``jax_explain_cache_misses``' ``now i32[32,55] and before i32[32,39]``: each axis that changed with
    the sizes seen on it, the arrays' rank, and the argument named (the first), over every message."""
    axes: dict[int, set[int]] = {}
    rank, arg = 0, ""
    for msg in messages:
        for m in SHAPES.finditer(msg):
            now = [int(d) for d in m.group(3).split(",") if d]
            before = [int(d) for d in m.group(5).split(",") if d]
            if len(now) != len(before) or now == before:
                continue
            rank, arg = rank or len(now), arg or m.group(1).strip()
            for k, (a, b) in enumerate(zip(now, before, strict=True)):
                if a != b:
                    axes.setdefault(k, set()).update((a, b))
    return axes, rank, arg


def pad_code(axis: int, rank: int, size: str) -> str:
    """``np.pad``'s call that pads ``x``'s ``axis`` (of ``rank``) up to ``size`` (an expression)."""
    widths = ", ".join(f"(0, {size} - x.shape[{axis}])" if k == axis else "(0, 0)" for k in range(rank))
    return f"x = np.pad(x, ({widths}{',' if rank == 1 else ''}), constant_values=0)"


def shape_fix(messages: list[str]) -> str:
    """The shape cause's fix, derived from the evidence: the axis that changes is padded (axis 0: the batch, to
    its full size, or the remainder dropped; another axis, a sequence length: bucketed to a few lengths), in
    code lines that run as printed on the array ``x`` (the doctor's tests execute them)."""
    axes, rank, arg = changed_axes(messages)
    if not axes or not rank:
        return RECOMPILE_FIX["shape"]
    seen = "; ".join(f"axis {k}: {', '.join(map(str, sorted(v)))}" for k, v in sorted(axes.items()))
    lines = [f"The shapes of {arg or 'an input'} change ({seen}). Give the step a few fixed shapes, "
             "with numpy (import numpy as np), for each input x of that shape:"]
    for k in sorted(axes):
        if k == 0:
            lines += [f"  {pad_code(0, rank, str(max(axes[0])))}  # the batch, padded to its full size "
                      "(mask the padded rows out of the loss), or drop_last=True in the loader"]
        else:
            lines += [f"  L = max(16, 1 << (x.shape[{k}] - 1).bit_length())  # axis {k} (a sequence length) "
                      "bucketed to 16, 32, 64, ...: one compile a bucket, not one a length",
                      f"  {pad_code(k, rank, 'L')}  # 0: your pad token's id; pad the attention "
                      "mask with 0s alike"]
    return "\n".join(lines)


def user_recompiles(obs: Obs) -> list[str]:
    """The cache misses after step 1 of the script's own functions (what jax-recompile counts)."""
    return [n.message for n in _steady_notes(obs, "cache_miss") if not n.nested and _is_user_recompile(n.message)]


def step_compiled_again(obs: Obs) -> list[Note]:
    """The backend compiles after step 1 of the program step 1 compiled (its largest compile, by name) when no
    trace missed JAX's cache: the same program compiled again for its inputs' placement (a pmapped step whose
    first inputs sit on one device, then its own outputs sharded over all of them), which
    ``jax_explain_cache_misses`` does not report."""
    if obs.step_kind not in ("jit", "pmap"):
        return []
    compiles = obs.noted("compile")
    first = [n for n in compiles if n.step == 1]
    if not first:
        return []
    fn = max(first, key=lambda n: n.s).fn
    return [n for n in compiles if n.step >= 2 and n.fn == fn]


def placement_recompile(obs: Obs, again: list[Note]) -> Finding:
    """jax-recompile for a step compiled again with no new trace (:func:`step_compiled_again`)."""
    info = obs.info
    pmap = obs.step_kind == "pmap"
    axis = info.jit_options.get("axis_name")  # the script's own jit options: free-form
    args = [a.split(":", 1)[-1] for a in info.carried_args or []]
    secs = sum(n.s for n in again)
    steps = sorted({n.step for n in again})
    if pmap and axis and args:
        fix = ("Before the loop, place what the step carries as the pmapped step returns it (sharded over the "
               "devices on its axis), so the first call compiles the program every later call runs:\n"
               "  from jax.sharding import AxisType, NamedSharding, PartitionSpec as P\n"
               f"  mesh = jax.make_mesh((jax.local_device_count(),), ({axis!r},), axis_types=(AxisType.Auto,))\n"
               + "".join(f"  {a} = jax.device_put({a}, NamedSharding(mesh, P({axis!r})))\n" for a in args)
               + "or move from pmap to jit (jax-pmap-legacy).")
    else:
        fix = ("Give the step its inputs where it leaves its outputs from the first call on: jax.device_put the "
               "state with the sharding the step returns (out.sharding) before the loop"
               + (", or move from pmap to jit (jax-pmap-legacy)." if pmap else "."))
    return Finding(
        "jax-recompile", "warning" if len(again) >= RECOMPILE_WARN else "info",  # as for traced recompiles: a
        # count, not compile seconds that vary with the machine
        f"the step's program compiled again {len(again)} time(s) after step 1, with no new trace (cause: "
        "input placement)",
        f"{again[0].fn} was compiled at step 1 and again at step(s) {', '.join(map(str, steps))} "
        f"({secs:.2f} s of backend compile), while no trace missed JAX's cache: the same shapes, placed "
        "differently"
        + ("; a pmapped step's first inputs sit on one device and its outputs, the next inputs, are sharded over "
           "all of them" if pmap else "")
        + f" (warning from {RECOMPILE_WARN} compiles after step 1)",
        fix, f"{JAX_DOCS}/migrate_pmap.html" if pmap else f"{JAX_DOCS}/jit-compilation.html#caching")


@finding(
    id='jax-recompile',
    severity='warning from 2, info at 1',
    about='speed',
    threshold="retraces of an already-compiled user function after step 1 (`jax_explain_cache_misses`; functions traced inside one retrace of the step are not counted); with no retrace, the step's program compiled again after step 1 (a pmapped step's inputs placed differently)",
    fix='by cause: shape (the axis that changes, read from the evidence, padded in code that runs as printed: the batch to its full size, a sequence length bucketed), dtype (cast once), weak type (`jnp.asarray(lr, jnp.float32)`), static argument (pass as array), new function object (`jax.jit` once), pytree structure; input placement (`jax.device_put` the carried state as the step returns it)',
    example='jax_recompile',
)
def jax_recompile(obs: Obs) -> Finding | None:
    """Threshold: >= 2 recompiles (tracing cache misses) of an already-compiled function after step 1; a
    function traced inside another one's trace (e.g. a shard_map body defined in the step) is not one. With no
    miss, the step's program compiled again after step 1 (its inputs placed differently) is one too."""
    misses = user_recompiles(obs)
    if not misses:
        again = step_compiled_again(obs)
        return placement_recompile(obs, again) if again else None
    causes = Counter(recompile_cause(m) for m in misses)
    top = causes.most_common(1)[0][0]
    example = next(m for m in misses if recompile_cause(m) == top)
    detail = [ln.strip() for ln in example.splitlines()[1:] if ln.strip()][-3:]
    compiles = _steady_notes(obs, "compile")
    steady_compile_s = sum(n.s for n in compiles)
    severity = "warning" if len(misses) >= RECOMPILE_WARN else "info"
    return Finding(
        "jax-recompile", severity,
        f"jit traced and compiled again {len(misses)} times after step 1 (cause: {top})",
        f"{len(misses)} tracing cache misses after step 1 (of {obs.steps} steps) "
        f"({', '.join(f'{c}: {n}' for c, n in causes.items())}); {len(compiles)} XLA compiles, "
        f"{steady_compile_s:.2f} s of backend compile after step 1; jax_explain_cache_misses says: "
        + " | ".join(detail) + f" (warning from {RECOMPILE_WARN} recompiles)",
        (shape_fix([m for m in misses if recompile_cause(m) == "shape"]) if top == "shape" else
         RECOMPILE_FIX.get(top, "Keep every argument's shape, dtype, weak type and structure the same each step."))
        + "\nThen keep it fixed: run steps 2.. under `with jax.no_tracing(True):` in a test (a retrace raises).",
        f"{JAX_DOCS}/jit-compilation.html#caching")


# -- torch-recompile ---------------------------------------------------------------------------------------
@finding(
    id='torch-recompile',
    severity='warning',
    about='speed',
    threshold='>= 1 dynamo recompilation (guard failure logged by `torch._logging` `recompiles`)',
    fix='`torch._dynamo.mark_dynamic(x, 0)`, fixed/padded sizes, `dynamic=True`; or keep guarded values constant',
    example='torch_recompile',
)
def torch_recompile(obs: Obs) -> Finding | None:
    """Threshold: >= 1 dynamo recompilation (a guard failed after the first compile)."""
    notes = obs.noted("recompile")
    if not notes:
        return None
    reasons = Counter(_guard_reason(n.message) for n in notes)
    shape = any("size mismatch" in r or "stride" in r for r in reasons)
    fix = ("Mark the varying dimension dynamic before the first call, torch._dynamo.mark_dynamic(x, 0), "
           "or pad batches to a few fixed sizes; torch.compile(model, dynamic=True) compiles shape-generic "
           "code once." if shape else
           "Keep what the guards check constant between calls (Python numbers, attributes, globals, "
           "tensor dtypes/devices); pass changing numbers as tensors.")
    return Finding(
        "torch-recompile", "warning",
        f"torch.compile recompiled {len(notes)} times",
        f"{len(notes)} recompilations ({obs.info.torch_graphs if obs.info.torch_graphs is not None else '?'} graphs in all); "
        f"guard failures: " + "; ".join(f"{r} x{c}" for r, c in reasons.most_common(3))
        + " (warning from 1 recompile)",
        fix, f"{TORCH_DOCS}/torch.compiler_troubleshooting.html")


def _guard_reason(message: str) -> str:
    lines = [ln.strip() for ln in message.splitlines() if ln.strip().startswith("- ")]
    head = message.splitlines()[0] if message else ""
    return (lines[0][2:] if lines else head)[:200]


# -- torch-graph-break ------------------------------------------------------------------------------------------
#: where installed packages live: a break there is the library's own (torch's optimizer breaks the graph around
#: its step on purpose), not the script's to remove
LIBRARY_DIRS = ("/site-packages/", "/dist-packages/")


def _break_line(at: str) -> str:
    """The source line of a break's ``path:line`` ("" where it cannot be read)."""
    import linecache

    path, _, line = at.rpartition(":")
    return linecache.getline(path, int(line)).strip() if line.isdigit() else ""


@finding(
    id='torch-graph-break',
    severity='warning / info',
    about='speed',
    threshold=">= 1 graph break in the script's own code (`torch._logging` `graph_breaks`, with dynamo's reason and location); breaks inside installed libraries are not counted, and a break at a `.backward()` call alone is info",
    fix='`torch.where` / `torch.cond`, move `.item()`/print and skipped calls such as `opt.zero_grad()` out, `torch._dynamo.explain`; `fullgraph=True` only where no backward call is compiled',
    example='torch_graph_break',
)
def torch_graph_break(obs: Obs) -> Finding | None:
    """Threshold: >= 1 graph break in the script's own compiled code (a warning). Breaks inside installed
    libraries (torch's optimizer breaks around its step on purpose) are not counted; a break at a
    ``.backward()`` call is inherent (dynamo does not trace autograd's backward: the code before and after it
    is still compiled), so breaks there alone are info."""
    notes = obs.noted("graph_break")
    reasons: Counter[str] = Counter()
    backward: Counter[str] = Counter()
    for n in notes:
        msg = n.message
        where = re.search(r"in user code at (\S+)", msg)
        reason = re.search(r"Graph Break Reason: (.*)", msg)
        text, at = (reason.group(1) if reason else msg.splitlines()[0]), (where.group(1) if where else "?")
        if any(d in at for d in LIBRARY_DIRS):
            continue
        if "twinbench/doctor/" in at:
            if "qualname: backward" in msg:  # the doctor's own count of loss.backward(): the script's break there
                continue  # is reported at its own line
            text, at = "a tensor read on the host (.item(), float(), bool, print) inside the compiled code", "?"
        if ".backward(" in _break_line(at):
            backward[at] += 1
            continue
        reasons[f"{text} at {at}"] += 1
    if not reasons and not backward:
        return None
    said = "; ".join(f"{r} (x{c})" for r, c in reasons.most_common(3))
    at_backward = ", ".join(backward)
    if not reasons:
        return Finding(
            "torch-graph-break", "info",
            f"torch.compile splits the function at its backward call ({at_backward})",
            f"dynamo breaks the graph at {at_backward}: it does not trace autograd's backward, so the code before "
            "and after it is compiled as separate graphs; nothing else splits it (breaks inside installed "
            "libraries, such as torch's optimizer's own around its step, are not counted)",
            "Nothing to remove: the forward and the update are still compiled. Compiling the backward too is "
            "torch's compiled autograd (torch._dynamo.config.compiled_autograd = True); time it both ways.",
            f"{TORCH_DOCS}/torch.compiler_troubleshooting.html")
    return Finding(
        "torch-graph-break", "warning",
        f"torch.compile split the function at {len(reasons)} graph breaks",
        "dynamo's break reasons: " + said + (f"; and at the backward call {at_backward} (inherent)" if backward
                                             else "")
        + " (warning from 1 break in the script's code; breaks inside installed libraries are not counted)",
        "Remove what dynamo cannot trace from the compiled code: a branch on a tensor value -> torch.where(cond, "
        "a, b) or torch.cond; .item()/print/numpy -> move out of the compiled function; a call dynamo skips "
        "(opt.zero_grad()) -> make it outside the compiled function. torch._dynamo.explain(fn)(*args) lists the "
        "breaks" + ("; compile with fullgraph=True once none is left, so a new one fails loudly." if not backward
                    else " (the backward call's stays: fullgraph=True would fail on it)."),
        f"{TORCH_DOCS}/torch.compiler_troubleshooting.html")
