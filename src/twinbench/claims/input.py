"""C15-C16, the input pipeline: each claim's runs and its verdict rule, next to each other.

``--slow-input MS`` adds that much simulated host work per batch (data/pipeline.py); ``+prefetch`` makes the
batches ahead of the step on background workers and puts them on the device ahead of time.
"""

from __future__ import annotations

from typing import Any

from twinbench.claims.core import (
    CONTRADICTED,
    DEPENDS,
    SUPPORTED,
    Claim,
    Evidence,
    Setup,
    Verdict,
    register,
    rnd,
)
from twinbench.spec import RunSpec

GROUP = "input pipeline"


def slow_ms(s: Setup) -> float:
    """Simulated host work per batch: enough to exceed a small model's step on this kind of machine."""
    return 20.0


def input_runs(s: Setup) -> dict[str, RunSpec]:
    ms = slow_ms(s)
    out = {"jax": s.spec("jax", "jit"), "jax_slow": s.spec("jax", "jit", slow_input=ms),
           "jax_slow_prefetch": s.spec("jax", "jit+prefetch", slow_input=ms)}
    if not s.quick:
        out |= {"torch": s.spec("torch", "eager"), "torch_slow": s.spec("torch", "eager", slow_input=ms),
                "torch_slow_prefetch": s.spec("torch", "eager+prefetch", slow_input=ms)}
    return out


def stall(r: dict[str, Any]) -> float:
    """The steady-state input stall as a fraction of the step (the record holds it in percent)."""
    return (r.get("input_stall_pct") or 0.0) / 100


def numbers(ev: Evidence) -> dict[str, Any]:
    out = {"slow_input_ms": slow_ms(ev.setup)}
    for name, r in ev.records.items():
        out[f"{name}_stall_pct"] = rnd(r.get("input_stall_pct") or 0.0)
        out[f"{name}_step_ms"] = rnd(r["step_ms"])
        out[f"{name}_input_wait_ms"] = rnd(r.get("input_wait_ms"))
    return out


# --------------------------------------------------------------------------------------------------- C15
C15_STALL = 0.10
C15_RULE = (f"input stall = share of the steady step spent waiting for the batch (jax/jit). Stall >= {C15_STALL:.0%} "
            "with the plain host->device hand-off and +prefetch halving it under slow input: supported; stall below "
            f"{C15_STALL:.0%} with the plain hand-off but +prefetch halving it under slow input: depends (a "
            "bottleneck only when making a batch costs about a step); +prefetch not halving it: contradicted.")


def c15_judge(ev: Evidence) -> Verdict:
    base, slow, pre = stall(ev["jax"]), stall(ev["jax_slow"]), stall(ev["jax_slow_prefetch"])
    nums = numbers(ev)
    helps = pre <= 0.5 * slow and slow > 0
    if not helps:
        return Verdict(CONTRADICTED, f"prefetching to the device did not halve the stall under slow input "
                       f"({slow:.0%} -> {pre:.0%})", nums)
    if base >= C15_STALL:
        return Verdict(SUPPORTED, f"the plain hand-off already stalls {base:.0%} of the step; prefetch cuts the "
                       f"slow-input stall {slow:.0%} -> {pre:.0%}", nums)
    step = ev["jax"]["step_ms"]
    return Verdict(DEPENDS, f"the plain hand-off stalls only {base:.1%}; with {slow_ms(ev.setup):g} ms of host work "
                   f"per batch it stalls {slow:.0%} and prefetch cuts that to {pre:.0%}: a bottleneck once making a "
                   f"batch costs about a step ({step:.1f} ms here)", nums)


register(Claim("C15", GROUP, "The tf.data-to-device hand-off is a hidden bottleneck; put batches on the device ahead "
               "of time (jax.device_put, prefetch to device).", C15_RULE, input_runs, c15_judge,
               caveat="The host work is simulated (--slow-input), not tf.data; on CPU 'the device' is host memory."))

# --------------------------------------------------------------------------------------------------- C16
C16_HI = 0.25
C16_RULE = (f"Stall of jax/jit with the plain pipeline >= {C16_HI:.0%}: supported (input-bound as is). Below "
            f"that, but >= {C16_HI:.0%} with slow host input: depends (input-bound once a batch costs "
            f"more host time than a step). Below {C16_HI:.0%} even with slow input: contradicted.")


def c16_judge(ev: Evidence) -> Verdict:
    base, slow = stall(ev["jax"]), stall(ev["jax_slow"])
    nums = numbers(ev)
    if base >= C16_HI:
        return Verdict(SUPPORTED, f"the plain pipeline already stalls {base:.0%} of the step: input-bound", nums)
    if slow < C16_HI:
        return Verdict(CONTRADICTED, f"even {slow_ms(ev.setup):g} ms of host work per batch stalls only {slow:.0%}",
                       nums)
    return Verdict(DEPENDS, f"stall {base:.1%} with cheap batches, {slow:.0%} with {slow_ms(ev.setup):g} ms of host "
                   f"work per batch: input-bound once a batch costs more than a step ({ev['jax']['step_ms']:.1f} ms)",
                   nums)


register(Claim("C16", GROUP, "Sometimes the bottleneck is not the model but input I/O.", C16_RULE, input_runs,
               c16_judge, caveat="The host work is simulated (--slow-input), not disk or network I/O."))
