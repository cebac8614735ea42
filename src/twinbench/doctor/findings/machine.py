"""The machine itself: ``cpu-oversubscribed``, ``page-faults``."""

from __future__ import annotations

import os

from twinbench import host_malloc
from twinbench.doctor.findings.base import MIN_STEADY_STEPS, TORCH_DOCS, Finding, Obs, _iter_ms, finding
from twinbench.doctor.observations import Machine, ThreadCheck
from twinbench.doctor.thread_check import CHECK, free_cores
from twinbench.measure.page_faults import FAULTS_PER_STEP, KERNEL_SHARE, PAGE, costly, fault_share

# -- cpu-oversubscribed ---------------------------------------------------------------------------------------------
BUSY_INFO_SHARE = 0.10  # other processes keep this share of the cores busy during the steady steps: info
BUSY_WARN_SHARE = 0.25  # ... a warning from this share (2.5x the info line: the margin noise cannot cross),
# when the framework's threads and the others' load together ask for more cores than the machine has
THREADS_P = 0.05  # the thread check: the fixed blocks faster by a one-sided Mann-Whitney test at this level
THREADS_MIN = 4  # ... on at least this many iterations of each kind


def thread_ab(obs: Obs) -> tuple[bool, str] | None:
    """(confirmed, evidence) from the doctor's A/B of the threads fix (``thread_check.py``: blocks of the script's
    steps at torch.set_num_threads(fixed), against blocks as written), or None when it has too few iterations."""
    c = obs.thread_check or ThreadCheck()
    fig = c.figures()
    if fig is None or min(len(c.as_written_ms), len(c.fixed_ms)) < THREADS_MIN:
        return None
    from scipy.stats import mannwhitneyu

    written, fixed, spread = fig
    p = float(mannwhitneyu(c.as_written_ms, c.fixed_ms, alternative="greater").pvalue)
    confirmed = p < THREADS_P and written > fixed
    return confirmed, (
        f"; checked by the doctor: in this run, blocks of {c.block} steps with torch.set_num_threads({c.fixed}) "
        f"against blocks as written ({c.threads} threads; as written, fixed, fixed, as written; each block's first "
        f"step left out; block medians {', '.join(f'{b:.1f}' for b in c.block_ms)} ms): {fixed:.2f} ms a step "
        f"(median of {len(c.fixed_ms)}) against {written:.2f} ms as written (median of {len(c.as_written_ms)}), "
        f"a gain of {written - fixed:+.2f} ms +-{spread:.2f} (one-sided Mann-Whitney p = {p:.2g}; a warning at "
        f"p < {THREADS_P:g}, else info)" + ("" if confirmed else ": not confirmed by the A/B"))


@finding(
    id='cpu-oversubscribed',
    severity='warning / info',
    about='machine',
    threshold="other processes keep >= 10% of the cores busy during the steady steps (info); a warning from 25% when torch's threads plus that load ask for more cores than there are (threads of a framework the script only imports do not count); where torch's threads exceed the free cores (on an idle machine too) the doctor runs an A/B in the script's run (blocks of steps at `torch.set_num_threads(k)` against blocks as written: as written, fixed, fixed, as written), and then it is a warning only when the fixed blocks are faster at a one-sided Mann-Whitney p < 0.05, else info",
    fix='`torch.set_num_threads(k)` for the k free cores (the count the A/B ran); no JAX thread setting (one XLA thread made a public script slower); else an idle machine, or the jobs pinned apart',
    tested_by='tests/doctor/test_doctor_findings.py, test_doctor_timing.py',
    locate=False,
)
def cpu_oversubscribed(obs: Obs) -> Finding | None:
    """Threshold: other processes keep >= 10% of the cores busy during the steady steps (info); a warning from
    25% when torch's threads plus that load ask for more cores than there are. Only the threads of a framework the
    script ran count (``frameworks_used``), not one it merely imports. Once the script's threads fit the free
    cores (the fix applied) it is info, saying the other load is what is left. Where the doctor's thread check ran
    (``thread_check.py``: the script's steps at the fix's count against its steps as written, in the same run), the
    A/B decides: a warning when the fixed blocks are faster (``thread_ab``), else info with its figures."""
    m = obs.machine or Machine()
    cores, others = m.cores or 0, m.others_cores
    checked = thread_ab(obs)
    # more threads than cores is a finding on an idle machine too, where the script's own A/B confirmed it
    # (the corpus's 8 torch threads on 2 idle cores: 9.5 -> 3.3 ms a step); without an A/B, only a busy one
    confirmed = bool(checked and checked[0])
    if not cores or ((others is None or others < BUSY_INFO_SHARE * cores) and not confirmed):
        return None
    others = others or 0.0
    threads = obs.info.threads
    used = obs.frameworks_used
    if used:  # a framework the script only imports (a library imports both) runs no threads of its own
        threads = {fw: n for fw, n in threads.items() if fw in used}
    want = max(threads.values(), default=0)
    over = others + want > cores
    free = free_cores(cores, others)
    check = obs.thread_check
    if checked is not None and check is not None:
        free = check.fixed  # the count the A/B ran: the fix printed is the one it timed
    tdesc = ", ".join(f"{fw} {n} threads" for fw, n in threads.items()) or "threads unknown"
    if want and want <= free and not (checked and checked[0]):  # the script already asks for no more cores than are free: the threads fix is
        # applied (or not needed); what is still wrong is the other load, and the timing it spoils
        return Finding(
            "cpu-oversubscribed", "info",
            f"the machine is busy: other processes kept {others:.1f} of {cores} cores busy while the steps ran",
            f"measured over {m.window_s:.1f} s of steady steps (/proc/stat against this process's CPU "
            f"time): other processes {others:.2f} cores, this script {m.own_cores:.2f} cores, {cores} "
            f"cores in all; the frameworks already use no more threads than the {free} free core(s) ({tdesc}), so "
            "the script does not oversubscribe the machine, but the others' load still slows it and makes any "
            "timing of this run unreliable",
            "Nothing to change in the script: run it when the machine is idle, or pin it and the other jobs to "
            "separate cores (taskset -c), and time it again.",
            f"{TORCH_DOCS}/generated/torch.set_num_threads.html")
    # torch's thread pool is what a busy machine slows far more than its share (its fix confirmed by A/B on a
    # public script); XLA's one-thread setting made one slower in every A/B round, so no JAX fix is printed, and
    # JAX's threads alone make this info
    torch_over = threads.get("torch", 0) > free
    severity = "warning" if over and torch_over and others >= BUSY_WARN_SHARE * cores else "info"
    if checked is not None:  # the A/B decides where it ran
        severity = "warning" if checked[0] else "info"
    elif torch_over and CHECK in obs.info.skipped:
        checked = (False, f"; not checked by an A/B: {obs.info.skipped[CHECK]}")
    fix = (f"Use the cores that are free (about {free} here): torch.set_num_threads({free}) at the top of the "
           f"script (or OMP_NUM_THREADS={free} in its environment); then run the doctor again. "
           if torch_over else "")
    fix += (("Or run" if fix else "Run") + " when the machine is idle, or pin the other jobs to other cores (taskset -c)"
            + (" (for JAX, no thread setting is suggested: one XLA thread made a script slower, not faster)"
               if "jax" in threads else "") + ".")
    busy = others >= BUSY_INFO_SHARE * cores
    return Finding(
        "cpu-oversubscribed", severity,
        f"the machine is busy: other processes kept {others:.1f} of {cores} cores busy while the steps ran" if busy
        else f"torch runs {threads.get('torch', want)} threads on {cores} cores: they wait for each other",
        f"measured over {m.window_s:.1f} s of steady steps (/proc/stat against this process's CPU time): "
        f"other processes {others:.2f} cores, this script {m.own_cores:.2f} cores, {cores} cores in all; "
        f"the frameworks use {tdesc}, so {others + want:.1f} cores are asked for (info from "
        f"{100 * BUSY_INFO_SHARE:.0f}% of the cores busy elsewhere; warning from {100 * BUSY_WARN_SHARE:.0f}% when "
        f"more cores are asked for than there are); threads that wait for each other slow down far more than "
        f"their share, and any timing of this run is unreliable" + (checked[1] if checked else ""),
        fix, f"{TORCH_DOCS}/generated/torch.set_num_threads.html")


# -- page-faults ----------------------------------------------------------------------------------------------------
MALLOC_DOC = "https://sourceware.org/glibc/manual/latest/html_node/Memory-Allocation-Tunables.html"


@finding(
    id='page-faults',
    severity='warning, info on a busy machine',
    about='speed',
    threshold=">= 1,000 fresh pages faulted a step, >= 10% of the CPU time in the kernel, and those faults at one fault's measured cost (bounded by the kernel's share) >= 10% too, with nothing compiled in the steps",
    fix='nothing in the code: `GLIBC_TUNABLES=glibc.malloc.hugetlb=1` (or freed memory kept where there are no huge pages): the doctor prints the line that applies',
    tested_by='tests/doctor/test_doctor_findings.py; public scripts in benchmarks/doctor_pairs.py',
    locate=False,
)
def page_faults(obs: Obs) -> Finding | None:
    """Threshold (measure/page_faults.py): over the steady steps the script faulted at least 1,000 fresh pages a
    step, spent at least 10% of its CPU time in the kernel, and, where the observations carry one fault's cost
    measured on the machine (``fault_us``), those faults at that cost are 10% of its CPU time too (the kernel's
    time may be something else's, and a few thousand faults a step can cost little); nothing compiled in the
    steps: a warning; info where other processes kept 10% of the cores busy or more (on a busy machine a script
    can fault many times more pages than on an idle one, not its own allocations alone: the fix says to time it). XLA:CPU's temporary buffers, freed to the kernel after every execution by glibc and faulted in again
    by the next, are the case it was built on (benchmarks/RESULTS.md, "Where a third of JAX's CPU step went")."""
    m = obs.machine or Machine()
    rate, share = m.page_faults_per_s, m.kernel_cpu_share
    step_ms = _iter_ms(obs)
    if rate is None or share is None or not step_ms or obs.steady_steps < MIN_STEADY_STEPS:
        return None
    per_step = rate * step_ms / 1e3
    own = fault_share(rate, m.own_cores, m.fault_us, share)
    if not costly(share, per_step, own):
        return None
    # on a busy machine a script can fault more than on an idle one (not its own allocations alone): said, at
    # info, to be measured again idle (a public pair's faults on a busy machine were real: its fix's A/B gained)
    busy = (m.others_cores or 0) >= BUSY_INFO_SHARE * (m.cores or 1)
    if obs.per("compiles") or obs.per("compile_s:s"):  # a compiler at work in the steady steps allocates
        return None  # and frees too: its faults are the recompiles' (jax-recompile, torch-recompile say the fix)
    mode, current = host_malloc.thp_mode(), os.environ.get(host_malloc.ENV, "")
    has_huge = host_malloc.HUGE_PAGES[0] in current
    if host_malloc.thp(mode) and not has_huge:  # the first thing to try: no memory cost
        extra = host_malloc.HUGE_PAGES
        how = (f"glibc then maps memory in 2 MiB pages (transparent huge pages, here in mode '{mode}'): 512 times "
               "fewer faults, the same memory")
    else:  # no huge pages here, or the script has them and still faults: keep freed memory, at a memory cost
        extra = host_malloc.KEEP_FREED
        how = ("glibc then keeps what a step frees for the next one: no faults, but the process keeps the most it "
               "ever held (" + ("the script already asks for huge pages" if has_huge
                                else "this kernel gives no transparent huge pages") + ")")
    tunables = ":".join([*filter(None, [current]), *extra])
    return Finding(
        "page-faults", "info" if busy else "warning",
        f"the steps fault in {per_step * PAGE / 2**20:,.0f} MiB of fresh memory each: {share:.0%} of the script's "
        "CPU time goes to the kernel",
        f"over {m.window_s:.1f} s of steady steps the process took {rate:,.0f} page faults a second, "
        f"{per_step:,.0f} a step of {step_ms:.1f} ms (about {per_step * PAGE / 2**20:,.0f} MiB of 4 KiB pages), and "
        f"{share:.0%} of its CPU time was the kernel's"
        + (f", of which the faults at {m.fault_us:.1f} µs each (measured on this machine) are "
           f"{own:.0%}"
           if own is not None else "")
        + f" (warning from {FAULTS_PER_STEP:,} faults a step and {KERNEL_SHARE:.0%} in the kernel, for the faults"
        f" alone where their cost is measured); memory the allocator returns to the kernel after a step (XLA:CPU's "
        "temporary buffers, large tensors) is mapped and zeroed again by the next",
        f"Nothing in the code: start the script with GLIBC_TUNABLES={tunables} in its environment (glibc reads it "
        f"at start-up; {how}); then run the doctor again: this finding should be gone and the step shorter."
        + (f" Measured on a busy machine (other processes kept {m.others_cores or 0:.1f} of "
           f"{m.cores or 0} cores busy): time the step with and without it, or run the doctor again when "
           "the machine is idle, before keeping it." if busy else ""),
        MALLOC_DOC)
