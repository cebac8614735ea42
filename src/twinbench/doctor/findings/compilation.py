"""Compile time: ``compile-dominates`` (compilation against the script's wall time) and ``jax-unrolled-loop``
(repeated copies of a layer compiled one by one)."""

from __future__ import annotations

import re
from collections import Counter

from twinbench.doctor.findings.base import JAX_DOCS, Finding, Obs, _per_step, _step_location, finding
from twinbench.doctor.findings.recompiles import RECOMPILE_WARN, user_recompiles

# -- compile-dominates --------------------------------------------------------------------------------------------
COMPILE_SHARE = 0.30  # of the script's wall time
COMPILE_MIN_S = 1.0  # below this, compilation is too short to mention whatever its share
COMPILE_WARN_S = 120.0  # a warning from this much compilation; below it (a toy or a cut run) only info. Far
# above the run-to-run spread of a typical script's compile time on a loaded machine, so that spread never flips it


EAGER_COMPILES = 20  # compiles of single operations (an eager step's) from which they are the compile time's story


def eager_compiles(obs: Obs) -> tuple[int, float, str] | None:
    """(count, seconds, the commonest) of the backend compiles of single operations run eagerly (``jit(add)``: JAX
    compiles each primitive the first time it runs outside jit with new shapes), when the step runs op by op
    (jax-eager-ops' threshold) and they are at least ``EAGER_COMPILES``; else None."""
    from twinbench.doctor.findings.eager import EAGER_OPS_WARN

    if (_per_step(obs, "eager_ops") or 0.0) < EAGER_OPS_WARN:
        return None
    user = set(obs.candidates or {})
    ops = [n for n in obs.noted("compile")
           if (m := re.fullmatch(r"jit\((\w+)\)", n.fn)) and m.group(1) not in user]
    if len(ops) < EAGER_COMPILES:
        return None
    common = Counter(n.fn for n in ops).most_common(4)
    return len(ops), sum(n.s for n in ops), ", ".join(f"{fn} x{c}" for fn, c in common)


@finding(
    id='compile-dominates',
    severity='warning from 120 s, info from 1 s',
    about='speed',
    threshold="compilation > 30% of the script's wall time; points at `jax-recompile` (`caused_by`) when the step recompiled",
    fix="fewer distinct input shapes first (the recompile's fix), then a persistent compilation cache under the home folder, scan over layers; regional `torch.compile`; jit an op-by-op step",
    example='jax_compile_dominates',
    locate=False,
)
def compile_dominates(obs: Obs) -> Finding | None:
    """Threshold: compilation takes > 30% of the script's wall time: info from 1 s, warning from 120 s."""
    compile_s, wall = obs.compile_s, obs.wall_s
    if not wall or compile_s < COMPILE_MIN_S or compile_s / wall <= COMPILE_SHARE:
        return None
    severity = "warning" if compile_s >= COMPILE_WARN_S else "info"
    fws = obs.frameworks
    fix = []
    recompiled = user_recompiles(obs) if "jax" in fws else []
    eager = eager_compiles(obs) if "jax" in fws else None
    if eager is not None:
        fix.append(f"JAX: most of it is {eager[0]} compiles of single operations ({eager[1]:.1f} s; {eager[2]}): the "
                   "step runs op by op outside jit and each new operation and shape compiles on its own. Jit the "
                   "step (jax-eager-ops, its fix): it then compiles once as one program; then keep compiled programs "
                   "across runs, import os; jax.config.update('jax_compilation_cache_dir', "
                   "os.path.expanduser('~/.cache/jax')).")
    elif "jax" in fws:
        fix.append("JAX: " + (f"fewer distinct input shapes first: {len(recompiled)} of the compiles are recompiles "
                              "of the step after step 1 (jax-recompile: apply its fix); then " if recompiled else
                              "fewer distinct input shapes; ")
                   + "keep compiled programs across runs, import os; jax.config.update('jax_compilation_cache_dir', "
                   "os.path.expanduser('~/.cache/jax')) (and jax_persistent_cache_min_compile_time_secs=0); "
                   "compile one layer and scan over the stack (nnx.scan / jax.lax.scan instead of a Python loop of "
                   "layers).")
    if "torch" in fws:
        fix.append("PyTorch: compile the repeated block instead of the whole model (regional compilation: "
                   "torch.compile each layer), keep the FX graph cache on (TORCHINDUCTOR_FX_GRAPH_CACHE=1), "
                   "avoid recompiles (fixed or dynamic shapes).")
    return Finding(
        "compile-dominates", severity,
        f"compilation takes {100 * compile_s / wall:.0f}% of the run",
        f"{compile_s:.1f} s compiling of {wall:.1f} s wall time over {obs.steps} steps "
        + (f"({len(recompiled)} recompiles of the step after step 1: see jax-recompile) " if recompiled else "")
        + (f"({eager[0]} backend compiles of single operations run outside jit: {eager[2]}) " if eager else "")
        + f"(above {100 * COMPILE_SHARE:.0f}%: info from {COMPILE_MIN_S:g} s of compilation, warning from "
        f"{COMPILE_WARN_S:g} s); a longer run amortises it",
        "\n".join(fix) or "Compile fewer distinct shapes, and cache compiled programs across runs.",
        f"{JAX_DOCS}/persistent_compilation_cache.html",
        caused_by="jax-recompile" if len(recompiled) >= RECOMPILE_WARN else "")


# -- jax-unrolled-loop ----------------------------------------------------------------------------------------------
UNROLL_WARN_S = 0.5  # compile seconds spent on the repeated copies (all but the first): info below, warning from
UNROLL_WARN_COPIES = 8  # ... and only from this many copies: a scan has costs of its own (a while loop, stacked
# parameters and gradients, dynamic slices) that few copies do not pay back: many copies of a micro-batch compile
# faster scanned, but a 4-layer model's step compiled slower scanned and ran slower (benchmarks/RESULTS.md, "The
# doctor on public script pairs")


@finding(
    id='jax-unrolled-loop',
    severity='warning / info',
    about='speed',
    threshold="the step's jaxpr holds >= 4 back-to-back copies of one unit of >= 8 equations (a Python loop unrolled by `jit`); a warning from 8 copies costing >= 0.5 s of compile",
    fix='`jax.lax.scan` over micro-batches, `jax.lax.fori_loop`; layers stacked and scanned (`nnx.vmap`, `nnx.scan`)',
    tested_by='tests/doctor/test_doctor_program.py; tests/doctor/scripts/grad_accum_unrolled.py in test_doctor_public_styles.py',
)
def jax_unrolled_loop(obs: Obs) -> Finding | None:
    """Threshold: the step's program holds >= 4 back-to-back copies of one unit of >= 8 equations (a Python loop
    unrolled by jit); warning when there are >= 8 copies and the copies after the first cost >= 0.5 s of its
    backend compile (the compile time in proportion to the equations they are), info below."""
    prog = obs.info.step_program
    rep = prog.repeat if prog else None
    if not rep:
        return None
    extra = (rep["copies"] - 1) * rep["period"]
    share = extra / max(rep["eqns"], 1)
    compile_s = prog.compile_s if prog else 0.0
    cost = compile_s * share
    few = rep["copies"] < UNROLL_WARN_COPIES
    return Finding(
        "jax-unrolled-loop", "warning" if cost >= UNROLL_WARN_S and not few else "info",
        f"a Python loop is unrolled inside the jitted step: {rep['copies']} copies of the same "
        f"{rep['period']} operations",
        f"the step's program (jaxpr, nested calls inlined) is {rep['eqns']} equations, {rep['copies']} x "
        f"{rep['period']} of them one unit repeated back to back (from equation {rep['start']}): "
        f"{100 * share:.0f}% of the program is copies; its backend compile took {compile_s:.2f} s, about "
        f"{cost:.2f} s of it for the copies, and trace and compile time grow with the loop's count (info from 4 "
        f"copies of >= 8 operations, warning from {UNROLL_WARN_S:g} s of compile for the copies and "
        f"{UNROLL_WARN_COPIES} copies)"
        + ("; with this few copies a scan's own costs (a while loop, stacked parameters, dynamic slices) may "
           "outweigh the saving: time both before changing (a 4-layer GPT on a CPU compiled and ran slower "
           "scanned)" if few and cost >= UNROLL_WARN_S else ""),
        "Loop inside the program instead of in Python, so the body is traced and compiled once:\n"
        "  gradient accumulation: (grads, loss), _ = jax.lax.scan(micro_step, (zeros, 0.0), (xs, ys))\n"
        "  a fixed count:         x = jax.lax.fori_loop(0, n, body, x)\n"
        "  a stack of layers:     stack the layers' params and jax.lax.scan over them; in Flax NNX create "
        "them with nnx.vmap and apply them with nnx.scan",
        f"{JAX_DOCS}/control-flow.html", location=_step_location(obs))
