"""The step's precision: ``float64-compute`` (a step computing in float64 where the frameworks' default is fp32)."""

from __future__ import annotations

from twinbench.doctor.findings.base import JAX_DOCS, TORCH_DOCS, Finding, Obs, _mib, finding
from twinbench.doctor.observed import Float64

# -- float64-compute ------------------------------------------------------------------------------------------------
F64_WARN_SHARE = 0.10  # float64 products with this share of the step's product FLOPs warn (below: info)
F64_TORCH_SHARE = 0.5  # a torch optimizer whose parameters are this share float64 (by bytes)
# a Python number leaf (a TrainState's step before its first update) has no dtype: it is kept
CAST = "lambda a: a.astype(jnp.float32) if getattr(a, 'dtype', None) == jnp.float64 else a"


@finding(
    id='float64-compute',
    severity='warning / info',
    about='speed',
    threshold='JAX: the compiled step has products (dots, convolutions) computing in float64, a warning from 10% of its product FLOPs; torch: the optimizer\'s parameters are >= 50% float64 by bytes (a warning)',
    fix='JAX: drop `jax_enable_x64` (the line named), or cast the float64 arrays the step is given once, `jax.tree.map(lambda a: a.astype(jnp.float32) if getattr(a, \'dtype\', None) == jnp.float64 else a, params)`; torch: `model.float()` before making the optimizer',
    tested_by="tests/doctor/test_precision.py (synthetic HLO, a compiled float64 step, a torch optimizer's parameters)",
)
def float64_compute(obs: Obs) -> Finding | None:
    """Threshold: JAX: the compiled step has products (dots, convolutions) computing in float64: a warning when
    they hold >= F64_WARN_SHARE of the step's product FLOPs (float64 runs at about half fp32's rate on a CPU's
    vector units, is emulated on a TPU, runs at 1/32-1/64 on consumer GPUs, and moves twice the bytes), info
    below. torch: the parameters its optimizer updates are >= F64_TORCH_SHARE float64 by bytes: a warning."""
    prog = obs.info.step_program
    f64 = prog.float64 if prog else None
    if f64 is not None and f64.dots:
        return _jax(f64)
    return _torch(obs)


def _jax(f64: Float64) -> Finding:
    share = f64.flops / f64.all_flops if f64.all_flops else None
    sized = f", {share:.0%} of its product FLOPs ({f64.flops / 1e6:.1f} of {f64.all_flops / 1e6:.1f} MFLOP)" \
        if share is not None else ""
    args = "; ".join(f"`{a.name}` holds {a.leaves} float64 array{'s' if a.leaves > 1 else ''} ({_mib(a.bytes)}, "
                     f"the largest {a.name}{a.largest})" for a in f64.args)
    mode = ("64-bit mode is on" + (f" ({f64.x64_line})" if f64.x64_line else "")) if f64.x64 else \
        "64-bit mode was on when the step was traced (jax.experimental.enable_x64 or a config changed since)"
    evidence = (f"{f64.dots} of the step's {f64.all_dots} products (dots, convolutions) compute in float64{sized}; "
                f"the largest: "
                f"{f64.largest}. {mode}; " + (f"of the step's arguments, {args}" if args else
                                             "none of the step's arguments is float64: the program makes it"))
    fixes = []
    if f64.x64:
        where = f" ({f64.x64_line})" if f64.x64_line and ":" in f64.x64_line else ""
        fixes.append(f"Drop jax.config.update('jax_enable_x64', True){where} unless the script needs 64-bit "
                     "numbers elsewhere: without it JAX makes every float64 array it is given float32")
    for a in f64.args:
        fixes.append(f"{'or ' if fixes else ''}cast `{a.name}` to float32 once, where it is made (before the "
                     f"loop, and before the optimizer's state is built from it): {a.name} = jax.tree.map({CAST}, "
                     f"{a.name}) (import jax.numpy as jnp); a numpy array is float64 unless made float32 "
                     "(np.float32, .astype(np.float32))")
    if not f64.args:
        fixes.append(f"{'or ' if fixes else ''}make the float64 values the step creates float32 (a "
                     "dtype=jnp.float64, a numpy float64 constant it closes over)")
    severity = "warning" if share is None or share >= F64_WARN_SHARE else "info"
    return Finding("float64-compute", severity, "the step computes in float64 (fp32 is the frameworks' default)",
                   evidence, "; ".join(fixes) + ".", f"{JAX_DOCS}/default_dtypes.html",
                   location=f64.x64_line if ":" in f64.x64_line else "")


def _torch(obs: Obs) -> Finding | None:
    info = obs.info
    for key, by_dtype in info.torch_param_bytes.items():
        total = sum(by_dtype.values())
        f64 = by_dtype.get("float64", 0)
        if not total or f64 < F64_TORCH_SHARE * total:
            continue
        where = info.torch_float64_line
        return Finding(
            "float64-compute", "warning", "the model's parameters are float64 (fp32 is the frameworks' default)",
            f"the parameters {info.torch_optimizers.get(key, 'the optimizer')} updates are {f64 / total:.0%} "
            f"float64 ({_mib(f64)} of {_mib(total)}): every product of the step computes in float64"
            + (f"; the script makes float64 at {where}" if where else ""),
            "Make the model float32: model.float() right after it is made (before the optimizer, so its state is "
            "float32 too), and its float batches float32 as well (x.float(), torch.from_numpy(a).float(), "
            "a.astype(np.float32): numpy arrays are float64 unless made otherwise), or a float64 batch meets "
            "float32 weights in a dtype error.",
            f"{TORCH_DOCS}/generated/torch.nn.Module.html#torch.nn.Module.float", location=where)
    return None
