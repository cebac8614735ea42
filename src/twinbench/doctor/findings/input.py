"""Waiting for the next batch: ``input-bound``."""

from __future__ import annotations

from twinbench.doctor.findings.base import MIN_STEADY_STEPS, TORCH_DOCS, Finding, Obs, _per_step, finding
from twinbench.doctor.observations import InputClock, Machine, Medians, Split, typed

# -- input-bound ----------------------------------------------------------------------------------------------------
INPUT_WAIT_SHARE = 0.20  # of each steady iteration spent waiting for the next batch
INPUT_MIN_MS = 1.0  # per iteration: a shorter wait between steps is the loop's own Python, not its input


def _input_wait(obs: Obs) -> tuple[float, float, str] | None:
    """(wait ms, iteration ms, the split as evidence) per steady iteration, or None if not measurable."""
    if obs.steady_steps < MIN_STEADY_STEPS:
        return None
    split = obs.split
    if not split:  # no step end known: the DataLoader's wait against the time between step starts
        wait, step_ms = _per_step(obs, "data_wait_s:s"), obs.step_ms
        if wait is None or not step_ms:
            return None
        return wait * 1e3, step_ms, (f"{wait * 1e3:.1f} ms per step waiting for the next batch of a "
                                     f"{step_ms:.1f} ms step (DataLoader iterator)")
    med = split.medians or Medians()  # robust to one slow batch; an older record has the central means only

    def pick(median: float | None, mean: float | None) -> float | None:
        return mean if median is None else median

    it, data = pick(med.it, split.iter_ms) or 0.0, pick(med.data_raw, split.data_ms) or 0.0
    step, host = pick(med.step, split.step_ms) or 0.0, pick(med.host, split.host_ms) or 0.0
    idle, gap_ms = pick(med.idle, split.idle_ms), pick(med.to_forward, split.to_forward_ms) or 0.0
    head = f"per iteration (medians over {split.iterations} steady iterations, {it:.2f} ms): "
    if split.async_:  # the device's idle time: from the step's results being ready to the next call
        wait = idle if idle is not None else max(it - step - host, 0.0)
        return wait, it, (
            head + f"{wait:.2f} ms the device waited for the host between steps (the next batch, or other Python "
            f"work of the loop; DataLoader next: {data:.2f} ms), {step:.2f} ms the step from its call to its "
            f"results being ready (block_until_ready on its output, in the doctor's watcher thread, so the "
            f"loop keeps its asynchronous dispatch), {split.call_tail_ms:.2f} ms the step call's own "
            f"Python after its results were ready (dispatch, nnx.jit's graph merge), {host:.2f} ms known host "
            f"work (eager ops, compilation), {split.descheduled_ms:.2f} ms the loop's thread waited "
            f"for a CPU other processes held")
    gap = gap_ms if obs.step_kind == "torch-optimizer" else 0.0
    wait = max(data, gap)
    if med.input_own is not None:  # less the loop thread's wait for a CPU others held (a busy machine is not input)
        wait = min(wait, med.input_own)
    where = (f"the optimizer step's end to the next forward pass: the next batch from any Python iterator "
             f"(DataLoader next: {data:.2f} ms), zero_grad, the loop's Python; host reads and the time the loop's "
             "thread waited for a CPU other processes held left out"
             if gap > data else "DataLoader next")
    return wait, it, (head + f"{wait:.2f} ms waiting for the next batch ({where}), {step:.2f} ms in the "
                      f"step ({obs.step_signal or obs.step_kind}), {max(it - wait - step, 0.0):.2f} "
                      f"ms the rest (forward, backward, the loop's Python)")


INPUT_GAIN = 0.20  # the input check: the loop's iteration this much slower than the step on a pre-built batch
INPUT_P = 0.01  # ... and the loop slower by a one-sided Mann-Whitney test at this level (not the load's noise)
INPUT_CHECK_MIN = 8  # calls of the step on a pre-built batch the input check needs before its verdict decides


def _checked(obs: Obs) -> tuple[bool, float, str] | None:
    """(input-bound, the share of the iteration lost, evidence) from the doctor's A/B (``summary.input_ab``), or
    None when it did not run on enough calls to decide. On a CPU backend it compares CPU time (the loop's Python and
    XLA's threads share the cores: the input's cost is the cores it takes, and a busy machine stretches wall time
    on both sides unevenly), on an accelerator wall time (the device's wait)."""
    ab = obs.input_check
    cpu_backend = obs.info.backend == "cpu"
    if ab is None:
        return None
    clock = "cpu" if cpu_backend and ab.cpu is not None else "wall"
    m = ab.cpu if clock == "cpu" else ab.wall
    if ab.replays < INPUT_CHECK_MIN or not m:
        return None
    loop, less, pre = m.loop_ms, m.loop_less_known_ms, m.prebuilt_ms
    lost = max(less - pre, 0.0)
    # a loop whose reads of the step's outputs cost it (jax-host-sync's own A/B) is not input-bound by that cost
    rc = obs.read_check
    if clock == "wall" and rc is not None and rc.waited_ms and rc.deferred_ms:
        lost = max(lost - max(rc.waited_ms - rc.deferred_ms, 0.0), 0.0)
    split = obs.split or Split()
    # of the loop's work between calls, the part in JAX's own code (operations dispatched outside jit: indexing a
    # device array, conversions) is not input work: jax-eager-ops' ground; only the rest counts here
    jax_share = split.between_jax_share or 0.0
    # the loop's own work runs between its calls: its cost is at most the time (CPU time, on a CPU backend) the
    # loop's thread spent there; the rest of the difference is the call's (the doctor's wrapper, nnx.jit)
    cap = split.between_cpu_ms if clock == "cpu" else split.between_ms
    # ... and at most the CPU time the sampler saw it spend in the script's own code (the doctor's bookkeeping
    # around each call, which a busy machine stretches, is in the thread's time between calls but not the script's)
    seen = split.between_sampled_ms
    if seen is not None and clock == "cpu":
        cap = seen if cap is None else min(cap, seen)
    lost_all = min(lost, cap) if cap is not None else lost
    lost = lost_all * (1.0 - jax_share)
    share = lost / loop if loop else 0.0
    p = p_value(m)
    bound = share >= INPUT_GAIN and p < INPUT_P and lost >= INPUT_MIN_MS
    sites = split.between_sites
    where = ("; where the loop's thread spent its CPU time between step calls (sampled, ms per iteration): "
             + "; ".join(f"{s} {ms:.2f} ms" for s, ms in sites.items())) if sites else ""
    between = (f"; the loop's thread ran {split.between_cpu_ms:.2f} ms of CPU between calls "
               f"({split.between_ms or 0.0:.2f} ms from a call's return to the next call)"
               if split.between_cpu_ms is not None else "")
    what = "of the process's CPU time" if clock == "cpu" else ""
    wall = ab.wall
    evidence = (
        f"checked by the doctor: {ab.blocks} times in the run, after one of the loop's step calls, it called the "
        f"compiled step on the batch already built, {ab.replays} calls in all, nothing of the loop in between: "
        f"{pre:.2f} ms {what} per step (median; per block: {', '.join(f'{b:.1f}' for b in m.block_ms)}) "
        f"against {loop:.2f} ms {what} per iteration as written (median of {ab.iterations} steady iterations; "
        f"{less:.2f} ms less the host work named elsewhere: eager ops, compilation, host reads, nnx.jit's graph); "
        f"the loop's own work between calls costs {lost_all:.2f} ms per iteration"
        + (f", of which {100 * jax_share:.0f}% ran in JAX's own code (operations dispatched outside jit, sampled: "
           f"not input)" if jax_share >= 0.05 else "")
        + f"; its input work (the next batch, ...) {lost:.2f} ms, {100 * share:.0f}% of the iteration (one-sided Mann-Whitney p = {p:.2g}; a warning from "
        f"{100 * INPUT_GAIN:.0f}% of the iteration at p < {INPUT_P:g})"
        + ("" if bound else ": not input-bound")
        + (f"; wall time: {wall.prebuilt_ms:.2f} ms per step on the pre-built batch against {wall.loop_ms:.2f} "
           f"ms per iteration as written" if clock == "cpu" and wall else "")
        + between + where
        + ("; on a CPU backend the loop's Python and XLA's threads share the cores, so input work slows the step "
           "itself instead of leaving the device idle: its cost is the CPU time it takes" if cpu_backend else ""))
    return bound, share, evidence


def p_value(m: InputClock) -> float:
    """The one-sided Mann-Whitney p of one clock of the input check (the loop's iterations, less the host work named
    elsewhere, slower than the step on a pre-built batch), from the samples ``summary.input_ab`` gave; a
    measurement that carries its p already keeps it."""
    if m.p is not None:
        return m.p
    from scipy.stats import mannwhitneyu

    return float(mannwhitneyu(m.loop_less_known_samples_ms, m.prebuilt_samples_ms, alternative="greater").pvalue)


def _free_cores(obs: Obs) -> float | None:
    """Cores neither the script nor other processes kept busy during the steady steps (None: not measured)."""
    m = obs.machine or Machine()
    if not m.cores:
        return None
    return m.cores - (m.others_cores or 0.0) - (m.own_cores or 0.0)


def input_fix(obs: Obs) -> str:
    """The fix for an input-bound loop: background workers only where cores are free for them (a worker on a busy
    or small machine takes its core from the step); else work the loop need not do every step."""
    obs = typed(obs)  # also called on its own (byo's advice, tests)
    free = _free_cores(obs)
    cores = (obs.machine or Machine()).cores
    ahead = ("Do the input work once, before the loop, not every step: tokenise or decode the whole dataset ahead "
             "of training and keep it as arrays (np.save / a memory-mapped file), or convert the dataset to "
             "tensors once (a TensorDataset of pre-converted images instead of a per-item transform); make "
             "per-item transforms cheaper (vectorised over the batch, not per sample in Python).")
    if free is None or free < 1.5:
        busy = (f"this machine has {cores} cores and {max(free, 0.0):.1f} free during the steps"
                if free is not None else "the machine's free cores were not measured")
        return (ahead + f" Background loading (DataLoader num_workers, a prefetch thread) needs free cores: {busy}, "
                "so a worker would take its core from the step.")
    workers = max(1, min(4, int(free)))
    return (ahead + f" Or load ahead of the step in background workers ({free:.1f} cores were free during the "
            f"steps): DataLoader(ds, batch_size=B, num_workers={workers}, persistent_workers=True, "
            "prefetch_factor=2); for a Python generator, grain.DataLoader with worker_count, or a thread feeding a "
            "queue; for JAX, jax.device_put the next batch one step ahead.")


@finding(
    id='input-bound',
    severity='warning',
    about='speed',
    threshold="for a jitted JAX step, the doctor's input check (an A/B: the loop as written against the step called on a batch already built) finds the loop's own work >= 20% of the iteration at a one-sided Mann-Whitney p < 0.01; elsewhere the loop waits for its next batch > 20% of each steady iteration (and >= 1 ms)",
    fix='do the input work once before the loop (tokenise ahead, a dataset converted to tensors once); background workers only where the steps left cores free',
    example='input_bound',
)
def input_bound(obs: Obs) -> Finding | None:
    """For an asynchronous step (JAX jit) the doctor's A/B decides where it ran (``_checked``): the loop's
    iteration against the step called back to back on a batch already built, a warning when the loop is >= 20%
    slower for its own work between calls (and >= 1 ms). Where it did not run, the threshold: the loop waits for
    its next batch > 20% of each steady iteration (and >= 1 ms): for an asynchronous step the device's idle time
    between steps; for a synchronous one (PyTorch), the DataLoader's ``next``, or with an optimizer the time from
    its step's end to the next forward pass (a batch from any Python iterator)."""
    checked = _checked(obs)
    if checked is not None:
        bound, share, evidence = checked
        if not bound:
            return None
        return Finding(
            "input-bound", "warning",
            f"the loop's work between steps (its input) costs {100 * share:.0f}% of each iteration",
            evidence, input_fix(obs), f"{TORCH_DOCS}/data.html#multi-process-data-loading")
    measured = _input_wait(obs)
    if measured is None:
        return None
    wait, it, evidence = measured
    share = wait / it if it else 0.0
    if share <= INPUT_WAIT_SHARE or wait < INPUT_MIN_MS:
        return None
    return Finding(
        "input-bound", "warning",
        f"the loop waits for its input {100 * share:.0f}% of the time",
        f"{evidence}; {100 * share:.0f}% of the iteration waiting for input (warning above "
        f"{100 * INPUT_WAIT_SHARE:.0f}% of the iteration and from {INPUT_MIN_MS:g} ms)",
        input_fix(obs), f"{TORCH_DOCS}/data.html#multi-process-data-loading")
