"""The suite's two tiers, and the clock that prints what a run of it cost.

``make check`` runs the quick tier: ``pytest -m "not heavy"``, every test that starts no Python process (no
twinbench worker, no torchrun, no CLI or script in a subprocess) and compiles for a few seconds at most: about
two thirds of the tests for a seventh of the suite's CPU time (92 of ~730 CPU-seconds, ruff included, when the
lists were made). ``make test`` runs everything (what CI runs).

A test is ``heavy`` when it is marked ``slow`` (over ~20 s), when its file is in :data:`HEAVY_FILES`, or when it
is in :data:`HEAVY_TESTS` (a heavy test of a file whose other tests are quick); tests/conftest.py adds the marker
at collection. The lists come from one run of the whole suite that recorded, per test, the processes it started
and its CPU seconds (``TWINBENCH_TEST_COSTS=DIR pytest ...``, then ``python tests/tiers.py DIR``): a test that
started any process or used :data:`HEAVY_CPU_S` of CPU or more in the pytest process (a model compiled there) is
heavy; so is a whole file when half its tests or more are, or when its tests share a fixture that starts a
process. A run that selects ``not heavy`` keeps the lists honest: a test that starts a Python process there
fails, naming the command and this file, and the tests of the quick tier that took longer than :data:`QUICK_S`
are listed at the end (listed, not failed: a test never asserts speed).

The clock: at the end of every run the controller prints its CPU seconds: user + sys of the pytest process and of
every process it waited for, with theirs (``getrusage(RUSAGE_CHILDREN)``): xdist's workers are its children and
have exited by then, and each worker waited for the runs, torchrun ranks and scripts its tests started. What no
one waited for (a daemon a test left running) is not counted. The figure does not depend on how busy the host
was, as the wall time does (the host's speed drifts by a fifth to a third within the hour here).
"""

from __future__ import annotations

import os
import resource
import sys
import time
from collections.abc import Sequence
from pathlib import Path

#: a quick-tier test that ran longer than this (wall seconds) is listed at the end of a `make check`
QUICK_S = 5.0
#: a test that used this much CPU in the pytest process (or more) is heavy
HEAVY_CPU_S = 2.0

#: files (relative to tests/) all of whose tests are heavy: they start workers, torchrun ranks, a CLI or a
#: script in a subprocess, or compile models for longer than a few seconds in process
HEAVY_FILES: frozenset[str] = frozenset({
    "byo/test_claims_advise_byo.py",
    "byo/test_compare_byo.py",
    "byo/test_hf_floor.py",
    "byo/test_sweep_byo.py",
    "byo/test_torchax.py",
    "claims/test_claims_cli.py",
    "distributed/test_cells_multidevice_jax.py",
    "distributed/test_cells_multidevice_torch.py",
    "distributed/test_multihost.py",
    "distributed/test_rank_exit.py",
    "doctor/test_doctor_cli.py",
    "doctor/test_doctor_examples.py",
    "doctor/test_doctor_public_styles.py",
    "doctor/test_doctor_timing.py",
    "explain/test_explain_e2e.py",
    "explain/test_planted.py",
    "launch/test_launcher.py",
    "measure/test_interference.py",
    "report/test_advise_cli.py",
    "report/test_browser.py",
    "report/test_trace.py",
    "strategies/test_cells.py",
    "strategies/test_cells_compiled.py",
    "strategies/test_gpu_check.py",
    "strategies/test_torchax_attention.py",
    "strategies/test_torchax_twins.py",
    "test_classify_compare.py",
    "test_compare.py",
    "test_tpu_setup.py",
})

#: heavy tests of files whose other tests are quick: "FILE::TEST" (any parameters of it)
HEAVY_TESTS: frozenset[str] = frozenset({
    "predict/test_cli.py::test_torchax_is_predicted_from_its_own_program",
    "byo/test_loader.py::test_compare_with_a_bad_model_exits_2_with_one_line_and_runs_nothing",
    "byo/test_loader.py::test_jax_model_without_model_is_a_user_error",
    "byo/test_many_devices_byo.py::test_hf_bert_under_fsdp_and_torchax_mesh_dp_follows_one_device_eager",
    "claims/test_sizes.py::test_an_interrupted_claims_run_names_a_resume_command_that_exists",
    "claims/test_sizes.py::test_bad_claims_input_exits_2_with_one_line",
    "claims/test_sizes.py::test_the_quick_plan_of_a_tpu_v5e_fits_twenty_minutes",
    "data/test_pipeline.py::test_prefetch_gives_the_same_batches_in_order",
    "doctor/test_doctor_self_checks.py::test_broken_instrument_is_printed_and_exits_3",
    "explain/test_explain_unit.py::test_jax_planted_slow_attention_is_the_largest_gap_row",
    "explain/test_real_traces.py::test_a_real_gpu_trace_is_explained",
    "explain/test_shape_ab.py::test_the_shape_is_timed_in_a_process_of_its_own",
    "explain/test_shape_ab.py::test_a_framework_the_machine_cannot_run_fails_in_one_line",
    "measure/test_environment_tpu.py::test_torchax_is_checked_as_the_runs_import_it",
    "measure/test_gpu_facts.py::test_gpu_check_refuses_in_seconds_without_a_gpu",
    "measure/test_gpu_facts.py::test_makefile_installs_jax_cuda_plugin_only_where_a_gpu_is",
    "measure/test_gpu_paths.py::test_every_entry_point_keeps_jax_from_preallocating",
    "measure/test_memory.py::test_a_compiled_preflight_is_the_runs_own_compile",
    "measure/test_memory.py::test_a_small_jax_twin_is_compiled_once_and_still_broken_down",
    "measure/test_peak.py::test_remeasure_measures_in_a_fresh_process_and_caches",
    "models/test_attention_impl.py::test_twin_with_splash_attention_is_the_same_model",
    "models/test_bert_parity.py::test_every_gradient_matches",
    "models/test_bert_parity.py::test_ten_adamw_steps_follow_the_same_trajectory",
    "models/test_family.py::test_the_bundle_imports_no_framework",
    "models/test_gpt_parity.py::test_every_gradient_matches",
    "models/test_gpt_parity.py::test_naive_port_is_the_same_maths",
    "models/test_hf.py::test_compare_run_starts_from_the_checkpoint",
    "models/test_llama_hf.py::test_llama_checkpoint_logits_match_transformers_in_both_twins",
    "models/test_llama_hf.py::test_score_agrees_with_transformers_in_both_frameworks",
    "predict/test_cli.py::test_model_and_its_port_are_predicted_from_one_build_with_no_step_run",
    "predict/test_programs.py::test_llama_300m_does_not_fit_a_v5e_with_einsum_attention_and_fits_with_splash",
    "report/test_table.py::test_a_run_that_times_out_still_says_what_it_was",
    "strategies/test_jax_strategies.py::test_naive_sync_waits_for_the_parameters_too",
    "strategies/test_lengths.py::test_jax_bucket_compiles_at_most_one_program_per_bucket_and_dynamic_one_per_length",
    "strategies/test_naming_cache_sweep.py::test_sweep_with_cold_and_warm_caches_end_to_end",
    "test_conditions.py::test_a_run_of_more_processes_than_cores_is_remembered_by_its_runnable_tasks",
    "test_safety.py::test_a_terminated_script_runner_takes_the_script_with_it",
    "test_safety.py::test_killed_parent_takes_its_worker_with_it",
    "test_safety.py::test_script_run_leaves_no_forked_child_or_daemon",
    "test_score.py::test_a_broken_checkpoint_is_one_line_before_any_run_and_a_failing_framework_one_line_after",
    "test_score.py::test_parent_imports_no_framework",
    "test_score.py::test_score_is_the_same_in_both_frameworks",
    "test_xla_flags.py::test_a_worker_applies_the_tuned_flags_unless_told_otherwise",
})


def is_heavy(item) -> bool:
    """Whether a collected test belongs to the full tier only."""
    if item.get_closest_marker("slow") or item.get_closest_marker("heavy"):
        return True
    rel = Path(str(item.path)).resolve().relative_to(Path(__file__).resolve().parent).as_posix()
    name = item.originalname if hasattr(item, "originalname") else item.name
    return rel in HEAVY_FILES or f"{rel}::{name}" in HEAVY_TESTS


def python_command(args: object) -> str | None:
    """The command line when ``args`` (what ``subprocess.Popen`` was given) starts a Python interpreter or torchrun,
    else None."""
    if isinstance(args, (str, bytes, os.PathLike)):
        argv = [os.fsdecode(args)] if not isinstance(args, str) or " " not in args else args.split()
    elif isinstance(args, Sequence):
        argv = [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in args]
    else:
        return None
    if not argv:
        return None
    exe = os.path.basename(argv[0])
    if argv[0] == sys.executable or exe.startswith("python") or exe == "torchrun":
        return " ".join(argv)[:200]
    return None


class RunCosts:
    """What one test cost: wall seconds, CPU seconds of the pytest process and of the children it waited for
    meanwhile, and the processes started (``started``, counted by tests/conftest.py's ``Popen`` hook)."""

    started = 0  # processes started in this pytest process so far

    def __init__(self) -> None:
        self.t0, self.started0 = time.perf_counter(), RunCosts.started
        self.self0, self.children0 = Clock._cpu(resource.RUSAGE_SELF), Clock._cpu(resource.RUSAGE_CHILDREN)

    def end(self) -> dict[str, float]:
        return {"wall": round(time.perf_counter() - self.t0, 3),
                "self_cpu": round(sum(Clock._cpu(resource.RUSAGE_SELF)) - sum(self.self0), 3),
                "child_cpu": round(sum(Clock._cpu(resource.RUSAGE_CHILDREN)) - sum(self.children0), 3),
                "started": RunCosts.started - self.started0}


class Clock:
    """CPU seconds of this process (since it started, as ``time`` counts them) and of the processes it waited
    for; wall seconds since the clock was made (when tests/conftest.py is imported, before collection)."""

    def __init__(self) -> None:
        self.wall0 = time.monotonic()
        self.self0, self.children0 = (0.0, 0.0), (0.0, 0.0)

    @staticmethod
    def _cpu(who: int) -> tuple[float, float]:
        r = resource.getrusage(who)
        return r.ru_utime, r.ru_stime

    def cpu_s(self) -> float:
        """User + sys seconds so far, this process's and those of the processes it waited for."""
        return sum(self._cpu(resource.RUSAGE_SELF)) + sum(self._cpu(resource.RUSAGE_CHILDREN)) - sum(self.self0) - sum(
            self.children0)

    def line(self) -> str:
        """``CPU 812 s (user 760 + sys 52; pytest 40, the processes it waited for 772) in 497 s wall on 2 cores,
        load 2.1 at the end``."""
        (su, ss), (cu, cs) = self._cpu(resource.RUSAGE_SELF), self._cpu(resource.RUSAGE_CHILDREN)
        user = su - self.self0[0] + cu - self.children0[0]
        sys_ = ss - self.self0[1] + cs - self.children0[1]
        own = su + ss - sum(self.self0)
        wall = time.monotonic() - self.wall0
        try:
            cores, load = len(os.sched_getaffinity(0)), f", load {os.getloadavg()[0]:.1f} at the end"
        except (AttributeError, OSError):
            cores, load = os.cpu_count(), ""
        f = lambda x: f"{x:.0f}" if x >= 10 else f"{x:.1f}"  # noqa: E731
        return (f"CPU {f(user + sys_)} s (user {f(user)} + sys {f(sys_)}; pytest {f(own)}, the processes it "
                f"waited for {f(user + sys_ - own)}) in {f(wall)} s wall on {cores} cores{load}")


def propose(costs_dir: Path) -> tuple[list[str], list[str]]:
    """(heavy files, heavy tests) by the rule above, from the costs ``TWINBENCH_TEST_COSTS`` recorded."""
    import json
    from collections import defaultdict

    rows = [json.loads(line) for f in sorted(Path(costs_dir).glob("*.jsonl")) for line in f.read_text().splitlines()]
    by_file: dict[str, list[tuple[str, bool]]] = defaultdict(list)
    for r in rows:
        path, _, test = r["id"].partition("::")
        heavy = r["slow"] or r["started"] > 0 or r["self_cpu"] >= HEAVY_CPU_S
        by_file[path.removeprefix("tests/")].append((test.split("[")[0], heavy))
    files, tests = [], []
    for path, results in sorted(by_file.items()):
        names = {name for name, heavy in results if heavy}
        if sum(name in names for name, _ in results) >= len(results) / 2:
            files.append(path)
        else:
            tests += [f"{path}::{name}" for name in sorted(names)]
    return files, tests


if __name__ == "__main__":  # python tests/tiers.py DIR: the lists the costs recorded in DIR propose
    heavy_files, heavy_tests = propose(Path(sys.argv[1]))
    print("HEAVY_FILES:", *heavy_files, "HEAVY_TESTS:", *heavy_tests, sep="\n")
