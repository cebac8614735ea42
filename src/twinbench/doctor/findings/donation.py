"""State replaced every step without being donated: ``jax-no-donation``."""

from __future__ import annotations

from twinbench.doctor.findings.base import JAX_DOCS, Finding, Obs, _mib, _step_location, finding
from twinbench.doctor.observations import typed

# -- jax-no-donation ---------------------------------------------------------------------------------------
DONATION_MIN_BYTES = 1 << 20  # state replaced every step, not donated, at least this large
DONATION_SHARE = 0.5  # ... and less than this share of it donated
MEMORY_SHORT_SHARE = 0.5  # the step's buffers (arguments, outputs, temporaries) take this share of the memory
# they compete for: the copy donation saves may decide whether the step fits; below it, it saves memory and no time


def donation_fix(obs: Obs) -> str:
    """Donate exactly the step's arguments that carry state from one call to the next (the doctor saw which: a
    batch is not one of them), in a decorator that keeps the jit's other options as the script gave them."""
    obs = typed(obs)  # also called on its own (tests)
    info = obs.info
    args = info.carried_args or []
    name = obs.step_fn or "train_step"
    nodes = tuple(n for n in info.nnx_node_args or [] if not n.isdigit())
    if info.jit_kind == "nnx" and nodes:  # nnx.jit: the user's modules and optimizers are the state
        where = _step_location(obs)
        return (f"Donate the modules and optimizers the step updates, {', '.join(nodes)} (not the batch). Put this "
                f"decorator on the line above the step's definition{f' ({where})' if where else ''} in place of "
                f"its @nnx.jit:\n  @nnx.jit(donate_argnames={nodes!r})\n(or where it is jitted: "
                f"nnx.jit({name}, donate_argnames={nodes!r})). Do not use their old arrays after the call.")
    if info.jit_kind == "nnx" or not args:  # nnx.jit: the user's own arguments are not the inner jit's
        return ("Donate the state the step replaces (the arguments it returns updated, not the batch): "
                f"jax.jit({name}, donate_argnums=...) with the positions of those arguments; with Flax NNX: "
                f"nnx.jit({name}, donate_argnames=(...)) naming the model and optimizer arguments. Do not use the "
                "old arrays after the call.")
    nums = tuple(int(a.split(":", 1)[0]) for a in args if a.split(":", 1)[0].isdigit())
    names = tuple(a.split(":", 1)[-1] for a in args)
    opts = {k: v for k, v in (info.jit_options or {}).items() if not k.startswith("donate")}
    kw = ", ".join([*(f"{k}={v!r}" for k, v in opts.items()),
                    f"donate_argnums={nums!r}" if nums else f"donate_argnames={names!r}"])
    where = _step_location(obs)
    return (f"Donate the arguments the step replaces, those carried from one call to the next: "
            f"{', '.join(names)} (not the batch: the step does not return it). Put this decorator on the line above "
            f"the step's definition{f' ({where})' if where else ''} in place of its @jax.jit:\n"
            f"  @functools.partial(jax.jit, {kw})\n"
            f"(with import functools at the top of the file), or where it is jitted: jax.jit({name}, {kw}). "
            "Do not use the old arrays after the call.")


@finding(
    id='jax-no-donation',
    severity='info, warning when memory is short',
    about='memory',
    threshold=">= 1 MiB of arrays returned by the step and passed back into it, < 50% of it donated (`Lowered.args_info`, and what the executable aliases per device); a warning only where the step's buffers take >= 50% of the memory they compete for (an accelerator's limit, the CPU's available memory)",
    fix="the decorator `@functools.partial(jax.jit, ..., donate_argnums=...)` donating exactly the carried state and keeping the jit's other options; `nnx.jit(..., donate_argnames=...)` for NNX. It saves memory, not time",
    example='jax_no_donation',
)
def jax_no_donation(obs: Obs) -> Finding | None:
    """Threshold: >= 1 MiB of state is passed in and returned every step, and < 50% of it is donated: info (it
    saves memory, not time), a warning where memory is short (the step's buffers take >= 50% of the memory they
    compete for: an accelerator's limit, the CPU's available memory)."""
    info = obs.info
    carried = info.carried.bytes
    donated = info.donated_bytes
    if donated is None or carried < DONATION_MIN_BYTES or donated >= DONATION_SHARE * carried:
        return None
    mem = info.memory
    per_device = info.carried.device_bytes or carried
    if mem and mem.alias_size_in_bytes >= DONATION_SHARE * per_device:
        return None  # the executable aliases (donates) the state on each device, whatever args_info says
    if mem:  # compare like with like: XLA's memory analysis is per device
        carried, donated = per_device, max(donated * per_device // max(carried, 1), 0)
    capacity = info.memory_capacity_bytes
    peak = (mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes
            - mem.alias_size_in_bytes) if mem else 0
    short = bool(capacity) and peak >= MEMORY_SHORT_SHARE * capacity
    room = (f"; the step's buffers take {_mib(peak)} of {_mib(capacity)} of memory "
            + ("(memory is short: " if short else "(memory is not short: ")
            + f"warning from {MEMORY_SHORT_SHARE:.0%}, else info)") if capacity and mem else \
        f" (info: a warning only where the step's buffers take {MEMORY_SHORT_SHARE:.0%} of the memory)"
    mem_txt = (f"; XLA memory analysis of the step: arguments {_mib(mem.argument_size_in_bytes)}, outputs "
               f"{_mib(mem.output_size_in_bytes)}, aliased (donated) {_mib(mem.alias_size_in_bytes)}"
               if mem else "")
    return Finding(
        "jax-no-donation", "warning" if short else "info",
        f"{_mib(carried)} of params/optimizer state is not donated: the step holds its old and new copies at once",
        f"{info.carried.leaves} arrays ({_mib(carried)}" + (" per device" if mem else "")
        + f") that each step returns are passed to the next step; {_mib(donated)} of them donated "
        f"(Lowered.args_info; the executable aliases {_mib(mem.alias_size_in_bytes if mem else 0)}), so the step holds old and new copies "
        f"at once: about {_mib(carried - donated)} more device memory at peak{mem_txt} "
        f"({_mib(DONATION_MIN_BYTES)} not donated{room}). Donation saves that memory, not time: the step "
        "computes the same, and an asynchronous loop on a CPU can even run slower donated; time it both ways",
        donation_fix(obs),
        f"{JAX_DOCS}/faq.html#buffer-donation")
