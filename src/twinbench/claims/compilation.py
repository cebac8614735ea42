"""C1-C6, compilation and step structure: each claim's runs and its verdict rule, next to each other."""

from __future__ import annotations

import math

from twinbench.claims.core import (
    CONTRADICTED,
    DEPENDS,
    NOT_MEASURABLE,
    SUPPORTED,
    Claim,
    Evidence,
    Magnitude,
    Setup,
    Verdict,
    pct,
    register,
    rnd,
)
from twinbench.claims.probes import DoctorControlFlow, Tracing
from twinbench.claims.result import Numbers
from twinbench.plan import Overrides
from twinbench.record import Record
from twinbench.report.breakeven import break_even_steps, total_s
from twinbench.spec import RunSpec

GROUP = "compilation and step structure"
CPU_SCALE = "Measured on this machine at the suite's (small) sizes, not at the claim's ~300M parameters."


def bert_runs(setup: Setup) -> Overrides:
    """BERT fine-tuning with variable-length text, the claims' fine-tuning loop: the setup's shape (claims/sizes.py:
    batch 32 x 128 on an accelerator), else small batches."""
    if setup.bert_shape:
        return dict(setup.bert_shape)
    return {"batch": 4, "steps": 12, "warmup": 3} if setup.quick else {"batch": 8, "steps": 40, "warmup": 5}


def scale_caveat(r: Record) -> str:
    """The CPU's caveat (small sizes), none on an accelerator (the seeds' sizes)."""
    return CPU_SCALE if (r.conditions.platform or "cpu") == "cpu" else ""


def loop_s(r: Record) -> float:
    """Wall time of the whole measured loop, compiles and recompiles included (the user's wait)."""
    return r.timing.wall_s if r.timing.wall_s else total_s(r, r.run.steps)


# ---------------------------------------------------------------------------------------------------- C1
C1_RULE = ("r = wall time of the fine-tuning loop (compiles included) of jax/naive / torch/eager, both on "
           "small-batch BERT with per-batch lengths (+dynamic). r <= 1.0: contradicted. r > 1.0 and the JAX steady "
           "step is no faster: supported. r > 1.0 but the JAX steady step is faster: depends (it catches up after "
           "the break-even number of steps).")


def c1_runs(s: Setup) -> dict[str, RunSpec]:
    b = bert_runs(s)
    return {"torch": s.spec("torch", "eager+dynamic", s.bert, **b),
            "jax_naive": s.spec("jax", "naive+dynamic", s.bert, **b)}


def c1_judge(ev: Evidence) -> Verdict:
    t, j = ev["torch"], ev["jax_naive"]
    r = loop_s(j) / loop_s(t)
    steady = j.timing.step_ms / t.timing.step_ms
    nums = {"torch_loop_s": rnd(loop_s(t)), "jax_naive_loop_s": rnd(loop_s(j)),
            "loop_ratio_jax_naive_vs_torch": rnd(r), "steady_ratio": rnd(steady),
            "jax_naive_compiles_in_loop": j.compile.compiles_in_loop, "distinct_lengths": j.input.distinct_lengths,
            "steps": t.run.steps, "batch": t.run.batch}
    judged = "loop_ratio_jax_naive_vs_torch,steady_ratio"
    if r <= 1.0:
        return Verdict(CONTRADICTED, f"naive JAX took {r:.2f}x the time of torch eager over the {t.run.steps}-step "
                       "loop: not slower here, compiles included", nums, judged=judged)
    if steady >= 1.0:
        return Verdict(SUPPORTED, f"naive JAX took {r:.2f}x torch eager's time over {t.run.steps} steps "
                       f"({j.compile.compiles_in_loop} compiles, {j.input.distinct_lengths} lengths) and its median "
                       f"step is {steady:.2f}x too, so the gap does not close while new lengths keep coming", nums,
                       judged=judged)
    overhead = loop_s(j) - loop_s(t) - t.run.steps * (j.timing.step_ms - t.timing.step_ms) / 1e3  # fixed cost: compiles
    n = overhead / ((t.timing.step_ms - j.timing.step_ms) / 1e3)
    nums["break_even_steps"] = rnd(n)
    return Verdict(DEPENDS, f"naive JAX took {r:.2f}x torch eager's time over {t.run.steps} steps (compiles), but its "
                   f"median step is {steady:.2f}x: it catches up after ~{math.ceil(n)} steps if no new lengths appear",
                   nums, judged=judged)


def c1_why_not(s: Setup) -> str:
    if s.platform != "tpu":
        return ""
    return ("not measurable on a TPU: the claim sets torch eager (no compile, no retrace) against a naive JAX port, "
            "and torch has no eager path to a TPU (it reaches the chip through torchax, compiled and retraced as jit "
            "is); torch eager on the host beside JAX on the chip would be a verdict from two platforms. "
            "`twinbench claims --only C1` on a GPU or CPU measures it")


register(Claim("C1", GROUP, "A straight port of a small-batch fine-tuning loop runs ~30% slower in JAX than PyTorch "
               "eager (compiles per function, retraces on new shapes; not amortised at small batch).",
               C1_RULE, c1_runs, c1_judge, caveat=CPU_SCALE, why_not=c1_why_not,
               magnitude=Magnitude(("loop_ratio_jax_naive_vs_torch",), 0.3, 0.3, "~30% slower", lambda r: r - 1)))

# ---------------------------------------------------------------------------------------------------- C2
C2_RULE = ("best = the faster steady step of jax/jit and jax/scan-steps (whole step in one jit; K steps per call). "
           "best no faster than torch/eager: contradicted. Faster and its compile is paid back within the planned run "
           "(break-even <= plan steps): supported. Faster but break-even beyond the plan: depends.")


def c2_runs(s: Setup) -> dict[str, RunSpec]:
    return {"torch": s.spec("torch", "eager"), "jit": s.spec("jax", "jit"), "scan": s.spec("jax", "scan-steps")}


def c2_judge(ev: Evidence) -> Verdict:
    t = ev["torch"]
    best_name = min(("jit", "scan"), key=lambda n: ev[n].timing.step_ms)
    b = ev[best_name]
    n = break_even_steps(b, t)
    plan = ev.setup.plan_steps
    nums = {"torch_eager_step_ms": rnd(t.timing.step_ms), "jax_jit_step_ms": rnd(ev["jit"].timing.step_ms),
            "jax_scan_steps_step_ms": rnd(ev["scan"].timing.step_ms), "scan_steps_per_call": ev["scan"].run.steps_per_call,
            "scan_compiles_in_loop": ev["scan"].compile.compiles_in_loop, "best": b.run.strategy,
            "best_first_step_s": rnd(b.timing.first_step_s), "best_vs_torch_eager_step": rnd(b.timing.step_ms / t.timing.step_ms),
            "break_even_steps": rnd(n), "plan_steps": plan}
    judged = "best_vs_torch_eager_step,break_even_steps"
    tn, cav = t.label(), scale_caveat(t)
    if b.timing.step_ms >= t.timing.step_ms:
        return Verdict(CONTRADICTED, f"the best whole-step JAX ({b.run.strategy}, {b.timing.step_ms:.2f} ms) is not faster "
                       f"per step than {tn} ({t.timing.step_ms:.2f} ms): it never overtakes", nums, cav, judged)
    if n is not None and n <= plan:
        return Verdict(SUPPORTED, f"a jax/{b.run.strategy} step takes {b.timing.step_ms / t.timing.step_ms:.2f}x {tn}'s, "
                       f"compiles {b.compile.compiles_in_loop} time(s) and overtakes after {math.ceil(n)} steps", nums,
                       cav, judged)
    return Verdict(DEPENDS, f"jax/{b.run.strategy} steps faster but overtakes {tn} only after "
                   f"{math.ceil(n) if n is not None else '?'} steps, beyond the planned {plan}", nums, cav, judged)


register(Claim("C2", GROUP, "The whole training step in ONE jitted function, several steps per call with lax.scan, "
               "compiles once and makes JAX overtake PyTorch.", C2_RULE, c2_runs, c2_judge))

# ---------------------------------------------------------------------------------------------------- C3
C3_RULE = ("From the tracing probe: a Python if on a traced value must fail with JAX's tracer error "
           "(TracerBoolConversionError; any other error: not measurable), a static hyperparameter must compile "
           "once per value, padded shapes must compile once. From BERT runs: jax/jit (pad-max) compiles once in the "
           "loop, jit+dynamic more. In a source checkout `twinbench doctor` must also flag its Python-if example "
           "(jax-python-control-flow). All hold: supported. A Python if on a traced value runs, or padding does not cut "
           "compiles: contradicted. Otherwise: depends.")


def c3_runs(s: Setup) -> dict[str, RunSpec]:
    b = bert_runs(s) | ({"attention_impl": "default"} if s.accelerator else {})  # one attention for every policy
    return {"pad_max": s.spec("jax", "jit", s.bert, **b), "bucket": s.spec("jax", "jit+bucket", s.bert, **b),
            "dynamic": s.spec("jax", "jit+dynamic", s.bert, **b)}


def c3_judge(ev: Evidence) -> Verdict:
    p = ev.probe("tracing", Tracing)
    pad, dyn, buck = ev["pad_max"], ev["dynamic"], ev["bucket"]
    nums: Numbers = {
            "python_if_on_traced_value": p.python_if_on_traced_value,
            "static_hyperparameter_traces": p.static_hyperparameter_traces,
            "hyperparameter_values": p.hyperparameter_values,
            "traced_hyperparameter_traces": p.traced_hyperparameter_traces,
            "unpadded_traces": p.unpadded_traces, "padded_traces": p.padded_traces,
            "bert_compiles_pad_max": pad.compile.compiles_in_loop, "bert_compiles_bucket": buck.compile.compiles_in_loop,
            "bert_compiles_dynamic": dyn.compile.compiles_in_loop, "bert_distinct_lengths": dyn.input.distinct_lengths}
    if_result = p.python_if_on_traced_value
    if if_result != "ran" and not p.python_if_error_expected:
        return Verdict(NOT_MEASURABLE, "not measurable here: the Python-if probe failed with another error than "
                       f"the tracer error it tests for (jax.errors.TracerBoolConversionError): {if_result}", nums)
    if_fails = if_result != "ran"
    static_recompiles = p.static_hyperparameter_traces >= p.hyperparameter_values > 1
    pad_helps = p.padded_traces == 1 < p.unpadded_traces and pad.compile.compiles_in_loop < dyn.compile.compiles_in_loop
    if not if_fails or not pad_helps:
        why = "a Python if on a traced value ran under jit" if not if_fails else "padding did not cut the compiles"
        return Verdict(CONTRADICTED, why, nums)
    # the doctor's probe is C3's second: a setup without it (a test's) reads as the example not being there
    doc = ev.probe("doctor_control_flow", DoctorControlFlow) if "doctor_control_flow" in ev.probes \
        else DoctorControlFlow()
    if doc.available:
        nums["doctor_findings_on_python_if_example"] = ", ".join(doc.finding_ids) or "none"
    doctor_sees = not doc.available or doc.flagged
    if static_recompiles and pad.compile.compiles_in_loop == 1 and doctor_sees:
        return Verdict(SUPPORTED, f"the Python if on a tracer fails ({p.python_if_on_traced_value}); a static "
                       f"hyperparameter compiled {p.static_hyperparameter_traces}x for {p.hyperparameter_values} "
                       f"values (traced: {p.traced_hyperparameter_traces}x); BERT pad-max compiled once, dynamic "
                       f"{dyn.compile.compiles_in_loop}x" + ("; the doctor flags the Python if" if doc.flagged else ""),
                       nums)
    return Verdict(DEPENDS, "padding cuts compiles but not to one program, static values did not recompile, or the "
                   "doctor did not flag the Python if", nums)


register(Claim("C3", GROUP, "Fixing dynamic dimensions with static_argnums or padding avoids recompiles; a Python `if` "
               "in the step recompiles (Python values) or fails (traced values).", C3_RULE, c3_runs, c3_judge,
               probes=("tracing", "doctor_control_flow"), timed=False))

# ---------------------------------------------------------------------------------------------------- C4
C4_SHORT = 1000
C4_SHARE = 0.10
C4_RULE = (f"share(N) = compile_s / (compile_s + N * step_s) of the larger jax/jit measured (a CPU: the GPT preset at "
           "3-4x its depth; an accelerator: the ~300M Llama). share >= "
           f"{C4_SHARE:.0%} at both {C4_SHORT} steps and the planned run: supported; below at both: contradicted; "
           "otherwise depends (the run length where it drops below is the threshold). Compile growth per layer "
           "(unrolled vs scan-layers) is reported and extrapolated to 24 layers.")


def c4_depths(s: Setup) -> tuple[int, int]:
    from twinbench.spec import PRESETS

    base = PRESETS[s.gpt][0].layers
    return base, base * (3 if s.quick else 4)


def c4_runs(s: Setup) -> dict[str, RunSpec]:
    if s.accelerator:  # the claim's ~300M model (the larger preset) against GPT-2: a compile of about a minute each
        return {"jit_lo": s.spec("jax", "jit"), "jit_hi": s.spec("jax", "jit", s.big)}
    lo, hi = c4_depths(s)
    return {"jit_lo": s.spec("jax", "jit", layers=lo), "jit_hi": s.spec("jax", "jit", layers=hi),
            "scan_lo": s.spec("jax", "scan-layers", layers=lo), "scan_hi": s.spec("jax", "scan-layers", layers=hi)}


def compile_share(r: Record, steps: int) -> float:
    c = r.compile.compile_s or 0.0
    return c / (c + steps * r.timing.step_ms / 1e3)


def family_of(r: Record) -> str:
    from twinbench.spec import PRESETS

    return PRESETS[r.run.preset][0].family if r.run.preset in PRESETS else ""


def c4_judge(ev: Evidence) -> Verdict:
    lo, hi = ev["jit_lo"], ev["jit_hi"]
    plan = ev.setup.plan_steps
    s_short, s_plan = compile_share(hi, C4_SHORT), compile_share(hi, plan)
    threshold = hi.compile.compile_s * (1 - C4_SHARE) / C4_SHARE / (hi.timing.step_ms / 1e3)
    nums = {f"jit_compile_s_L{lo.run.layers}": rnd(lo.compile.compile_s), f"jit_compile_s_L{hi.run.layers}": rnd(hi.compile.compile_s),
            f"share_at_{C4_SHORT}_steps": rnd(s_short), f"share_at_{plan}_steps": rnd(s_plan),
            "steps_where_share_drops_below_10pct": rnd(threshold)}
    if family_of(lo) == family_of(hi) and hi.run.layers != lo.run.layers:  # growth per layer: one family's depths
        per_layer = (hi.compile.compile_s - lo.compile.compile_s) / (hi.run.layers - lo.run.layers)
        nums |= {"jit_compile_s_per_layer": rnd(per_layer),
                 "jit_compile_s_at_24_layers_extrapolated": rnd(lo.compile.compile_s + per_layer * (24 - lo.run.layers))}
    else:
        nums |= {f"{lo.run.preset}_compile_s": rnd(lo.compile.compile_s), f"{hi.run.preset}_compile_s":
                 rnd(hi.compile.compile_s), f"{hi.run.preset}_n_params": hi.run.n_params}
    if "scan_lo" in ev.records and "scan_hi" in ev.records:
        scan_lo, scan_hi = ev["scan_lo"], ev["scan_hi"]
        nums |= {f"scan_layers_compile_s_L{lo.run.layers}": rnd(scan_lo.compile.compile_s),
                 f"scan_layers_compile_s_L{hi.run.layers}": rnd(scan_hi.compile.compile_s),
                 "scan_layers_compile_s_per_layer": rnd((scan_hi.compile.compile_s - scan_lo.compile.compile_s)
                                                        / (hi.run.layers - lo.run.layers))}
    if (hi.conditions.platform or "cpu") == "cpu":
        caveat = ("The claim's minutes are for ~300M-parameter models on GPUs; this measures the same quantities at "
                  f"{hi.run.layers} layers x d{hi.run.d_model} here, so only the shares and the growth per layer carry "
                  "over.")
    else:
        caveat = (f"A cold compile ({hi.run.compile_cache or 'cold'} cache) of {hi.run.preset} "
                  f"({(hi.run.n_params or 0) / 1e6:.0f}M parameters); `--cache warm` measures what JAX's "
                  "persistent compilation cache saves of it.")
    judged = f"share_at_{C4_SHORT}_steps,share_at_{plan}_steps"
    if s_short >= C4_SHARE and s_plan >= C4_SHARE:
        return Verdict(SUPPORTED, f"compile is {s_plan:.0%} of a {plan}-step run ({hi.compile.compile_s:.1f} s)", nums, caveat,
                       judged)
    if s_short < C4_SHARE and s_plan < C4_SHARE:
        return Verdict(CONTRADICTED, f"compile is only {s_short:.1%} of even a {C4_SHORT}-step run", nums, caveat,
                       judged)
    return Verdict(DEPENDS, f"compile ({hi.compile.compile_s:.1f} s) is >= 10% of runs shorter than {math.ceil(threshold)} "
                   f"steps and less beyond ({s_plan:.1%} of {plan} steps)", nums, caveat, judged)


register(Claim("C4", GROUP, "XLA compile of a ~300M model takes minutes after every model change; compile is 10-15% "
               "of a full training cycle.", C4_RULE, c4_runs, c4_judge, once=("scan_lo", "scan_hi"),
               magnitude=Magnitude(("share_at_{plan}_steps",), 0.10, 0.15, "10-15% of the run")))

# ---------------------------------------------------------------------------------------------------- C5
C5_RULE = ("For each compiled strategy (jax/jit, jax/scan-steps) against torch/eager: break-even steps from first-step "
           "time and steady step time (report/breakeven.py). A finite crossing after step 1 within 100x the planned "
           "run: supported (a trade with a break-even). One side ahead at every run length for every pair: "
           "contradicted. A crossing only beyond 100x the plan: depends.")


def c5_runs(s: Setup) -> dict[str, RunSpec]:
    return {"eager": s.spec("torch", "eager"), "jit": s.spec("jax", "jit"), "scan": s.spec("jax", "scan-steps")}


def c5_judge(ev: Evidence) -> Verdict:
    plan, e = ev.setup.plan_steps, ev["eager"]
    nums: Numbers = {"torch_eager_first_step_s": rnd(e.timing.first_step_s), "torch_eager_step_ms": rnd(e.timing.step_ms)}
    crossings = []
    for name in ("jit", "scan"):
        r = ev[name]
        nums[f"jax_{r.run.strategy}_first_step_s"] = rnd(r.timing.first_step_s)
        nums[f"jax_{r.run.strategy}_step_ms"] = rnd(r.timing.step_ms)
        for a, b in ((r, e), (e, r)):
            n = break_even_steps(a, b)
            if n is not None and 1 < n < math.inf:
                nums[f"break_even_{a.run.strategy}_overtakes_{b.run.strategy}"] = math.ceil(n)
                crossings.append((n, f"{a.run.framework}/{a.run.strategy} overtakes {b.run.framework}/{b.run.strategy} "
                                     f"after {math.ceil(n)} steps"))
    nums["best_compiled_vs_eager_step"] = rnd(min(ev[n].timing.step_ms for n in ("jit", "scan")) / e.timing.step_ms)
    judged = "best_compiled_vs_eager_step,first_crossing_steps"
    cav = scale_caveat(e)
    if not crossings:
        return Verdict(CONTRADICTED, "no crossing: one side is ahead at every run length", nums, cav, judged)
    n, text = min(crossings)
    nums["first_crossing_steps"] = math.ceil(n)
    if n <= 100 * plan:
        return Verdict(SUPPORTED, text + "; each model change restarts the count (a new compile)", nums, cav, judged)
    return Verdict(DEPENDS, text + f", far beyond the planned {plan} steps", nums, cav, judged)


register(Claim("C5", GROUP, "Compile time vs run time is a trade whose answer depends on how many steps you run and "
               "how often you change the model: there is a break-even number of steps.", C5_RULE, c5_runs, c5_judge))

# ---------------------------------------------------------------------------------------------------- C6
C6_RULE = ("On the larger model: gap = torch/eager - jax/jit steady step; closed = (eager - compile) / gap. No gap "
           "(jit not faster): depends (nothing to close; compile vs eager reported). closed >= 50%: supported; "
           "closed <= 0 (compile no faster than eager): contradicted; in between: depends.")


def c6_why_not(s: Setup) -> str:
    if s.platform != "tpu":
        return ""
    return ("not measurable on a TPU: torch.compile has no TPU backend here; torch reaches the chip only through "
            "torchax (jax:torchax, an XLA program as jit is), whose step C7 and C22 set against jax/jit")


def c6_runs(s: Setup) -> dict[str, RunSpec]:
    return {"eager": s.spec("torch", "eager", s.big), "compile": s.spec("torch", "compile", s.big),
            "jit": s.spec("jax", "jit", s.big)}


def c6_judge(ev: Evidence) -> Verdict:
    e, c, j = ev["eager"], ev["compile"], ev["jit"]
    gap = e.timing.step_ms - j.timing.step_ms
    n = break_even_steps(c, e)
    nums = {"torch_eager_step_ms": rnd(e.timing.step_ms), "torch_compile_step_ms": rnd(c.timing.step_ms),
            "jax_jit_step_ms": rnd(j.timing.step_ms), "torch_compile_s": rnd(c.compile.compile_s),
            "jax_jit_compile_s": rnd(j.compile.compile_s), "compile_overtakes_eager_after_steps": rnd(n)}
    nums["jit_vs_eager_step"] = rnd(j.timing.step_ms / e.timing.step_ms)
    if gap <= 0:
        return Verdict(DEPENDS, f"no gap to close here: jax/jit ({j.timing.step_ms:.2f} ms) is not faster than torch eager "
                       f"({e.timing.step_ms:.2f} ms); torch.compile steps {pct(c.timing.step_ms / e.timing.step_ms - 1)} vs eager",
                       nums, judged="gap_closed,jit_vs_eager_step")
    closed = (e.timing.step_ms - c.timing.step_ms) / gap
    nums["gap_closed"] = rnd(closed)
    if closed >= 0.5:
        return Verdict(SUPPORTED, f"torch.compile closes {closed:.0%} of the eager-to-jit gap", nums, judged="gap_closed,jit_vs_eager_step")
    if closed <= 0:
        return Verdict(CONTRADICTED, f"torch.compile is no faster than eager ({c.timing.step_ms:.2f} vs "
                       f"{e.timing.step_ms:.2f} ms): it closes none of the gap", nums, judged="gap_closed,jit_vs_eager_step")
    return Verdict(DEPENDS, f"torch.compile closes {closed:.0%} of the gap: part, not most", nums, judged="gap_closed,jit_vs_eager_step")


register(Claim("C6", GROUP, "torch.compile closes most of the gap (\"go back to PyTorch and add torch.compile\").",
               C6_RULE, c6_runs, c6_judge, caveat=CPU_SCALE, why_not=c6_why_not))
