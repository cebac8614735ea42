"""Runs as submitit jobs: submit, poll, collect into results.jsonl as jobs end, cancel on Ctrl-C.

``run_job`` is what a job executes (on every task of it); ``submit_many`` is the submitting side, called by
``runner.run_many`` when a launcher other than the default is chosen.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from twinbench.launch import JobOptions, JobShape, job_spec, shape
from twinbench.record import Record, append_jsonl, for_spec
from twinbench.spec import RunSpec

POLL_S = 1.0
#: submitit/SLURM states of a job that ended without a result, and how the failed row says it
ENDED_BADLY = {"FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
               "DEADLINE", "INTERRUPTED"}


def run_job(spec_json: str, timeout: float,
            run_one: Callable[[RunSpec, float], Record]) -> Record:
    """Inside a job: this task's place in a multi-host run from SLURM, then the run through the runner
    (``run_one``: ``runner.run_one``, passed in by the runner, which imports this module, not the reverse).
    ``spec_json``: the spec as the worker reads it (``RunSpec.to_dict``, versioned), JSON."""
    from twinbench.distributed.cluster import slurm_identity

    spec = RunSpec.from_dict(json.loads(spec_json))
    ident = slurm_identity()
    if spec.launch.num_processes > 1 and ident is not None:
        spec = spec.evolve(process_id=ident.process_id, coordinator=ident.coordinator)
    record = run_one(spec, timeout)
    record.launch.job_nodes = list(ident.hosts) if ident else [socket.gethostname()]
    return record


def executor(opts: JobOptions, folder: Path, js: JobShape, timeout: float) -> Any:
    """The submitit executor of one job shape: LocalExecutor for ``local``, SlurmExecutor for ``slurm``."""
    import submitit

    if opts.launcher == "local":
        ex = submitit.LocalExecutor(folder=folder)
        ex.update_parameters(timeout_min=max(int(timeout / 60) + 1, 1), tasks_per_node=js.tasks_per_node,
                             nodes=js.nodes)
        return ex
    ex = submitit.SlurmExecutor(folder=folder)
    ex.update_parameters(**slurm_parameters(opts, js))
    return ex


#: one of submitit's SlurmExecutor parameters: a count, a name, or sbatch's own options (``--KEY=VALUE``, a bare
#: ``--KEY`` as True)
SlurmValue = int | str | dict[str, str | bool]


def slurm_parameters(opts: JobOptions, js: JobShape) -> dict[str, SlurmValue]:
    """What ``sbatch`` is asked for (submitit's SlurmExecutor parameters)."""
    params: dict[str, SlurmValue] = {"nodes": js.nodes, "ntasks_per_node": js.tasks_per_node, "time": opts.time_min,
                              "job_name": "twinbench", "signal_delay_s": 30}
    if js.gpus_per_node:
        params["gpus_per_node"] = js.gpus_per_node
    if opts.cpus_per_task:
        params["cpus_per_task"] = opts.cpus_per_task
    for key, value in (("partition", opts.partition), ("account", opts.account), ("qos", opts.qos)):
        if value:
            params[key] = value
    extra: dict[str, str | bool] = {k.replace("-", "_"): (v or True) for k, v in opts.slurm_options}
    extra.setdefault("exclusive", True)  # one run a node: two measurements never share one
    params["additional_parameters"] = extra
    return params


def describe(spec: RunSpec, opts: JobOptions, timeout: float) -> str:
    """``--dry-run``: the job a run would be (nodes, tasks, GPUs, time, what it runs)."""
    js = shape(spec, opts)
    run = job_spec(spec, js)
    where = "this machine (submitit LocalExecutor)" if opts.launcher == "local" else "sbatch (submitit SlurmExecutor)"
    text = (f"{spec.label()} [{spec.run_id()}]: {where}: {js.nodes} node(s), {js.tasks_per_node} task(s) per node, "
            f"{js.gpus_per_node} GPU(s) per node, time {opts.time_min} min; runs "
            f"twinbench.launch.jobs.run_job(spec) -> runner.run_one: devices {run.launch.devices}, "
            f"{run.launch.num_processes} process(es)")
    if opts.launcher == "slurm":
        params = slurm_parameters(opts, js)
        text += "; sbatch " + " ".join(f"--{k.replace('_', '-')}={v}" for k, v in params.items()
                                        if k not in ("additional_parameters", "signal_delay_s"))
        text += "".join(f" --{k.replace('_', '-')}" + ("" if v is True else f"={v}")
                        for k, v in params["additional_parameters"].items())
    return text


@contextlib.contextmanager
def _stderr_to(path: Path, active: bool) -> Iterator[None]:
    """While ``active``: this process's stderr (file descriptor 2, which a child started now inherits) goes to
    ``path``. submitit's local controller is such a child; on Ctrl-C it would print its own KeyboardInterrupt
    traceback among twinbench's one-line message."""
    if not active:
        yield
        return
    import os
    import sys

    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def private_folder(parent: Path) -> Path:
    """A new folder of this command's own for submitit's files, under ``parent`` (both private to the user).

    submitit keeps each job as pickles (the function and its arguments, then its result), and loading a pickle
    runs code: so ``parent`` must be the user's own and not writable by others (made 0700), and each command
    submits into a fresh subfolder it created itself (0700), so the only pickles it ever loads are the ones its
    own jobs wrote in this run, never one left or placed there before.
    """
    import os
    import tempfile

    from twinbench.spec import SpecError

    try:
        parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = parent.stat()
        if st.st_uid != os.getuid():
            raise SpecError(f"{parent}: owned by another user; submitit's pickles run code when loaded, so "
                            "twinbench keeps its jobs only in a folder of yours (choose another --out)")
        os.chmod(parent, 0o700)
        return Path(tempfile.mkdtemp(prefix=time.strftime("%Y%m%d-%H%M%S-"), dir=parent))  # mode 0700
    except OSError as e:
        raise SpecError(f"{parent}: cannot make the jobs folder ({e.strerror or e})") from None


def _failed(spec: RunSpec, job: Any, state: str, why: str) -> Record:
    return for_spec(spec, "failed", error=f"job {job.job_id} {state}: {why}"[:500], launcher_state=state,
                    job_id=str(job.job_id))


def submit_many(specs: list[RunSpec], out_dir: Path, timeout: float, opts: JobOptions,
                done: dict[str, Record], on_start: Callable[[RunSpec], None],
                on_done: Callable[[RunSpec, Record], None], cache_root: Callable[[RunSpec], Path],
                run_one: Callable[[RunSpec, float], Record],
                save: Callable[[Path, Record], None] = lambda p, r: append_jsonl(p, r.to_dict())) -> list:
    """Submit every spec not in ``done`` as a job (at most ``max_parallel`` at once; one at a time locally),
    append each record to results.jsonl as its job ends; Ctrl-C cancels the jobs not finished. Each job runs
    :func:`run_job` with ``run_one`` (the runner's)."""
    path = out_dir / "results.jsonl"
    folder = private_folder(Path(opts.folder) if opts.folder else out_dir / "jobs")
    parallel = 1 if opts.launcher == "local" or any(s.host.compile_cache == "warm" for s in specs) else opts.max_parallel
    records: dict[str, Record] = {}
    waiting = [s for s in specs if s.run_id() not in done]
    running: list[tuple[RunSpec, Any, Path | None]] = []
    try:
        while waiting or running:
            while waiting and len(running) < parallel:
                spec = waiting.pop(0)
                on_start(spec)
                js = shape(spec, opts)
                cold = None
                run = job_spec(spec, js)
                if run.host.compile_cache == "cold":  # a fresh, empty cache directory of its own (on shared storage)
                    cold = cache_root(run) / f"cold-job-{uuid.uuid4().hex[:8]}"
                    cold.mkdir(parents=True)
                    run = run.evolve(cache_dir=str(cold))
                with _stderr_to(folder / "controller.err", opts.launcher == "local"):
                    job = executor(opts, folder, js, timeout).submit(run_job, json.dumps(run.to_dict()), timeout, run_one)
                if opts.launcher == "local":
                    # submitit waits up to 15 s for the result file of a job that ended without one (a slow
                    # shared file system); on this machine's own disk a dead job has none to wait for
                    job._results_timeout_s = 1
                running.append((spec, job, cold))
            time.sleep(POLL_S if opts.launcher != "local" else 0.2)  # a local job's state is a process's
            for item in list(running):
                spec, job, cold = item
                if not job.done():
                    continue
                running.remove(item)
                if cold is not None:
                    shutil.rmtree(cold, ignore_errors=True)
                record = _collect(spec, job)
                record.launch.launcher, record.launch.job_id = opts.launcher, str(job.job_id)
                save(path, record)
                records[spec.run_id()] = record
                on_done(spec, record)
    except BaseException:  # Ctrl-C, SIGTERM: cancel what is still queued or running, keep what finished
        for _, job, _cold in running:
            job.cancel(check=False)
        end = time.time() + 30
        while any(not job.done() for _, job, _ in running) and time.time() < end:
            time.sleep(0.2)  # a cancelled job stops its worker (runner.run_one kills it) before we return
        for _, _, cold in running:
            if cold is not None:
                shutil.rmtree(cold, ignore_errors=True)
        raise
    return [records.get(s.run_id()) or done[s.run_id()] for s in specs if s.run_id() in records or s.run_id() in done]


def _collect(spec: RunSpec, job: Any) -> Record:
    """The record a finished job returned (task 0's), or a failed row with the job's state and reason."""
    state = str(job.state).upper()
    try:
        result = job.results()[0] if job.num_tasks > 1 else job.result()
    except Exception as e:  # the job died: killed, preempted, out of memory, node failure, timeout
        if state not in ENDED_BADLY:
            state = "FAILED"
        first = (str(e).strip().splitlines() or [type(e).__name__])
        why = next((x for x in reversed(first) if x.strip()), first[0])
        return _failed(spec, job, state, why.strip())
    return result
