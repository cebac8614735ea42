"""Waiting for the next batch: ``input-bound``."""

from __future__ import annotations

from twinbench.doctor.findings.base import MIN_STEADY_STEPS, TORCH_DOCS, Finding, Obs, _per_step

# -- input-bound ----------------------------------------------------------------------------------------------------
INPUT_WAIT_SHARE = 0.20  # of each steady iteration spent waiting for the next batch
INPUT_MIN_MS = 1.0  # per iteration: a shorter wait between steps is the loop's own Python, not its input


def _input_wait(obs: Obs) -> tuple[float, float, str] | None:
    """(wait ms, iteration ms, the split as evidence) per steady iteration, or None if not measurable."""
    if obs.get("steady_steps", 0) < MIN_STEADY_STEPS:
        return None
    split = obs.get("split")
    if not split:  # no step end known: the DataLoader's wait against the time between step starts
        wait, step_ms = _per_step(obs, "data_wait_s:s"), obs.get("step_ms")
        if wait is None or not step_ms:
            return None
        return wait * 1e3, step_ms, (f"{wait * 1e3:.1f} ms per step waiting for the next batch of a "
                                     f"{step_ms:.1f} ms step (DataLoader iterator)")
    it, step, data, host = split["iter_ms"], split["step_ms"], split["data_ms"], split["host_ms"]
    head = f"per iteration (medians over {split['iterations']} steady iterations, {it:.2f} ms): "
    if split.get("async"):  # the device's idle time: from the step's results being ready to the next call
        wait = split.get("idle_ms", max(it - step - host, 0.0))
        return wait, it, (
            head + f"{wait:.2f} ms the device waited for the host between steps (the next batch, or other Python "
            f"work of the loop; DataLoader next: {data:.2f} ms), {step:.2f} ms the step from its call to its "
            f"results being ready (block_until_ready on its output, in the doctor's watcher thread, so the "
            f"loop keeps its asynchronous dispatch), {split.get('call_tail_ms', 0.0):.2f} ms the step call's own "
            f"Python after its results were ready (dispatch, nnx.jit's graph merge), {host:.2f} ms known host "
            f"work (eager ops, compilation), {split.get('descheduled_ms', 0.0):.2f} ms the loop's thread waited "
            f"for a CPU other processes held")
    gap = split.get("to_forward_ms", 0.0) if obs.get("step_kind") == "torch-optimizer" else 0.0
    wait = max(data, gap)
    where = (f"the optimizer step's end to the next forward pass: the next batch from any Python iterator "
             f"(DataLoader next: {data:.2f} ms), zero_grad, the loop's Python; host reads left out"
             if gap > data else "DataLoader next")
    return wait, it, (head + f"{wait:.2f} ms waiting for the next batch ({where}), {step:.2f} ms in the "
                      f"step ({obs.get('step_signal') or obs.get('step_kind')}), {max(it - wait - step, 0.0):.2f} "
                      f"ms the rest (forward, backward, the loop's Python)")


def input_bound(obs: Obs) -> Finding | None:
    """Threshold: the loop waits for its next batch > 20% of each steady iteration (and >= 1 ms).

    For an asynchronous step (JAX jit) the wait is the device's idle time between steps; for a synchronous
    one (PyTorch), the DataLoader's ``next``, or with an optimizer the time from its step's end to the next
    forward pass (a batch from any Python iterator)."""
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
        "Load ahead of the training step: DataLoader(ds, batch_size=B, num_workers=4, pin_memory=True, "
        "persistent_workers=True, prefetch_factor=2); move per-sample work (decoding, tokenising) offline or "
        "into the workers; a Python generator: tokenise once ahead of training, or produce batches in "
        "background workers (grain.DataLoader with worker_count, or a thread feeding a queue); for JAX, "
        "prefetch batches to the device (jax.device_put one step ahead).",
        f"{TORCH_DOCS}/data.html#multi-process-data-loading")
