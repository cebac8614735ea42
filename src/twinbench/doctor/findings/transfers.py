"""Where the batch goes: ``jax-host-transfer`` (host-to-device copies), ``jax-replicated-batch`` (a batch
replicated over devices that should be sharded) and ``jax-pmap-legacy``."""

from __future__ import annotations

from twinbench.doctor.findings.base import JAX_DOCS, Finding, Obs, _iter_ms, _mib, _per_step, finding
from twinbench.doctor.observations import H2D

# -- jax-host-transfer ---------------------------------------------------------------------------------------
TRANSFER_WARN_SHARE = 0.05  # estimated copy time per step, as a share of the step, from which it is a warning


@finding(
    id='jax-host-transfer',
    severity='warning / info',
    about='speed',
    threshold='>= 1 NumPy array passed to the jitted step per step, or >= 1 shaped implicit host-to-device transfer per step (the transfer guard); a warning when the bytes over the measured bandwidth reach 5% of the step',
    fix='`jax.device_put` one step ahead (prefetch to device), or build data on the device',
    example='jax_host_transfer',
)
def jax_host_transfer(obs: Obs) -> Finding | None:
    """Threshold: >= 1 host (NumPy) array implicitly copied to the device per step by the step call."""
    arrays = _per_step(obs, "h2d_numpy_args")
    guard = _per_step(obs, "h2d_guard_arrays") or 0.0
    if arrays is None or max(arrays, guard) < 1:
        return None
    nbytes = _per_step(obs, "h2d_numpy_bytes") or 0.0
    guard_all = _per_step(obs, "h2d_guard") or 0.0
    h2d = obs.info.h2d or H2D()
    severity, cost = "warning", ""
    step_ms = _iter_ms(obs)
    if h2d.bytes_per_s and step_ms:  # the cost in this run: bytes over the measured bandwidth, plus
        # one measured transfer latency per array
        copy_ms = 1e3 * nbytes / h2d.bytes_per_s
        cost_ms = copy_ms + 1e3 * max(arrays, guard) * h2d.latency_s
        share = cost_ms / step_ms
        # the margin: the copy time alone (the latency of a tiny device_put is mostly the call's own dispatch,
        # and noisy) must reach the threshold, so a run-to-run spread of the latency cannot flip it
        severity = "warning" if copy_ms / step_ms >= TRANSFER_WARN_SHARE else "info"
        cost = (f"; estimated cost {copy_ms:.3f} ms per step for the bytes at the measured "
                f"{h2d.bytes_per_s / 2**30:.2f} GiB/s host-to-device, at most {cost_ms:.3f} ms with "
                f"{1e3 * h2d.latency_s:.3f} ms per transfer ({100 * copy_ms / step_ms:.1f}% to "
                f"{100 * share:.1f}% of the {step_ms:.2f} ms steady iteration; warning when the bytes alone reach "
                f"{100 * TRANSFER_WARN_SHARE:.0f}% of the step)")
    return Finding(
        "jax-host-transfer", severity,
        f"{max(arrays, guard):.0f} host arrays are copied to the device inside every step call",
        f"{arrays:.1f} NumPy arrays ({_mib(nbytes)}) per step passed straight to the jitted step; the transfer "
        f"guard (log mode) saw {guard_all:.1f} implicit host-to-device transfers per step, {guard:.1f} of them "
        f"shaped arrays" + (cost or " (warning from 1 array per step; the bandwidth could not be measured)"),
        "Put batches on the device ahead of the step that uses them: batch = jax.device_put(next(it)) one "
        "step early (a small prefetch queue), or build the data on the device; with several devices "
        "device_put straight into the batch sharding.",
        f"{JAX_DOCS}/transfer_guard.html")


# -- jax-replicated-batch ------------------------------------------------------------------------------------
@finding(
    id='jax-replicated-batch',
    severity='warning',
    about='speed',
    threshold='> 1 device visible and every per-step input of the jitted step unsharded (`Array.sharding`)',
    fix="`jax.make_mesh(..., axis_types=(AxisType.Auto,))` + `NamedSharding(mesh, P('data'))` for the batch",
    example='jax_replicated_batch',
)
def jax_replicated_batch(obs: Obs) -> Finding | None:
    """Threshold: > 1 device, and every per-step input of the jitted step sits whole on each device."""
    info = obs.info
    fresh = info.fresh_args
    devices = info.devices
    if devices <= 1 or not fresh or obs.step_kind != "jit" or not all(a.replicated for a in fresh):
        return None
    desc = "; ".join(f"{tuple(a.shape)} {a.kind} "
                     + ("on 1 device" if a.devices == 1 else f"replicated on {a.devices} devices")
                     for a in fresh[:3])
    return Finding(
        "jax-replicated-batch", "warning",
        f"{devices} devices, but the batch is not sharded: one device (or every device) computes all of it",
        f"per-step inputs of {obs.step_fn}: {desc} (Array.sharding); threshold: every per-step input "
        f"unsharded while {devices} devices are visible",
        "Shard the batch over a data axis; jit then splits the work:\n"
        f"{MESH}\n"
        "  batch = jax.device_put(batch, NamedSharding(mesh, P('data')))\n"
        "  params = jax.device_put(params, NamedSharding(mesh, P()))  # replicated\n"
        "Check with jax.debug.visualize_array_sharding(batch).",
        f"{JAX_DOCS}/sharded-computation.html")


# -- jax-pmap-legacy -------------------------------------------------------------------------------------------
#: a mesh that runs as printed on the installed JAX: jax.make_mesh defaults to explicit axes since JAX 0.7
#: (ShardingTypeError where an array sharded over them meets an unsharded one), so the axes are given as Auto
MESH = ("  from jax.sharding import AxisType, NamedSharding, PartitionSpec as P\n"
        "  mesh = jax.make_mesh((jax.device_count(),), ('data',), axis_types=(AxisType.Auto,))")


def jit_call(obs: Obs) -> str:
    """``jax.jit(train_step, donate_argnums=0)``: the step jitted with the donation the script gave pmap."""
    opts = (obs.info.jit_options or {})
    keep = {k: v for k, v in opts.items() if k.startswith("donate")}
    return f"jax.jit({obs.step_fn or 'train_step'}" + "".join(f", {k}={v!r}" for k, v in keep.items()) + ")"


@finding(
    id='jax-pmap-legacy',
    severity='info',
    about='speed',
    threshold='a `pmap`-ed function was called (no speed-up claimed: a migration gained nothing on a public script)',
    fix="one `jit` with `NamedSharding` keeping the step's donation (code that runs as printed on the installed JAX)",
    example='jax_pmap_legacy',
)
def jax_pmap_legacy(obs: Obs) -> Finding | None:
    """Threshold: a pmap-ed function was called at all (pmap is in maintenance; jit + shardings replaces it): info,
    a way to keep up with JAX, not a speed-up (made to run on a public pair's script, it gained nothing)."""
    calls = obs.counted("pmap_calls")
    if not calls:
        return None
    return Finding(
        "jax-pmap-legacy", "info", "data parallelism through pmap: the legacy API",
        f"pmap-ed functions were called {calls:.0f} times; pmap is implemented on jit and shard_map now, and "
        "jit with shardings is the API JAX maintains (no speed-up is claimed: time it both ways)",
        "Use one jit with shardings instead of pmap + axis_name, keeping the step's donation:\n"
        f"{MESH}\n"
        "  batch = jax.device_put(batch, NamedSharding(mesh, P('data')))\n"
        f"  step = {jit_call(obs)}  # no pmean: grads of the global mean loss are already summed\n"
        "Drop the leading device axis, jax.lax.pmean and jax_utils.replicate.",
        f"{JAX_DOCS}/migrate_pmap.html")
