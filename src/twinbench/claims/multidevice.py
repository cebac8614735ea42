"""C10-C14, many devices: each claim's runs and its verdict rule, next to each other.

Without several accelerators the runs use simulated devices (JAX host-platform devices, torchrun processes on
the CPU) that share this machine's cores: they show what each formulation computes, where the arrays live and
what it costs in overhead, never a real speed-up. Every verdict here says so in its caveat.
"""

from __future__ import annotations

from typing import Any

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
    register,
    rnd,
)
from twinbench.record import Record
from twinbench.spec import PRESETS, RunSpec

GROUP = "multi-device"
DEVICES = 2


def simulated(r: Record) -> str:
    """The caveat for runs on simulated devices (empty on real accelerators)."""
    if r.conditions.platform != "cpu":
        return ""
    from twinbench.report.scaling import caveat

    return caveat([("cpu", r.run.device_count or DEVICES)]) or ""


#: What each many-device claim needs of the devices, for its one line on a machine with fewer.
NEEDS = {"C10": "a batch split over the devices against one replicated on each",
         "C11": "mesh-dp and pmap on the same devices", "C12": "weak scaling over the devices",
         "C13": "the replicas of several devices compared after training"}


def prediction(s: Setup, devices: int = 8) -> str:
    """What ``twinbench predict --devices N`` estimates for the suite's GPT on this device (datasheet roofline +
    ring all-reduce, predict/scaling.py), in words, marked as a prediction; the command alone when the device is
    not known here."""
    preset = s.gpt
    cmd = (f"`twinbench predict --preset {preset} --strategies jax:mesh-dp+bf16 --device {s.device or 'DEVICE'} "
           f"--devices {devices}`")
    if not s.device:
        return f"{cmd} estimates the step on {devices} devices instead (a prediction, not a measurement)"
    from twinbench.claims.budget import n_params, step_ms
    from twinbench.predict import scaling
    from twinbench.predict.datasheets import lookup

    sheet = lookup(s.device)
    spec = s.spec("jax", "jit", preset)
    ms, _ = step_ms(spec, sheet)
    pts = scaling.curve(ms, 4 * n_params(spec), sheet, "jax", "mesh-dp", devices)
    said = ", ".join(f"{p.devices}: {p.step_ms:.1f} ms a step ({p.allreduce_ms:.1f} ms all-reduce over {p.link}), "
                     f"{p.speedup:.2f}x the throughput of one" for p in pts if p.devices > 1)
    return (f"PREDICTION, not a measurement: {cmd} estimates, at the same per-device batch, {said}")


def why_not(claim_id: str) -> Any:
    """The claim's reason on an accelerator machine with fewer than ``DEVICES`` devices."""
    def reason(s: Setup) -> str:
        if not s.accelerator or s.devices >= DEVICES:
            return ""
        return (f"not measurable on one {s.platform.upper()}: {claim_id} needs {DEVICES} devices "
                f"({NEEDS[claim_id]}) and this machine has {s.devices}; {prediction(s)}")
    return reason


def dp(s: Setup, strategy: str, framework: str = "jax", **over: Any) -> RunSpec:
    return s.spec(framework, strategy, devices=over.pop("devices", DEVICES), **over)


# --------------------------------------------------------------------------------------------------- C10
C10_RULE = ("mesh-dp+replicate-batch (the batch replicated, not split) on "
            f"{DEVICES} devices against the same global batch on one device (mesh-dp, 1 device) and split "
            "(mesh-dp). Replicated run flagged by the sharding report and its step >= 0.9x the one-device step (no "
            "speed-up from the devices): supported; flagged but below 0.9x the one-device step: contradicted; not "
            "flagged: depends (the arrays do not show the duplication).")


def c10_runs(s: Setup) -> dict[str, RunSpec]:
    # a global batch large enough that compute, not per-step overhead, fills a step; its one-device run is C12's
    b = c12_batches(s)[1]
    return {"one": dp(s, "mesh-dp", devices=1, batch=b), "split": dp(s, "mesh-dp", batch=b),
            "replicated": dp(s, "mesh-dp+replicate-batch", batch=b)}


def c10_judge(ev: Evidence) -> Verdict:
    one, sp, rp = ev["one"], ev["split"], ev["replicated"]
    flagged = any("replicated" in w for w in rp.warnings or [])
    ratio = rp.timing.step_ms / one.timing.step_ms
    nums = {"one_device_step_ms": rnd(one.timing.step_ms), "split_step_ms": rnd(sp.timing.step_ms),
            "replicated_step_ms": rnd(rp.timing.step_ms), "replicated_vs_one_device": rnd(ratio),
            "split_vs_one_device": rnd(sp.timing.step_ms / one.timing.step_ms), "replicated_flagged": flagged,
            "split_flagged": bool(sp.warnings), "devices": sp.run.device_count, "global_batch": sp.run.batch}
    cav = simulated(sp)
    judged = "replicated_vs_one_device"
    if not flagged:
        return Verdict(DEPENDS, "the replicated batch was not flagged by the sharding report: cannot tell from the "
                       "arrays whether the devices duplicated the work", nums, cav, judged)
    if ratio >= 0.9:
        return Verdict(SUPPORTED, f"with the batch replicated every device computes the whole batch: the sharding "
                       f"report flags it and the step takes {ratio:.2f}x the one-device step (no speed-up; split: "
                       f"{sp.timing.step_ms / one.timing.step_ms:.2f}x)", nums, cav, judged)
    return Verdict(CONTRADICTED, f"the replicated run was flagged but steps faster ({ratio:.2f}x) than one device",
                   nums, cav, judged)


register(Claim("C10", GROUP, "Multi-GPU gives no speed-up when sharding is not really applied: with data replicated "
               "every device computes the same thing (check with jax.debug.visualize_array_sharding).",
               C10_RULE, c10_runs, c10_judge, once=("split",), why_not=why_not("C10")))

# --------------------------------------------------------------------------------------------------- C11
C11_RULE = ("jax/mesh-dp (jit + NamedSharding) against jax/pmap, same global batch and devices. Same final loss "
            "(|diff| <= 1e-3 relative) and mesh-dp step <= 1.1x pmap's: supported (the recommended API costs "
            "nothing); mesh-dp step > 1.25x pmap's or losses differ: contradicted; in between: depends.")


def c11_runs(s: Setup) -> dict[str, RunSpec]:
    return {"mesh": dp(s, "mesh-dp"), "pmap": dp(s, "pmap")}


def c11_judge(ev: Evidence) -> Verdict:
    m, p = ev["mesh"], ev["pmap"]
    ratio = m.timing.step_ms / p.timing.step_ms
    loss_diff = abs(m.loss.loss_last - p.loss.loss_last) / max(abs(p.loss.loss_last), 1e-9)
    nums = {"mesh_dp_step_ms": rnd(ratio * p.timing.step_ms), "pmap_step_ms": rnd(p.timing.step_ms),
            "mesh_vs_pmap": rnd(ratio), "mesh_compile_s": rnd(m.compile.compile_s), "pmap_compile_s": rnd(p.compile.compile_s),
            "final_loss_rel_diff": rnd(loss_diff)}
    cav = simulated(m)
    if loss_diff > 1e-3 or ratio > 1.25:
        why = "the two train different models" if loss_diff > 1e-3 else f"mesh-dp steps {ratio:.2f}x pmap's time"
        return Verdict(CONTRADICTED, why, nums, cav, "mesh_vs_pmap")
    if ratio <= 1.1:
        return Verdict(SUPPORTED, f"mesh-dp trains the same model (loss diff {loss_diff:.1e}) at {ratio:.2f}x pmap's "
                       "step time, with sharding stated on the arrays instead of a per-device program", nums, cav,
                       "mesh_vs_pmap")
    return Verdict(DEPENDS, f"same model, but mesh-dp steps {ratio:.2f}x pmap's time here", nums, cav, "mesh_vs_pmap")


register(Claim("C11", GROUP, "Use Mesh + NamedSharding (jit with shardings) instead of hand-written pmap.",
               C11_RULE, c11_runs, c11_judge, why_not=why_not("C11")))

# --------------------------------------------------------------------------------------------------- C12
C12_RULE = ("Weak-scaling efficiency of jax/mesh-dp on 2 devices (report/scaling.py: T(1 device, b) / T(2, 2b)) "
            "at a small and a large per-device batch. Efficiency at the small batch below 0.9x the large batch's: "
            "supported (overhead eats the gain at small batch; threshold = the batch where it reaches 0.9x); "
            "efficiency no better at the large batch: contradicted; otherwise depends.")


def c12_batches(s: Setup) -> tuple[int, int]:
    b = PRESETS[s.gpt][1].batch // DEVICES or 1
    return b, b * 8


def c12_runs(s: Setup) -> dict[str, RunSpec]:
    out = {}
    for b in c12_batches(s):
        out[f"one@{b}"] = dp(s, "mesh-dp", devices=1, batch=b)
        out[f"two@{b}"] = dp(s, "mesh-dp", batch=b * DEVICES)
    return out


def c12_judge(ev: Evidence) -> Verdict:
    lo, hi = c12_batches(ev.setup)
    eff = {b: ev[f"one@{b}"].timing.step_ms / ev[f"two@{b}"].timing.step_ms for b in (lo, hi)}
    nums = {f"weak_efficiency_per_device_batch_{b}": rnd(e) for b, e in eff.items()}
    nums.update({f"step_ms_1dev_b{b}": rnd(ev[f"one@{b}"].timing.step_ms) for b in (lo, hi)})
    nums.update({f"step_ms_2dev_b{2 * b}": rnd(ev[f"two@{b}"].timing.step_ms) for b in (lo, hi)})
    cav = simulated(ev[f"two@{lo}"])
    nums["efficiency_small_vs_large"] = rnd(eff[lo] / eff[hi])
    judged = "efficiency_small_vs_large"
    if eff[lo] < 0.9 * eff[hi]:
        return Verdict(SUPPORTED, f"weak efficiency {eff[lo]:.2f} at per-device batch {lo} vs {eff[hi]:.2f} at {hi}: "
                       f"overhead dominates below per-device batch ~{hi} here", nums, cav, judged)
    if eff[hi] <= eff[lo]:
        return Verdict(CONTRADICTED, f"no better efficiency at per-device batch {hi} ({eff[hi]:.2f}) than at {lo} "
                       f"({eff[lo]:.2f})", nums, cav, judged)
    return Verdict(DEPENDS, f"efficiency rises only a little from batch {lo} ({eff[lo]:.2f}) to {hi} ({eff[hi]:.2f})",
                   nums, cav, judged)


register(Claim("C12", GROUP, "At small per-device batch, communication latency eats the parallel gain; per-device "
               "batch >= 64 is suggested before judging.", C12_RULE, c12_runs, c12_judge, why_not=why_not("C12")))

# --------------------------------------------------------------------------------------------------- C13
C13_RULE = ("jax/pmap+nosync (no lax.pmean of the gradients) against jax/pmap: parameter replicas compared after "
            "the run (record sharding.replicas_max_abs_diff). nosync replicas differ and synced ones agree "
            "(<= 1e-6): supported; nosync replicas identical: contradicted; both differ: depends.")


def c13_runs(s: Setup) -> dict[str, RunSpec]:
    return {"sync": dp(s, "pmap"), "nosync": dp(s, "pmap+nosync")}


def c13_judge(ev: Evidence) -> Verdict:
    def diff(r: Record) -> float:
        return float(r.sharding.replicas_max_abs_diff or 0.0)

    ds, dn = diff(ev["sync"]), diff(ev["nosync"])
    nums = {"sync_replicas_max_abs_diff": rnd(ds), "nosync_replicas_max_abs_diff": rnd(dn),
            "nosync_warnings": len(ev["nosync"].warnings or []),
            "sync_loss_last": rnd(ev["sync"].loss.loss_last, 5), "nosync_loss_last": rnd(ev["nosync"].loss.loss_last, 5)}
    cav = simulated(ev["sync"])
    if dn <= 1e-6:
        return Verdict(CONTRADICTED, "without the gradient pmean the replicas still agree", nums, cav)
    if ds <= 1e-6:
        return Verdict(SUPPORTED, f"without the pmean the replicas drift apart (max |diff| {dn:.2g}): each device "
                       "trained its own model; with it they agree", nums, cav)
    return Verdict(DEPENDS, f"replicas differ with ({ds:.2g}) and without ({dn:.2g}) the pmean", nums, cav)


register(Claim("C13", GROUP, "If gradient accumulation and the pmap axis_name disagree, gradients are never "
               "synchronised and each device trains its own model.", C13_RULE, c13_runs, c13_judge, timed=False, why_not=why_not("C13")))

# --------------------------------------------------------------------------------------------------- C14
C14_RULE = ("Not measurable by a benchmark: 'more mature' (years of use, tooling, failure handling) and 'cleaner to "
            "write' are judgements about an ecosystem and about code style, not quantities of a run. Counting the "
            "lines of twinbench's own strategy files would measure how twinbench's authors wrote them; counting "
            "lines of examples written for the purpose would measure the examples' author. No runs.")


def c14_judge(ev: Evidence) -> Verdict:
    return Verdict(NOT_MEASURABLE, "not measurable: maturity and cleanliness are judgements, not quantities a run "
                   "yields; compare the two yourself with `twinbench compare --devices 2 --strategies ddp,mesh-dp` "
                   "(speed, memory and sharding, not style), and diff src/twinbench/strategies/torch_ddp.py with "
                   "jax_mesh.py to read the code", {})


register(Claim("C14", GROUP, "PyTorch DDP is more mature; JAX pmap/mesh data parallelism is \"cleaner\" to write.",
               C14_RULE, no_runs, c14_judge, timed=False))
