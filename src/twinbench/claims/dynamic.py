"""C17-C21, dynamic control flow, masks, custom ops, remat, debugging: runs or probes and verdict rules."""

from __future__ import annotations

from twinbench.claims.compilation import bert_runs, loop_s
from twinbench.claims.core import (
    CONTRADICTED,
    DEPENDS,
    NOT_MEASURABLE,
    SUPPORTED,
    Claim,
    Evidence,
    Setup,
    Verdict,
    no_runs,
    pct,
    register,
    rnd,
)
from twinbench.claims.probes import CustomOps, DebugPrint
from twinbench.claims.result import Numbers
from twinbench.record import Record
from twinbench.spec import MASK_IMPLS, RunSpec

GROUP = "dynamic control flow, masks, custom ops"

# --------------------------------------------------------------------------------------------------- C17
C17_SPREAD = 0.10
C17_RULE = ("BERT with each padding-mask implementation (where, mul, cond) under jax/jit. All variants give the same "
            "first loss (rel. diff <= 1e-4) and final loss (<= 1e-2) and their steady steps differ by > "
            f"{C17_SPREAD:.0%} (slowest/fastest): supported; same losses but within {C17_SPREAD:.0%}: depends (no speed "
            "difference at this size); different losses: contradicted (they do not all work the same).")


def c17_runs(s: Setup) -> dict[str, RunSpec]:
    # the written-out attention on an accelerator too: the claim is how the mask is written, which a fused
    # kernel (splash, cuDNN) takes as its own argument
    b = bert_runs(s) | ({"attention_impl": "default"} if s.accelerator else {})
    out = {f"jax_{m}": s.spec("jax", "jit", s.bert, mask_impl=m, **b) for m in MASK_IMPLS}
    if not s.quick and s.platform != "tpu":
        out |= {f"torch_{m}": s.spec("torch", "eager", s.bert, mask_impl=m, **b) for m in MASK_IMPLS}
    return out


def c17_judge(ev: Evidence) -> Verdict:
    nums: Numbers = {}
    worst_first = worst_last = 0.0
    spreads = []
    for fw in ("jax", "torch"):
        rs = {m: ev.records[f"{fw}_{m}"] for m in MASK_IMPLS if f"{fw}_{m}" in ev.records}
        if not rs:
            continue
        ref = rs["where"]
        for m, r in rs.items():
            nums[f"{fw}_{m}_step_ms"] = rnd(r.timing.step_ms)
            worst_first = max(worst_first, abs(r.loss.loss_first - ref.loss.loss_first) / abs(ref.loss.loss_first))
            worst_last = max(worst_last, abs(r.loss.loss_last - ref.loss.loss_last) / abs(ref.loss.loss_last))
        steps = [r.timing.step_ms for r in rs.values()]
        spreads.append(max(steps) / min(steps) - 1)
        fastest = min(rs, key=lambda m: rs[m].timing.step_ms)
        nums[f"{fw}_fastest"] = fastest
    spread = max(spreads)
    nums |= {"loss_first_max_rel_diff": rnd(worst_first), "loss_last_max_rel_diff": rnd(worst_last),
             "step_spread": rnd(spread)}
    if worst_first > 1e-4 or worst_last > 1e-2:
        return Verdict(CONTRADICTED, f"the mask variants train differently (first-loss diff {worst_first:.1e}, final "
                       f"{worst_last:.1e})", nums, judged="step_spread")
    if spread > C17_SPREAD:
        return Verdict(SUPPORTED, f"all three masks give the same losses; step time differs by {spread:.0%}", nums,
                       judged="step_spread")
    return Verdict(DEPENDS, f"all three masks give the same losses and step within {spread:.0%} of each other: no "
                   "speed difference at this size", nums, judged="step_spread")


register(Claim("C17", GROUP, "Conditional/dynamic masks: jnp.where, lax.cond or multiplying by a 0/1 mask all work; "
               "they differ in speed and readability.", C17_RULE, c17_runs, c17_judge,
               caveat="Readability is not measured."))

# --------------------------------------------------------------------------------------------------- C18
C18_RULE = ("BERT with per-batch lengths: jax/jit+dynamic (pad to the batch's longest), +bucket, pad-max (default). "
            "dynamic compiles >= 0.8x its distinct lengths while pad-max compiles once and bucket at most one program "
            "per bucket: supported; dynamic compiling once despite several lengths: contradicted; otherwise depends. "
            "Loop wall times (compiles included) say which policy wins overall.")


def c18_runs(s: Setup) -> dict[str, RunSpec]:
    b = bert_runs(s) | ({"attention_impl": "default"} if s.accelerator else {})  # one attention for every policy
    runs = {"pad_max": s.spec("jax", "jit", s.bert, **b), "bucket": s.spec("jax", "jit+bucket", s.bert, **b),
            "dynamic": s.spec("jax", "jit+dynamic", s.bert, **b)}
    if s.platform != "tpu":  # torch eager's loop beside them (no eager path to a TPU: not run there)
        runs["torch_dynamic"] = s.spec("torch", "eager+dynamic", s.bert, **b)
    return runs


def c18_judge(ev: Evidence) -> Verdict:
    pad, buck, dyn = ev["pad_max"], ev["bucket"], ev["dynamic"]
    nd = dyn.input.distinct_lengths or 0
    nums = {"dynamic_distinct_lengths": nd, "dynamic_compiles": dyn.compile.compiles_in_loop,
            "bucket_distinct_lengths": buck.input.distinct_lengths, "bucket_compiles": buck.compile.compiles_in_loop,
            "pad_max_compiles": pad.compile.compiles_in_loop,
            "dynamic_loop_s": rnd(loop_s(dyn)), "bucket_loop_s": rnd(loop_s(buck)), "pad_max_loop_s": rnd(loop_s(pad)),
            "torch_eager_dynamic_loop_s": rnd(loop_s(ev["torch_dynamic"])) if "torch_dynamic" in ev.records else None,
            "pad_pct_pad_max": rnd(pad.input.pad_pct), "pad_pct_dynamic": rnd(dyn.input.pad_pct)}
    best = min(("pad_max", "bucket", "dynamic"), key=lambda n: loop_s(ev[n]))
    if nd > 1 and (dyn.compile.compiles_in_loop or 0) <= 1:
        return Verdict(CONTRADICTED, f"{nd} distinct lengths compiled only once", nums)
    if (dyn.compile.compiles_in_loop >= 0.8 * nd and pad.compile.compiles_in_loop == 1
            and buck.compile.compiles_in_loop <= (buck.input.distinct_lengths or 4)):
        return Verdict(SUPPORTED, f"each new length recompiled ({dyn.compile.compiles_in_loop} compiles for {nd} lengths); "
                       f"padding: 1, buckets: {buck.compile.compiles_in_loop}; fastest loop overall: {best}", nums)
    return Verdict(DEPENDS, f"dynamic compiled {dyn.compile.compiles_in_loop}x for {nd} lengths, pad-max "
                   f"{pad.compile.compiles_in_loop}x; fastest loop overall: {best}", nums)


register(Claim("C18", GROUP, "Dynamic shapes need padding, bucketing or scan; otherwise each new shape recompiles.",
               C18_RULE, c18_runs, c18_judge, timed=False))

# --------------------------------------------------------------------------------------------------- C19
C19_RULE = ("Probe: SiLU with a hand-written backward as jax.custom_vjp and torch.autograd.Function. Gradients must "
            "agree (<= 1e-4) or the verdict is contradicted (the custom ops are not equivalent). Then a print inside "
            "each backward over 3 calls: JAX (under jit) shows no values or fewer prints than calls while torch shows "
            "values each call: supported (harder to debug); both show values each call: contradicted; otherwise "
            "depends.")


def c19_judge(ev: Evidence) -> Verdict:
    p = ev.probe("custom_ops", CustomOps)
    nums: Numbers = {"max_abs_diff_jax_vs_torch": p.max_abs_diff_jax_vs_torch,
                     "max_abs_diff_custom_vs_autodiff": p.max_abs_diff_custom_vs_autodiff, "calls": p.calls,
                     "jax_bwd_prints": p.jax_bwd_prints, "torch_bwd_prints": p.torch_bwd_prints,
                     "jax_bwd_print_example": p.jax_bwd_print_example,
                     "torch_bwd_print_example": p.torch_bwd_print_example,
                     "jax_grad_ms": rnd(p.jax_grad_ms), "torch_grad_ms": rnd(p.torch_grad_ms)}
    if p.max_abs_diff_jax_vs_torch > 1e-4 or p.max_abs_diff_custom_vs_autodiff > 1e-4:
        return Verdict(CONTRADICTED, "the two custom ops do not give the same gradients", nums)
    jax_hidden = not p.jax_bwd_print_shows_values or p.jax_bwd_prints < p.calls
    torch_shows = p.torch_bwd_print_shows_values and p.torch_bwd_prints == p.calls
    if jax_hidden and torch_shows:
        return Verdict(SUPPORTED, f"same gradients; a print in the JAX backward ran {p.jax_bwd_prints}x in "
                       f"{p.calls} calls and showed {p.jax_bwd_print_example}, the torch one ran every call with "
                       "values (jax.debug.print is the way in)", nums)
    if not jax_hidden:
        return Verdict(CONTRADICTED, "a print in the JAX backward showed values on every call, as in torch", nums)
    return Verdict(DEPENDS, "neither backward showed values on every call", nums)


register(Claim("C19", GROUP, "Custom ops: jax.custom_vjp vs torch.autograd.Function; JAX's is harder to debug.",
               C19_RULE, no_runs, c19_judge, probes=("custom_ops",),
               caveat="Debuggability is reduced to one observable: what a print in the backward shows. On a TPU VM the "
                      "probe runs both frameworks on the host CPU (the claim is about torch's eager semantics, and torch "
                      "has no eager path to the chip); its `device` says where.", timed=False))

# --------------------------------------------------------------------------------------------------- C20
C20_MEM = 0.05
DEVICE_PEAK = "device allocator peak"
#: The memory figure each accelerator reports for a step, as a record's ``peak_mem_source`` starts: a GPU's
#: allocator peak (XLA's and torch's allocators see every buffer); on a TPU the compiled step's memory (arguments +
#: outputs not aliased + temporaries + code), since its allocator's peak leaves the temporaries out.
MEMORY_FIGURE = {"gpu": DEVICE_PEAK, "tpu": "compiled step"}
C20_RULE = ("+remat vs plain per framework on GPT-2 (the torch twin: torch eager on a GPU, through torchax on a TPU), "
            "on an accelerator: mem = 1 - peak memory ratio (a GPU: the device allocator's peak; a TPU: the compiled "
            f"step's memory), cost = step ratio - 1. In both frameworks mem >= {C20_MEM:.0%} and cost > 0: supported (a "
            f"trade); in no framework mem >= {C20_MEM:.0%}: contradicted; otherwise depends. Without an accelerator: not "
            "measurable (remat saves device memory; a CPU process's peak RSS holds the whole runtime and cannot "
            "show it), and no runs.")
C20_CPU = ("not measurable here: remat trades device memory for time, and without a GPU or TPU the only memory "
           "figure is the process's peak RSS, which holds both frameworks' runtimes and allocator caches and does "
           "not show the activations remat frees (a saving of a few percent is within its noise). Run "
           "`twinbench claims --only C20` on a GPU or TPU")


def c20_runs(s: Setup) -> dict[str, RunSpec]:
    if not s.accelerator:
        return {}
    return {"torch": s.spec("torch", "eager"), "torch_remat": s.spec("torch", "eager+remat"),
            "jax": s.spec("jax", "jit"), "jax_remat": s.spec("jax", "jit+remat")}


def memory_figure(r: Record) -> str | None:
    """Which platform figure a record's peak is (``MEMORY_FIGURE``'s key), or None: a process RSS, or a figure
    its platform does not report for a step (a TPU's allocator peak)."""
    src, platform = str(r.memory.peak_mem_source or ""), r.conditions.platform
    want = MEMORY_FIGURE.get(str(platform))
    return platform if want and src.startswith(want) else None  # type: ignore[return-value]


def c20_judge(ev: Evidence) -> Verdict:
    if not ev.records:
        return Verdict(NOT_MEASURABLE, C20_CPU + " (no accelerator found on this machine, so nothing ran).")
    for r in ev.records.values():
        if memory_figure(r) is None:
            want = MEMORY_FIGURE.get(str(r.conditions.platform))
            wanted = f"the {want}" if want else "a device's memory"
            return Verdict(NOT_MEASURABLE, C20_CPU + f" ({r.label()}'s memory figure is the {r.memory.peak_mem_source}, "
                           f"not {wanted}).")
    nums: Numbers = {"memory_figure": ev["jax"].memory.peak_mem_source}
    trades = saves = 0
    for fw in ("torch", "jax"):
        a, b = ev[fw], ev[f"{fw}_remat"]
        mem = 1 - b.memory.peak_mem_bytes / a.memory.peak_mem_bytes
        cost = b.timing.step_ms / a.timing.step_ms - 1
        nums |= {f"{fw}_peak_mem_MiB": rnd(a.memory.peak_mem_bytes / 2**20), f"{fw}_remat_peak_mem_MiB":
                 rnd(b.memory.peak_mem_bytes / 2**20), f"{fw}_mem_saving": rnd(mem), f"{fw}_time_cost": rnd(cost)}
        saves += mem >= C20_MEM
        trades += mem >= C20_MEM and cost > 0
    caveat = "'Awkward in Flax' is not measured."
    t = ev["torch"].label()
    summary = (f"{t}: memory {pct(-nums['torch_mem_saving'])}, time {pct(nums['torch_time_cost'])}; jax/jit: memory "
               f"{pct(-nums['jax_mem_saving'])}, time {pct(nums['jax_time_cost'])}")
    judged = "torch_mem_saving,jax_mem_saving,torch_time_cost,jax_time_cost"
    if trades == 2:
        return Verdict(SUPPORTED, "remat trades memory for time in both: " + summary, nums, caveat, judged)
    if saves == 0:
        return Verdict(CONTRADICTED, "remat saved no measured memory: " + summary, nums, caveat, judged)
    return Verdict(DEPENDS, "the trade shows in one framework only: " + summary, nums, caveat, judged)


register(Claim("C20", GROUP, "Gradient checkpointing (remat) and custom gradients are awkward in Flax; they trade "
               "memory for time.", C20_RULE, c20_runs, c20_judge))

# --------------------------------------------------------------------------------------------------- C21
C21_RULE = ("Probe: a jitted step called N times with a Python print and a jax.debug.print of an intermediate value; "
            "the same step in torch eager. Python print inside jit showing no value (a tracer): "
            "supported (jax.debug.print's count and values reported); Python print showing values on every call: "
            "contradicted; otherwise depends.")


def c21_judge(ev: Evidence) -> Verdict:
    p = ev.probe("debug_print", DebugPrint)
    nums: Numbers = {"calls": p.calls, "jit_python_prints": p.jit_python_prints,
                     "jit_python_print_example": p.jit_python_print_example, "jit_debug_prints": p.jit_debug_prints,
                     "jit_debug_print_example": p.jit_debug_print_example, "torch_eager_prints": p.torch_eager_prints,
                     "torch_eager_print_example": p.torch_eager_print_example}
    n = p.calls
    if p.jit_python_print_shows_values and p.jit_python_prints == n:
        return Verdict(CONTRADICTED, "a Python print inside jit showed values on every call", nums)
    if not p.jit_python_print_shows_values:
        dbg = ("jax.debug.print printed values on every call" if p.jit_debug_prints == n
               and p.jit_debug_print_shows_values else "jax.debug.print did not help either")
        return Verdict(SUPPORTED, f"a Python print inside jit ran {p.jit_python_prints}x in {n} calls and showed "
                       f"'{p.jit_python_print_example}'; {dbg}; torch eager printed {p.torch_eager_prints}x", nums)
    return Verdict(DEPENDS, f"a Python print inside jit showed values but only {p.jit_python_prints}x in {n} calls",
                   nums)


register(Claim("C21", GROUP, "Debugging inside jit is hard: no print of intermediate values (jax.debug.print exists).",
               C21_RULE, no_runs, c21_judge, probes=("debug_print",), timed=False))
