"""C15-C16, the input pipeline: each claim's runs and its verdict rule, next to each other.

``--slow-input MS`` adds that much simulated host work per batch (data/pipeline.py); ``+prefetch`` makes the
batches ahead of the step on background workers and puts them on the device ahead of time. The slow case is
made input-bound on purpose (the host work per batch exceeds the step; the rules check it did) and runs long
enough after its warm-up that the prefetch buffers, filled while the first step compiled, are drained before
the measured steps: what is measured is the steady state, not the buffers emptying.
"""

from __future__ import annotations

from twinbench.claims.compilation import bert_runs
from twinbench.claims.core import (
    CONTRADICTED,
    DEPENDS,
    NOT_MEASURABLE,
    SUPPORTED,
    Claim,
    Evidence,
    Setup,
    Verdict,
    register,
    rnd,
)
from twinbench.claims.result import Numbers
from twinbench.record import Record
from twinbench.spec import RunSpec

GROUP = "input pipeline"
#: Simulated host work per batch: several times a tiny step here; the rules check it exceeded the step.
SLOW_MS = 20.0
#: On an accelerator, two to three times the GPT-2 124M step at 8 x 1024 in bf16 (benchmarks/RESULTS.md, "On a
#: GPU" and "On a TPU"), so the slow case is input-bound there too.
SLOW_MS_ACCELERATOR = {"gpu": 100.0, "tpu": 200.0}
#: Slow-input runs: warm-up past the buffers (host + device depth, refilled while step 1 compiles), then
#: enough steady steps for a median. At 20 ms a batch this is about a second of steps.
SLOW_STEPS, SLOW_WARMUP = 40, 12
#: A slow-input run counts as input-bound when it waits at least this share of its step.
INPUT_BOUND = 0.5


def slow_ms(s: Setup) -> float:
    """Simulated host work per batch: more than the step of the suite's GPT on its platform."""
    return SLOW_MS_ACCELERATOR.get(s.platform, SLOW_MS)


def workers() -> int:
    """Background workers of the +prefetch host pipeline (data/pipeline.py)."""
    from twinbench.data import pipeline

    return int(getattr(pipeline, "WORKERS", 2))


def input_runs(s: Setup) -> dict[str, RunSpec]:
    ms, n = slow_ms(s), {"steps": SLOW_STEPS, "warmup": SLOW_WARMUP}
    out = {"real": s.spec("jax", "jit", s.bert, **bert_runs(s)),  # real per-batch tokenisation on the host
           "jax_slow": s.spec("jax", "jit", slow_input=ms, **n),
           "jax_slow_prefetch": s.spec("jax", "jit+prefetch", slow_input=ms, **n)}
    if not s.quick and s.platform != "tpu":  # torch's DataLoader pipeline (no eager torch on a TPU)
        out |= {"torch_slow": s.spec("torch", "eager", slow_input=ms, **n),
                "torch_slow_prefetch": s.spec("torch", "eager+prefetch", slow_input=ms, **n)}
    return out


def stall(r: Record) -> float:
    """The steady-state input stall as a fraction of the step (the record holds it in percent)."""
    return (r.input.input_stall_pct or 0.0) / 100


def numbers(ev: Evidence) -> Numbers:
    out: Numbers = {"slow_input_ms": slow_ms(ev.setup), "prefetch_workers": workers()}
    for name, r in ev.records.items():
        out[f"{name}_stall_pct"] = rnd(r.input.input_stall_pct or 0.0)
        out[f"{name}_step_ms"] = rnd(r.timing.step_ms)
        out[f"{name}_input_wait_ms"] = rnd(r.input.input_wait_ms)
    return out


def not_input_bound(ev: Evidence, nums: Numbers, judged: str) -> Verdict | None:
    """``not measurable`` when the slow-input run was not input-bound (the host work did not exceed the step)."""
    slow = ev["jax_slow"]
    if stall(slow) >= INPUT_BOUND:
        return None
    return Verdict(NOT_MEASURABLE, f"not measurable here: {slow_ms(ev.setup):g} ms of host work per batch stalled only "
                   f"{stall(slow):.0%} of a {slow.timing.step_ms:.1f} ms step, so the slow case was not input-bound (the "
                   "host work must exceed the step)", nums, judged=judged)


# --------------------------------------------------------------------------------------------------- C15
C15_HI, C15_LO = 0.5, 0.1
C15_RULE = (f"jax/jit with {SLOW_MS:g} ms of host work per batch (an accelerator: twice its GPT step), plain (each batch made and handed over when the step "
            "asks: input-bound, stall >= 50%, else not measurable) vs +prefetch (background workers, batches put on "
            "the device ahead with jax.device_put). Overlap can at best bring the step to max(compute, host work / "
            "workers); removed = share of that avoidable wait +prefetch removed. removed >= "
            f"{C15_HI:.0%}: supported; <= {C15_LO:.0%}: contradicted; in between: depends.")


def c15_judge(ev: Evidence) -> Verdict:
    slow, pre = ev["jax_slow"], ev["jax_slow_prefetch"]
    nums = numbers(ev)
    judged = "removed_share"
    wait = slow.input.input_wait_ms or 0.0
    compute = max(slow.timing.step_ms - wait, 0.0)
    ideal = max(compute, wait / workers())
    removable = slow.timing.step_ms - ideal
    removed = (slow.timing.step_ms - pre.timing.step_ms) / removable if removable > 0 else 0.0
    nums |= {"compute_ms": rnd(compute), "ideal_prefetch_step_ms": rnd(ideal), "removed_share": rnd(removed)}
    if (bad := not_input_bound(ev, nums, judged)) is not None:
        return bad
    how = (f"{slow.timing.step_ms:.1f} ms a step with the plain hand-off (stall {stall(slow):.0%}), "
           f"{pre.timing.step_ms:.1f} ms with +prefetch (stall {stall(pre):.0%}; best possible {ideal:.1f} ms)")
    if removed >= C15_HI:
        share = "all" if removed >= 1 else f"{removed:.0%}"
        return Verdict(SUPPORTED, f"making and putting batches on the device ahead removed {share} of the "
                       f"avoidable wait: {how}", nums, judged=judged)
    if removed <= C15_LO:
        return Verdict(CONTRADICTED, f"prefetching removed only {removed:.0%} of the avoidable wait: {how}", nums,
                       judged=judged)
    return Verdict(DEPENDS, f"prefetching removed {removed:.0%} of the avoidable wait, part of it: {how}", nums,
                   judged=judged)


register(Claim("C15", GROUP, "The tf.data-to-device hand-off is a hidden bottleneck; put batches on the device ahead "
               "of time (jax.device_put, prefetch to device).", C15_RULE, input_runs, c15_judge,
               caveat="The host work is simulated (--slow-input, a sleep), not tf.data; on CPU 'the device' is host "
                      "memory, so only the overlap is measured, not a host-to-device copy."))

# --------------------------------------------------------------------------------------------------- C16
C16_HI = 0.25
C16_RULE = (f"Stall of BERT fine-tuning under jax/jit with its real input pipeline (per-batch tokenisation and "
            f"padding on the host, plain loop) >= {C16_HI:.0%}: supported (input-bound as is). Below that, but the "
            f"slow-input run (host work above the step) stalls >= {C16_HI:.0%}: depends (input-bound once a batch "
            f"costs more host time than a step; the threshold is the step time). Below {C16_HI:.0%} even then: "
            "contradicted.")


def c16_judge(ev: Evidence) -> Verdict:
    real, slow = ev["real"], ev["jax_slow"]
    nums = numbers(ev)
    judged = "real_stall_pct,jax_slow_stall_pct"
    if stall(real) >= C16_HI:
        return Verdict(SUPPORTED, f"the real BERT input pipeline already stalls {stall(real):.0%} of the step: "
                       "input-bound as is", nums, judged=judged)
    if stall(slow) < C16_HI:
        return Verdict(CONTRADICTED, f"even {slow_ms(ev.setup):g} ms of host work per batch stalls only "
                       f"{stall(slow):.0%}", nums, judged=judged)
    return Verdict(DEPENDS, f"the real BERT pipeline stalls {stall(real):.1%} ({real.input.input_wait_ms or 0:.2f} ms "
                   f"a batch vs a {real.timing.step_ms:.1f} ms step); {slow_ms(ev.setup):g} ms of host work per batch "
                   f"stalls {stall(slow):.0%} of a {slow.timing.step_ms:.1f} ms step: input-bound once a batch costs more "
                   "host time than a step", nums, judged=judged)


register(Claim("C16", GROUP, "Sometimes the bottleneck is not the model but input I/O.", C16_RULE, input_runs,
               c16_judge, caveat="The slow host work is simulated (--slow-input), not disk or network I/O."))
