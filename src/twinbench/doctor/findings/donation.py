"""State replaced every step without being donated: ``jax-no-donation``."""

from __future__ import annotations

from twinbench.doctor.findings.base import JAX_DOCS, Finding, Obs, _mib

# -- jax-no-donation ---------------------------------------------------------------------------------------
DONATION_MIN_BYTES = 1 << 20  # state replaced every step, not donated, at least this large
DONATION_SHARE = 0.5  # ... and less than this share of it donated


def jax_no_donation(obs: Obs) -> Finding | None:
    """Threshold: >= 1 MiB of state is passed in and returned every step, and < 50% of it is donated."""
    info = obs.get("info", {})
    carried = info.get("carried", {}).get("bytes", 0)
    donated = info.get("donated_bytes")
    if donated is None or carried < DONATION_MIN_BYTES or donated >= DONATION_SHARE * carried:
        return None
    mem = info.get("memory", {})
    per_device = info.get("carried", {}).get("device_bytes") or carried
    if mem and mem.get("alias_size_in_bytes", 0) >= DONATION_SHARE * per_device:
        return None  # the executable aliases (donates) the state on each device, whatever args_info says
    if mem:  # compare like with like: XLA's memory analysis is per device
        carried, donated = per_device, max(donated * per_device // max(carried, 1), 0)
    mem_txt = (f"; XLA memory analysis of the step: arguments {_mib(mem['argument_size_in_bytes'])}, outputs "
               f"{_mib(mem['output_size_in_bytes'])}, aliased (donated) {_mib(mem['alias_size_in_bytes'])}"
               if mem else "")
    return Finding(
        "jax-no-donation", "warning",
        f"{_mib(carried)} of params/optimizer state is copied every step instead of updated in place",
        f"{info['carried'].get('leaves', 0)} arrays ({_mib(carried)}" + (" per device" if mem else "")
        + f") that each step returns are passed to the next step; {_mib(donated)} of them donated "
        f"(Lowered.args_info; the executable aliases {_mib(mem.get('alias_size_in_bytes', 0))}), so the step holds old and new copies "
        f"at once: about {_mib(carried - donated)} more device memory at peak{mem_txt} "
        f"(warning from {_mib(DONATION_MIN_BYTES)} not donated)",
        "Donate the state the step replaces: jax.jit(train_step, donate_argnums=(0, 1)) "
        "(or donate_argnames=('params', 'opt_state')); with Flax NNX: "
        "nnx.jit(train_step, donate_argnames=('model', 'optimizer')). Do not use the old arrays after the call.",
        f"{JAX_DOCS}/faq.html#buffer-donation")
