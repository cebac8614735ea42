"""C17-C21, dynamic control flow, masks, custom ops, remat, debugging: runs or probes and verdict rules."""

from __future__ import annotations

from typing import Any

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
from twinbench.spec import MASK_IMPLS, RunSpec

GROUP = "dynamic control flow, masks, custom ops"

# --------------------------------------------------------------------------------------------------- C17
C17_SPREAD = 0.10
C17_RULE = ("BERT with each padding-mask implementation (where, mul, cond) under jax/jit. All variants give the same "
            "first loss (rel. diff <= 1e-4) and final loss (<= 1e-2) and their steady steps differ by > "
            f"{C17_SPREAD:.0%} (slowest/fastest): supported; same losses but within {C17_SPREAD:.0%}: depends (no speed "
            "difference at this size); different losses: contradicted (they do not all work the same).")


def c17_runs(s: Setup) -> dict[str, RunSpec]:
    b = bert_runs(s)
    out = {f"jax_{m}": s.spec("jax", "jit", s.bert, mask_impl=m, **b) for m in MASK_IMPLS}
    if not s.quick:
        out |= {f"torch_{m}": s.spec("torch", "eager", s.bert, mask_impl=m, **b) for m in MASK_IMPLS}
    return out


def c17_judge(ev: Evidence) -> Verdict:
    nums: dict[str, Any] = {}
    worst_first = worst_last = 0.0
    spreads = []
    for fw in ("jax", "torch"):
        rs = {m: ev.records[f"{fw}_{m}"] for m in MASK_IMPLS if f"{fw}_{m}" in ev.records}
        if not rs:
            continue
        ref = rs["where"]
        for m, r in rs.items():
            nums[f"{fw}_{m}_step_ms"] = rnd(r["step_ms"])
            worst_first = max(worst_first, abs(r["loss_first"] - ref["loss_first"]) / abs(ref["loss_first"]))
            worst_last = max(worst_last, abs(r["loss_last"] - ref["loss_last"]) / abs(ref["loss_last"]))
        steps = [r["step_ms"] for r in rs.values()]
        spreads.append(max(steps) / min(steps) - 1)
        fastest = min(rs, key=lambda m: rs[m]["step_ms"])
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
    b = bert_runs(s)
    return {"pad_max": s.spec("jax", "jit", s.bert, **b), "bucket": s.spec("jax", "jit+bucket", s.bert, **b),
            "dynamic": s.spec("jax", "jit+dynamic", s.bert, **b),
            "torch_dynamic": s.spec("torch", "eager+dynamic", s.bert, **b)}


def c18_judge(ev: Evidence) -> Verdict:
    pad, buck, dyn = ev["pad_max"], ev["bucket"], ev["dynamic"]
    nd = dyn.get("distinct_lengths") or 0
    nums = {"dynamic_distinct_lengths": nd, "dynamic_compiles": dyn.get("compiles_in_loop"),
            "bucket_distinct_lengths": buck.get("distinct_lengths"), "bucket_compiles": buck.get("compiles_in_loop"),
            "pad_max_compiles": pad.get("compiles_in_loop"),
            "dynamic_loop_s": rnd(loop_s(dyn)), "bucket_loop_s": rnd(loop_s(buck)), "pad_max_loop_s": rnd(loop_s(pad)),
            "torch_eager_dynamic_loop_s": rnd(loop_s(ev["torch_dynamic"])),
            "pad_pct_pad_max": rnd(pad.get("pad_pct")), "pad_pct_dynamic": rnd(dyn.get("pad_pct"))}
    best = min(("pad_max", "bucket", "dynamic"), key=lambda n: loop_s(ev[n]))
    if nd > 1 and (dyn.get("compiles_in_loop") or 0) <= 1:
        return Verdict(CONTRADICTED, f"{nd} distinct lengths compiled only once", nums)
    if (dyn["compiles_in_loop"] >= 0.8 * nd and pad["compiles_in_loop"] == 1
            and buck["compiles_in_loop"] <= (buck.get("distinct_lengths") or 4)):
        return Verdict(SUPPORTED, f"each new length recompiled ({dyn['compiles_in_loop']} compiles for {nd} lengths); "
                       f"padding: 1, buckets: {buck['compiles_in_loop']}; fastest loop overall: {best}", nums)
    return Verdict(DEPENDS, f"dynamic compiled {dyn['compiles_in_loop']}x for {nd} lengths, pad-max "
                   f"{pad['compiles_in_loop']}x; fastest loop overall: {best}", nums)


register(Claim("C18", GROUP, "Dynamic shapes need padding, bucketing or scan; otherwise each new shape recompiles.",
               C18_RULE, c18_runs, c18_judge, timed=False))

# --------------------------------------------------------------------------------------------------- C19
C19_RULE = ("Probe: SiLU with a hand-written backward as jax.custom_vjp and torch.autograd.Function. Gradients must "
            "agree (<= 1e-4) or the verdict is contradicted (the custom ops are not equivalent). Then a print inside "
            "each backward over 3 calls: JAX (under jit) shows no values or fewer prints than calls while torch shows "
            "values each call: supported (harder to debug); both show values each call: contradicted; otherwise "
            "depends.")


def c19_judge(ev: Evidence) -> Verdict:
    p = ev.probes["custom_ops"]
    nums = {k: p[k] for k in ("max_abs_diff_jax_vs_torch", "max_abs_diff_custom_vs_autodiff", "calls",
                              "jax_bwd_prints", "torch_bwd_prints", "jax_bwd_print_example",
                              "torch_bwd_print_example")}
    nums |= {"jax_grad_ms": rnd(p["jax_grad_ms"]), "torch_grad_ms": rnd(p["torch_grad_ms"])}
    if p["max_abs_diff_jax_vs_torch"] > 1e-4 or p["max_abs_diff_custom_vs_autodiff"] > 1e-4:
        return Verdict(CONTRADICTED, "the two custom ops do not give the same gradients", nums)
    jax_hidden = not p["jax_bwd_print_shows_values"] or p["jax_bwd_prints"] < p["calls"]
    torch_shows = p["torch_bwd_print_shows_values"] and p["torch_bwd_prints"] == p["calls"]
    if jax_hidden and torch_shows:
        return Verdict(SUPPORTED, f"same gradients; a print in the JAX backward ran {p['jax_bwd_prints']}x in "
                       f"{p['calls']} calls and showed {p['jax_bwd_print_example']}, the torch one ran every call with "
                       "values (jax.debug.print is the way in)", nums)
    if not jax_hidden:
        return Verdict(CONTRADICTED, "a print in the JAX backward showed values on every call, as in torch", nums)
    return Verdict(DEPENDS, "neither backward showed values on every call", nums)


register(Claim("C19", GROUP, "Custom ops: jax.custom_vjp vs torch.autograd.Function; JAX's is harder to debug.",
               C19_RULE, no_runs, c19_judge, probes=("custom_ops",),
               caveat="Debuggability is reduced to one observable: what a print in the backward shows.", timed=False))

# --------------------------------------------------------------------------------------------------- C20
C20_MEM = 0.05
DEVICE_PEAK = "device allocator peak"
C20_RULE = ("+remat vs plain per framework on the larger model, on an accelerator: mem = 1 - peak device memory "
            f"ratio, cost = step ratio - 1. In both frameworks mem >= {C20_MEM:.0%} and cost > 0: supported (a trade); "
            f"in no framework mem >= {C20_MEM:.0%}: contradicted; otherwise depends. Without an accelerator: not "
            "measurable (remat saves device memory; a CPU process's peak RSS holds the whole runtime and cannot "
            "show it), and no runs.")
C20_CPU = ("not measurable here: remat trades device memory for time, and without a GPU or TPU the only memory "
           "figure is the process's peak RSS, which holds both frameworks' runtimes and allocator caches and does "
           "not show the activations remat frees (a saving of a few percent is within its noise). Run "
           "`twinbench claims --only C20` on a GPU")


def c20_runs(s: Setup) -> dict[str, RunSpec]:
    if not s.accelerator:
        return {}
    return {"torch": s.spec("torch", "eager", s.big), "torch_remat": s.spec("torch", "eager+remat", s.big),
            "jax": s.spec("jax", "jit", s.big), "jax_remat": s.spec("jax", "jit+remat", s.big)}


def c20_judge(ev: Evidence) -> Verdict:
    if not ev.records:
        return Verdict(NOT_MEASURABLE, C20_CPU + " (no accelerator found on this machine, so nothing ran).")
    src = ev["jax"].get("peak_mem_source")
    if src != DEVICE_PEAK or ev["torch"].get("peak_mem_source") != DEVICE_PEAK:
        return Verdict(NOT_MEASURABLE, C20_CPU + f" (the runs' memory figure is the {src}).")
    nums: dict[str, Any] = {}
    trades = saves = 0
    for fw in ("torch", "jax"):
        a, b = ev[fw], ev[f"{fw}_remat"]
        mem = 1 - b["peak_mem_bytes"] / a["peak_mem_bytes"]
        cost = b["step_ms"] / a["step_ms"] - 1
        nums |= {f"{fw}_peak_mem_MiB": rnd(a["peak_mem_bytes"] / 2**20), f"{fw}_remat_peak_mem_MiB":
                 rnd(b["peak_mem_bytes"] / 2**20), f"{fw}_mem_saving": rnd(mem), f"{fw}_time_cost": rnd(cost)}
        saves += mem >= C20_MEM
        trades += mem >= C20_MEM and cost > 0
    caveat = "'Awkward in Flax' is not measured."
    summary = (f"torch: memory {pct(-nums['torch_mem_saving'])}, time {pct(nums['torch_time_cost'])}; jax: memory "
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
    p = ev.probes["debug_print"]
    nums = {k: p[k] for k in ("calls", "jit_python_prints", "jit_python_print_example", "jit_debug_prints",
                              "jit_debug_print_example", "torch_eager_prints", "torch_eager_print_example")}
    n = p["calls"]
    if p["jit_python_print_shows_values"] and p["jit_python_prints"] == n:
        return Verdict(CONTRADICTED, "a Python print inside jit showed values on every call", nums)
    if not p["jit_python_print_shows_values"]:
        dbg = ("jax.debug.print printed values on every call" if p["jit_debug_prints"] == n
               and p["jit_debug_print_shows_values"] else "jax.debug.print did not help either")
        return Verdict(SUPPORTED, f"a Python print inside jit ran {p['jit_python_prints']}x in {n} calls and showed "
                       f"'{p['jit_python_print_example']}'; {dbg}; torch eager printed {p['torch_eager_prints']}x", nums)
    return Verdict(DEPENDS, f"a Python print inside jit showed values but only {p['jit_python_prints']}x in {n} calls",
                   nums)


register(Claim("C21", GROUP, "Debugging inside jit is hard: no print of intermediate values (jax.debug.print exists).",
               C21_RULE, no_runs, c21_judge, probes=("debug_print",), timed=False))
