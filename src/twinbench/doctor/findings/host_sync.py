"""Device values read on the host inside the loop: ``jax-host-sync`` and ``torch-host-sync``."""

from __future__ import annotations

import math
import re

from twinbench.doctor.findings.base import (
    JAX_DOCS,
    TORCH_DOCS,
    Finding,
    Obs,
    _iter_ms,
    _per_step,
    _sites,
    finding,
)

# -- jax-host-sync -------------------------------------------------------------------------------------------
HOST_SYNC_WARN = 1.0  # device values read on the host per steady step: a finding from this many
HOST_SYNC_WAIT_SHARE = 0.05  # ... a warning when the host waits in them this share of the step, else info
READ_CHECK_MIN = 3  # iterations of each kind the host-read check needs before its verdict replaces the estimate


def _checked_cost(obs: Obs) -> tuple[str, str] | None:
    """Severity and evidence from the doctor's own A/B of the reads (``summary.read_check``): the loop's
    iteration while its reads of the step's outputs waited, against the same loop with those reads answered
    one step late. None when the check did not run or saw too few iterations."""
    check = obs.read_check
    if check is None:
        return None
    waited, deferred = check.waited_ms, check.deferred_ms
    if not waited or not deferred or min(check.waited_n, check.deferred_n) < READ_CHECK_MIN:
        return None
    gain = (waited - deferred) / waited
    # the noise of the two medians (from each kind's spread: a median's standard error is about 0.93 IQR/sqrt(n)):
    # a gain within twice that is not a measured gain
    se = math.hypot(*(0.93 * (iqr or 0.0) / math.sqrt(n) for iqr, n in
                      ((check.waited_iqr_ms, check.waited_n), (check.deferred_iqr_ms, check.deferred_n))))
    real = gain >= HOST_SYNC_WAIT_SHARE and waited - deferred > 2 * se
    verdict = (f"{100 * gain:.1f}% faster without the wait" if gain > 0 else
               f"no faster without the wait ({100 * -gain:.1f}% slower)")
    if gain >= HOST_SYNC_WAIT_SHARE and not real:
        verdict += f", within the noise of this run (+-{2 * se:.2f} ms: twice the medians' standard error)"
    return ("warning" if real else "info",
            f"; checked by the doctor: with these reads answered one step late (the device never waits for "
            f"them) on alternate blocks of steps, the iteration took {deferred:.2f} ms (median of "
            f"{check.deferred_n}) against {waited:.2f} ms (median of {check.waited_n}) as written: "
            f"{verdict} (warning from {100 * HOST_SYNC_WAIT_SHARE:.0f}%, else info"
            + ("; on a CPU backend the host's work between steps and XLA's threads share the cores, so "
               "dispatching ahead may gain nothing)" if gain < HOST_SYNC_WAIT_SHARE else ")"))


def _host_sync_cost(obs: Obs, seconds_key: str) -> tuple[str, str]:
    """Severity and evidence from the measured time the host spent in its reads (waiting for the device)."""
    iter_ms = _iter_ms(obs)
    if f"{seconds_key}:s" not in obs.per_step or not iter_ms:
        return "warning", " (warning from 1 per step; the wait could not be measured)"
    wait_ms = 1e3 * (_per_step(obs, f"{seconds_key}:s") or 0.0)
    share = wait_ms / iter_ms
    return ("warning" if share >= HOST_SYNC_WAIT_SHARE else "info",
            f"; measured cost: the host waited {wait_ms:.3f} ms per step in these reads, {100 * share:.1f}% of "
            f"the {iter_ms:.2f} ms steady iteration (mean, one step start to the next; warning from "
            f"{100 * HOST_SYNC_WAIT_SHARE:.0f}% of it, else info)")


LIB_CONVERSIONS = ("(int)", "(bool)", "(index)")  # a library reading a JAX index element by element


def _read_location(sites: dict[str, int]) -> str:
    """The busiest read site, without its conversion: ``your file:line `code` -> library file:line``."""
    top = next(iter(sites), "")
    return re.sub(r" \((\w+)\)$", "", top)


@finding(
    id='jax-host-sync',
    severity='warning / info',
    about='speed',
    threshold=">= 1 device value read on the host per step (`float`, `.item()`, printing...); a warning when what the reads cost the loop is >= 5% of the iteration, measured by the doctor's own A/B where the reads are of the step's outputs (the host-read check), else estimated",
    fix='by cause: a JAX array read element by element (`dataset[np.asarray(perm)]`); else keep losses on device, read every N steps, `jax.debug.print` inside `jit`',
    example='jax_host_sync',
)
def jax_host_sync(obs: Obs) -> Finding | None:
    """Threshold: >= 1 device value read on the host (float, .item(), print, bool) per step; a warning when
    the reads cost the loop >= 5% of the steady iteration, else info. The cost is the doctor's own A/B where it
    ran (reads of the step's scalar outputs answered one step late on alternate blocks of steps: the iteration
    with and without the wait, ``_checked_cost``); else the estimate: the time of each line's burst of reads
    less the part spent waiting for a step still running on the device, plus that wait where the device then
    sat idle between steps."""
    reads = _per_step(obs, "jax_host_reads")
    if reads is None or reads < HOST_SYNC_WARN:
        return None
    sites = obs.info.jax_host_read_sites
    iter_ms = _iter_ms(obs)
    span = _per_step(obs, "jax_host_read_span_s:s")
    # element-wise integer/bool reads, several per step: code (a library's, or yours) indexing with a JAX array
    elementwise = sum(c for k, c in sites.items() if k.endswith(LIB_CONVERSIONS))
    library_index = reads >= 4 and elementwise >= 0.5 * sum(sites.values())
    if span is None or not iter_ms or "jax_host_read_span_s:s" not in obs.per_step:
        severity, cost = _host_sync_cost(obs, "jax_host_read_s")
    else:
        span_ms = 1e3 * span
        blocked_ms = 1e3 * (_per_step(obs, "jax_host_read_blocked_s:s") or 0.0)
        host_ms = max(span_ms - blocked_ms, 0.0)
        split = obs.split
        idle_ms = (split.idle_mean_ms if split.idle_mean_ms is not None else split.idle_ms or 0.0) \
            if split and split.async_ else 0.0
        # the sync's lost overlap: the wait, up to the device's idle time between steps that the reads' own host
        # work does not already explain (the split counts that work as the host's, not as idle)
        overlap_ms = min(blocked_ms, idle_ms)
        lost_ms = host_ms + overlap_ms
        share = lost_ms / iter_ms
        severity = "warning" if share >= HOST_SYNC_WAIT_SHARE else "info"
        cost = (f"; measured cost: {span_ms:.2f} ms per step in these reads (from each line's first read to its "
                f"last, the library's work in between included), of which {blocked_ms:.2f} ms waited for the step "
                f"still running on the device (the step's own time) and {host_ms:.2f} ms was the host's work "
                f"while the device sat idle; with the sync's lost overlap ({overlap_ms:.2f} ms: the device's "
                f"other idle time between steps) the loop lost {lost_ms:.2f} ms per step, {100 * share:.1f}% of "
                f"the {iter_ms:.2f} ms steady iteration (mean, one step start to the next; warning from "
                f"{100 * HOST_SYNC_WAIT_SHARE:.0f}% of it, else info)")
    checked = _checked_cost(obs)
    if checked is not None:
        severity, cost = checked
    where = _read_location(sites)
    if library_index:
        title = f"{reads:.0f} device values read on the host every step: a JAX array is read element by element"
        fix = ("Index with NumPy, not with a JAX array (a library given one reads it element by element): batch = "
               "dataset[np.asarray(perm)] (or build the permutation with NumPy: perms = "
               "np.random.default_rng(seed).permutation(n)); each element of a JAX array read with int()/bool() "
               "is a separate device read and small dispatch.")
    else:
        title = f"{reads:.1f} device values read on the host every step: the loop waits for the device each time"
        if checked is not None and severity == "info":
            title += ", at no measured cost here"
        fix = ("Keep values on the device and read them rarely: losses.append(loss) in the loop and "
               "print(float(jnp.mean(jnp.stack(losses)))) every 100 steps or after it; inside jit use "
               "jax.debug.print; for early stopping, check every N steps.")
    return Finding(
        "jax-host-sync", severity, title,
        f"{reads:.1f} host reads per step ({_sites(sites)}); each one blocks until the value is computed, so "
        f"the next step cannot be dispatched ahead{cost}", fix,
        f"{JAX_DOCS}/async_dispatch.html", location=where)


# -- torch-host-sync ---------------------------------------------------------------------------------------------
@finding(
    id='torch-host-sync',
    severity='warning / info',
    about='speed',
    threshold='>= 1 tensor read on the host per step or >= 1 synchronising CUDA call per step; a warning when the measured wait is >= 5% of the step or on any untimed synchronising CUDA call, else info',
    fix="accumulate `loss.detach()` on device, read every N steps; reads inside a dataset's `__getitem__` are counted apart (alone: info)",
    example='torch_host_sync',
)
def torch_host_sync(obs: Obs) -> Finding | None:
    """Threshold: >= 1 tensor read on the host (.item(), float(), print) or CUDA sync per step in the loop's code.
    Reads made inside the DataLoader's fetch (a dataset's ``__getitem__``: often a library's, torchvision's
    ``int(self.targets[index])``) are counted apart: the loop's fix cannot remove them; alone they are info."""
    reads = _per_step(obs, "torch_host_reads")
    syncs = _per_step(obs, "cuda_syncs") or 0.0
    loader = _per_step(obs, "torch_loader_reads") or 0.0
    if reads is None or max(reads, syncs, loader) < HOST_SYNC_WARN:
        return None
    info = obs.info
    sites, loader_sites = info.torch_host_read_sites, info.torch_loader_read_sites
    in_loader = (f"; {loader:.1f} more reads per step inside the DataLoader's fetch, in the dataset's code "
                 f"({_sites(loader_sites)}): that is the input's work, which the fix below does not remove"
                 if loader >= HOST_SYNC_WARN else "")
    if max(reads, syncs) < HOST_SYNC_WARN:  # only the dataset reads: say where, and that the loop is not the cause
        loader_ms = 1e3 * (_per_step(obs, "torch_loader_read_s:s") or 0.0)
        top = _read_location(loader_sites)
        return Finding(
            "torch-host-sync", "info",
            f"{loader:.0f} tensor values read per step inside the DataLoader, by the dataset's own code",
            f"{loader:.1f} reads per step inside the DataLoader's fetch ({_sites(loader_sites)}), taking "
            f"{loader_ms:.2f} ms per step; the loop's own code reads {reads:.1f} per step (a finding from "
            f"{HOST_SYNC_WARN:g}); the dataset's __getitem__ converts its tensors one item at a time"
            + (": CPU tensors, no device sync" if not info.cuda else ""),
            "Nothing to change in the loop: these reads are in the dataset's code"
            + (f" ({top.split(' in ')[0]}, a library's)" if top and not top.startswith("/") else "")
            + ". If the input costs the loop (input-bound), convert the dataset to tensors once, before training "
            "(e.g. a TensorDataset of the pre-converted images and labels), so that no item is converted per step.",
            f"{TORCH_DOCS}/data.html", location=top)
    severity, cost = _host_sync_cost(obs, "torch_host_read_s")
    if syncs >= HOST_SYNC_WARN:  # synchronising CUDA calls inside torch are not timed: each drains the queue
        severity = "warning"
    return Finding(
        "torch-host-sync", severity,
        f"{max(reads, syncs):.1f} tensor values read on the host every step"
        + (": the GPU queue drains each time" if info.cuda else ""),
        f"{reads:.1f} host reads per step in the loop's code ({_sites(sites)}); {syncs:.1f} synchronising CUDA calls "
        f"per step (torch.cuda.set_sync_debug_mode, a warning from {HOST_SYNC_WARN:g} per step){cost}{in_loader}",
        "Accumulate on the device and read rarely: running = running + loss.detach() in the loop, "
        "print((running / n).item()) every 100 steps; avoid print(loss), float(loss), .tolist() and "
        "`if loss < x` in the loop.",
        f"{TORCH_DOCS}/generated/torch.cuda.set_sync_debug_mode.html", location=_read_location(sites))
