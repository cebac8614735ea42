"""C7-C9, steady-state speed: each claim's runs and its verdict rule, next to each other."""

from __future__ import annotations

from twinbench.claims.core import (
    CONTRADICTED,
    DEPENDS,
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
from twinbench.plan import Overrides
from twinbench.spec import PRESETS, RunSpec

GROUP = "steady-state speed"


def points(s: Setup) -> list[tuple[str, str, Overrides]]:
    """The (name, preset, overrides) points of the size sweep, smallest work per step first. On an accelerator:
    BERT-base fine-tuning (batch 32 x 128), GPT-2 124M and the ~300M Llama at 8 x 1024."""
    if s.accelerator:
        shape: Overrides = {"batch": PRESETS[s.bert][1].batch, "seq": PRESETS[s.bert][1].seq}
        bert = {k: s.bert_shape[k] for k in shape if k in s.bert_shape}  # the setup's batch shape, where it sets one
        shape |= bert
        pts = [(f"{s.bert}_b{shape['batch']}x{shape['seq']}", s.bert, bert)]
        return pts + [(f"{p}_b{PRESETS[p][1].batch}x{PRESETS[p][1].seq}", p, {}) for p in dict.fromkeys((s.gpt, s.big))]
    b = PRESETS[s.gpt][1].batch
    mult = (8,) if s.quick else (4, 16)
    pts = [(f"{s.gpt}_b{b}", s.gpt, {})] + [(f"{s.gpt}_b{b * m}", s.gpt, {"batch": b * m}) for m in mult]
    if s.big != s.gpt:
        pts.append((f"{s.big}_b{PRESETS[s.big][1].batch}", s.big, {}))
    return pts


def sweep_runs(s: Setup) -> dict[str, RunSpec]:
    out = {}
    for name, preset, over in points(s):
        out[f"eager@{name}"] = s.spec("torch", "eager", preset, **over)
        out[f"jit@{name}"] = s.spec("jax", "jit", preset, **over)
    return out


# ---------------------------------------------------------------------------------------------------- C7
C7_LO, C7_HI = 0.0, 0.15
C7_RULE = (f"At the largest point measured: adv = best torch steady step (eager, compile) / jax/jit step - 1. adv >= "
           f"{C7_HI:.0%}: supported; adv <= {C7_LO:.0%}: contradicted; in between: depends.")


def c7_runs(s: Setup) -> dict[str, RunSpec]:
    runs = {"eager": s.spec("torch", "eager", s.big), "jit": s.spec("jax", "jit", s.big)}
    if s.platform != "tpu":  # torch.compile has no TPU backend: there the torch path is torchax alone
        runs["compile"] = s.spec("torch", "compile", s.big)
    return runs


def c7_judge(ev: Evidence) -> Verdict:
    j = ev["jit"]
    paths = [ev.records[n] for n in ("eager", "compile") if n in ev.records]
    best = min(paths, key=lambda r: r.timing.step_ms)
    adv = best.timing.step_ms / j.timing.step_ms - 1
    nums = {f"{r.run.framework}_{r.run.strategy}_step_ms": rnd(r.timing.step_ms) for r in paths}
    nums |= {"jax_jit_step_ms": rnd(j.timing.step_ms), "jax_advantage_vs_best_torch": rnd(adv),
             "n_params": j.run.n_params, "batch": j.run.batch, "seq": j.run.seq}
    params = f"{(j.run.n_params or 0) / 1e6:.1f}M"
    caveat = (f"{params} parameters on {j.conditions.platform} in {j.run.precision or 'fp32'}, one device: "
              + ("not the claim's ~300M with large batches on GPUs; " if (j.run.n_params or 0) < 2e8 else "")
              + "the DDP + mixed-precision half is not measured here.")
    where = f"at {params} params, batch {j.run.batch} x {j.run.seq}"
    name = f"{best.run.framework}/{best.run.strategy}"
    judged = "jax_advantage_vs_best_torch"
    if adv >= C7_HI:
        return Verdict(SUPPORTED, f"the best torch step ({name}) takes {1 + adv:.2f}x jax/jit's {where}",
                       nums, caveat, judged)
    if adv <= C7_LO:
        return Verdict(CONTRADICTED, f"jax/jit is not faster than {name} {where} "
                       f"({j.timing.step_ms:.2f} vs {best.timing.step_ms:.2f} ms)", nums, caveat, judged)
    return Verdict(DEPENDS, f"jax/jit is {adv:.0%} faster than {name} {where}: less than the claimed "
                   "20-30%", nums, caveat, judged)


register(Claim("C7", GROUP, "Once compiled, JAX runs 20-30% faster per step than PyTorch at ~300M parameters with "
               "large batches and no dynamic shapes (others: at most 15-20% vs DDP + mixed precision).",
               C7_RULE, c7_runs, c7_judge,
               magnitude=Magnitude(("jax_advantage_vs_best_torch",), 0.2, 0.3, "20-30% faster")))

# ---------------------------------------------------------------------------------------------------- C8
C8_RULE = ("speedup = torch/eager step (on a TPU: the torch twin through torchax) / jax/jit step at each point (model "
           "size x batch), ordered by work per step. "
           "JAX ahead (speedup > 1.05) already at the smallest point: contradicted. Not ahead at the smallest but "
           "ahead at a larger one: supported (threshold = first point where it leads). Never ahead: depends (the "
           "advantage, if any, lies beyond the sizes measured).")


def c8_judge(ev: Evidence) -> Verdict:
    rows = []
    for name, _, _ in points(ev.setup):
        e, j = ev[f"eager@{name}"], ev[f"jit@{name}"]
        work = (j.speed.flops_per_token or 1) * j.run.batch * j.run.seq
        rows.append((work, name, e.timing.step_ms / j.timing.step_ms))
    rows.sort()
    nums = {f"speedup_{name}": rnd(sp) for _, name, sp in rows}
    first_sp = rows[0][2]
    nums["speedup_largest_vs_smallest"] = rnd(rows[-1][2] / first_sp)
    judged = f"speedup_{rows[0][1]},speedup_{rows[-1][1]}"
    if first_sp > 1.05:
        return Verdict(CONTRADICTED, f"JAX is already {first_sp:.2f}x {ev[f'eager@{rows[0][1]}'].label()} at the smallest point "
                       f"({rows[0][1]}): its advantage does not need large models or batches", nums, judged=judged)
    ahead = [name for _, name, sp in rows if sp > 1.05]
    if ahead:
        return Verdict(SUPPORTED, f"JAX is not ahead at {rows[0][1]} ({first_sp:.2f}x) but leads from {ahead[0]} on",
                       nums, judged=judged)
    return Verdict(DEPENDS, f"JAX is not ahead at any measured point (up to {rows[-1][1]}, {rows[-1][2]:.2f}x): an "
                   "advantage, if any, starts beyond these sizes", nums, judged=judged)


register(Claim("C8", GROUP, "JAX's advantage appears only with large models, long sequences and large batches; "
               "small-batch fine-tuning is not its strength.", C8_RULE, sweep_runs, c8_judge,
               caveat="Sizes limited to what this machine runs in the time given."))

# ---------------------------------------------------------------------------------------------------- C9
C9_HI, C9_LO = 0.15, 0.05
C9_RULE = (f"saving = 1 - bf16 step / fp32 step, per framework (torch/eager+bf16, jax/jit+bf16; on a TPU torch through "
           "torchax) on the base model (GPT-2 124M on an accelerator, with the written-out attention on both sides). "
           f"Both >= {C9_HI:.0%}: supported; both <= {C9_LO:.0%}: contradicted; otherwise depends (on framework).")


def c9_runs(s: Setup) -> dict[str, RunSpec]:
    # On a CPU, bf16 is emulated: the larger model's bf16 steps are an order of magnitude slower than fp32 and
    # the jax one compiles longer, the costliest runs of the suite three times over. The base model answers
    # the same question. On an accelerator GPT-2 124M, the four runs with the same (written-out) attention: the
    # fused kernels run bf16 only.
    if s.accelerator:
        same = {"attention_impl": "default"}
        return {"torch": s.spec("torch", "eager", precision="fp32", **same),
                "torch_bf16": s.spec("torch", "eager", precision="bf16", **same),
                "jax": s.spec("jax", "jit", precision="fp32", **same),
                "jax_bf16": s.spec("jax", "jit", precision="bf16", **same)}
    return {"torch": s.spec("torch", "eager", s.gpt), "torch_bf16": s.spec("torch", "eager+bf16", s.gpt),
            "jax": s.spec("jax", "jit", s.gpt), "jax_bf16": s.spec("jax", "jit+bf16", s.gpt)}


def c9_judge(ev: Evidence) -> Verdict:
    st = 1 - ev["torch_bf16"].timing.step_ms / ev["torch"].timing.step_ms
    sj = 1 - ev["jax_bf16"].timing.step_ms / ev["jax"].timing.step_ms
    nums = {"torch_fp32_step_ms": rnd(ev["torch"].timing.step_ms), "torch_bf16_step_ms": rnd(ev["torch_bf16"].timing.step_ms),
            "jax_fp32_step_ms": rnd(ev["jax"].timing.step_ms), "jax_bf16_step_ms": rnd(ev["jax_bf16"].timing.step_ms),
            "torch_saving": rnd(st), "jax_saving": rnd(sj)}
    platform = ev["jax"].conditions.platform
    caveat = ("Measured on CPU, which has no bf16 tensor cores: bf16 there is usually emulated or converted and "
              "slower; on a GPU with bf16 units the answer can differ.") if platform == "cpu" else ""
    judged = "torch_saving,jax_saving"
    if st >= C9_HI and sj >= C9_HI:
        return Verdict(SUPPORTED, f"bf16 saves {st:.0%} (torch) and {sj:.0%} (jax) of the step time", nums, caveat,
                       judged)
    if st <= C9_LO and sj <= C9_LO:
        return Verdict(CONTRADICTED, f"bf16 changes step time by {pct(-st)} (torch) and {pct(-sj)} (jax) on "
                       f"{platform}: no saving here", nums, caveat, judged)
    return Verdict(DEPENDS, f"bf16 saves {st:.0%} in torch and {sj:.0%} in jax: it depends on the framework", nums,
                   caveat, judged)


register(Claim("C9", GROUP, "bf16 mixed precision saves 20-30% of training time.", C9_RULE, c9_runs, c9_judge,
               magnitude=Magnitude(("torch_saving", "jax_saving"), 0.2, 0.3, "20-30% saved")))
