"""The doctor's clock on loops it did not write: an asynchronous JAX loop timed by its steps' completion, a read
of the step's output checked by the doctor's own A/B, PyTorch's forward and backward counted in its step, and a
script that ignores SIGTERM keeping what was seen before --timeout. Three scripts, each in one doctor process."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from twinbench.doctor import DoctorError, check_script, run_doctor
from twinbench.doctor import findings as fd
from twinbench.doctor.observed import TraceInfo

SCRIPTS = Path(__file__).resolve().parent / "scripts"


def own_step_ms(output: str) -> float:
    m = re.search(r"OWN_STEP_MS ([\d.]+)", output)
    assert m, output
    return float(m.group(1))


def test_async_loop_is_timed_by_its_steps_completion(tmp_path: Path) -> None:
    """No read of the device: the loop dispatches its steps far ahead; the step time is the rate at which they
    complete (the script's own clock, synchronised at the end), not the dispatch rate. --trace rides along."""
    res = run_doctor(SCRIPTS / "async_step_read.py", [], timeout=180, trace_dir=tmp_path / "trace")
    obs, own = res.observations, own_step_ms(res.output_tail)
    assert obs.step_timing == "completion"
    assert obs.dispatch_ms < 0.5 * own  # the loop ran ahead of the device: dispatch is not the step
    assert 0.6 < obs.step_ms / own < 1.6, (obs.step_ms, own)  # the same clock, not a speed threshold
    info = obs.info.trace  # steady steps recorded for explain, with the step's compiled HLO beside them
    assert info.framework == "jax" and len(info.steps) == 5 and info.files
    assert (tmp_path / "trace" / "step.hlo.txt").read_text().startswith("HloModule")
    # the steps under the profiler are left out of the step time, and trace.json says it with and without them
    timing, written = obs.trace_timing, json.loads((tmp_path / "trace" / "trace.json").read_text())
    assert not timing.step_time_includes_trace and timing.untraced_step_ms == obs.step_ms
    assert written["untraced_step_ms"] == pytest.approx(obs.step_ms, abs=1e-3)
    assert written["traced_steps"] == 4 and written["traced_step_ms"] > 0 and written["untraced_steps"] >= 20


def test_a_step_whose_outputs_are_all_donated_is_timed_to_the_end() -> None:
    """Nothing to wait on per step (its only output is donated to the next call): at --steps N the doctor waits
    for all of them and times the steps from the 2nd call to the end, not by their dispatch."""
    res = run_doctor(SCRIPTS / "async_step_read.py", ["--carry-only"], steps=30, timeout=180)
    obs = res.observations
    # end to end: from the 2nd call to all steps done, per step; or by completion where the watcher reached a
    # carried output before the next call took it (a race, either way a rate of completed steps), never the
    # dispatch rate
    assert obs.step_timing in ("end-to-end", "completion") and obs.end_to_end_ms, obs.step_timing
    if obs.step_timing == "end-to-end":
        assert obs.step_ms == pytest.approx(max(obs.end_to_end_ms, obs.dispatch_ms)), obs
    assert obs.input_check.blocks >= 3 and obs.own_work.s > 0  # its calls: the doctor's, not the loop's


def test_a_read_of_the_steps_output_is_checked_before_a_warning() -> None:
    """loss.item() every step: the doctor answers it one step late on alternate blocks of steps and compares."""
    res = run_doctor(SCRIPTS / "async_step_read.py", ["--read"], timeout=180)
    check = res.observations.read_check
    assert check.waited_n >= 3 and check.deferred_n >= 3, check
    sync = next(f for f in res.findings if f.id == "jax-host-sync")
    assert "checked by the doctor" in sync.evidence
    assert sync.severity in ("warning", "info") and f"median of {check.waited_n}" in sync.evidence


def test_checked_cost_decides_the_severity() -> None:
    """The estimate (a read's host time plus the device's idle time) said 45%; the A/B decides."""
    base = {"steps": 40, "steady_steps": 30, "iter_ms": 10.0, "step_kind": "jit", "frameworks": ["jax"],
            "per_step": {"jax_host_reads": 1.0, "jax_host_read_span_s:s": 0.0045, "jax_host_read_blocked_s:s": 0.0},
            "split": {"async": True, "idle_mean_ms": 0.0}, "info": {"jax_host_read_sites": {"t.py:9 (item)": 40}}}
    assert fd.jax_host_sync(base).severity == "warning"  # unchecked: the estimate stands
    same = {**base, "read_check": {"waited_ms": 30.0, "waited_n": 12, "deferred_ms": 30.6, "deferred_n": 12}}
    f = fd.jax_host_sync(same)
    assert f.severity == "info" and "no faster without the wait" in f.evidence and "no measured cost" in f.title
    faster = {**base, "read_check": {"waited_ms": 30.0, "waited_n": 12, "deferred_ms": 24.0, "deferred_n": 12}}
    assert fd.jax_host_sync(faster).severity == "warning" and "20.0% faster" in fd.jax_host_sync(faster).evidence
    noisy = {**base, "read_check": {"waited_ms": 30.0, "waited_n": 12, "deferred_ms": 28.0, "deferred_n": 12,
                                    "waited_iqr_ms": 10.0, "deferred_iqr_ms": 10.0}}  # 6.7% faster, +-7.6 ms noise
    f = fd.jax_host_sync(noisy)
    assert f.severity == "info" and "within the noise" in f.evidence
    few = {**base, "read_check": {"waited_ms": 30.0, "waited_n": 2, "deferred_ms": 30.0, "deferred_n": 2}}
    assert fd.jax_host_sync(few).severity == "warning"  # too few iterations to check: the estimate stands


def test_torch_step_killed_after_ignoring_sigterm_keeps_its_findings() -> None:
    """The script trains, then ignores SIGTERM and hangs: killed after the grace period, it is still reported
    from what it wrote as it ran; its forward and backward are the step's time, not idle."""
    res = run_doctor(SCRIPTS / "torch_stubborn.py", [], timeout=10, grace_s=1)
    obs = res.observations
    assert res.timed_out and obs.killed and obs.steps >= 8, obs.steps
    assert any(f.id == "torch-host-sync" for f in res.findings)
    split = obs.split
    assert split.step_ms >= 0.5 * split.iter_ms and split.step_ms > split.idle_ms, split


def test_cpu_oversubscribed_once_the_threads_fit() -> None:
    """Threads already within the free cores (OMP_NUM_THREADS=1, XLA on one thread): no threads fix again."""
    from twinbench.doctor.instruments_jax.facts import jax_threads

    assert jax_threads("--xla_cpu_multi_thread_eigen=false", 2) == 1 and jax_threads("", 2) == 2
    busy = {"machine": {"cores": 2, "others_cores": 1.2, "own_cores": 0.8, "window_s": 5.0}}
    many = fd.cpu_oversubscribed({**busy, "info": {"threads": {"torch": 2}}})
    assert many.severity == "warning" and "set_num_threads(1)" in many.fix
    fitted = fd.cpu_oversubscribed({**busy, "info": {"threads": {"torch": 1, "jax": 1}}})
    assert fitted.severity == "info" and "set_num_threads" not in fitted.fix and "idle" in fitted.fix


def test_the_threads_fix_is_timed_in_the_scripts_own_run() -> None:
    """torch's threads above the cores (so above the free cores, busy or not): blocks of steps at the free cores'
    count against blocks as written, the fixed ones left out of the step time, the script's count back after."""
    res = run_doctor(SCRIPTS / "torch_threads.py", [], timeout=120)
    obs, check = res.observations, res.observations.thread_check
    written = int(re.search(r"THREADS (\d+)", res.output_tail).group(1))
    assert check is not None and check.threads == written and 1 <= check.fixed < written
    assert (check.start, check.block, check.blocks) == (4, 4, 4), check
    assert len(check.as_written_ms) + len(check.fixed_ms) >= 10 and len(check.block_ms) == 4
    # set at the optimizer's step calls 8 and 16: the loop's next forward (each iteration's first) saw it
    seen = [int(n) for n in re.search(r"THREADS ([\d,]+)", res.output_tail).group(1).split(",")]
    assert seen[:9] == [written] * 9 and seen[9:17] == [check.fixed] * 8 and seen[17:] == [written] * 7, seen
    assert obs.info.threads["torch"] == written  # the finding reads the script's count, not the check's
    # the fixed blocks and the iteration after them are not the script as written: out of the steady steps (with
    # the iterations that held the doctor's own snapshots)
    assert 13 - obs.own_work.left_out <= obs.steady_steps <= 13, (obs.steady_steps, obs.own_work)


def test_only_python_scripts_are_run(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text('{"lr": 0.001, "batch": 32}\n')  # parses as Python, but is not a script
    with pytest.raises(DoctorError, match="not a Python script"):
        check_script(config)
    binary = tmp_path / "weights.py"
    binary.write_bytes(b"\x00\x01\x02PK\x03\x04" * 10)
    with pytest.raises(DoctorError, match="binary"):
        check_script(binary)
    runner = tmp_path / "train"
    runner.write_text("#!/usr/bin/env python3\nprint('hi')\n")
    assert check_script(runner) == runner.resolve()


def test_completion_rate_survives_a_lagging_watcher_and_the_read_check() -> None:
    """Steps dispatched 0.1 ms apart and done every 10 ms: noted 4 at a time by a watcher starved of the GIL,
    or cut into short runs by the read check's deferred blocks (where the reads note each step's end): still
    10 ms a step, not the 0.1 ms dispatch."""
    from twinbench.doctor.recorder import Recorder

    for lag, check in ((True, False), (False, True)):
        rec = Recorder()
        for i in range(60):
            rec.calls["jit:step"].append((100.0 + 1e-4 * i, {}))
            rec.step_ready("jit:step", i, 100.0 + 0.01 * ((i - i % 4 + 3) if lag else i))
            if check and i >= 3:
                rec.read_mode[i] = "deferred" if ((i - 3) // 4) % 2 else "waited"
        rec.kinds["jit:step"] = "jit"
        obs = rec.observations()
        assert obs["step_timing"] == "completion" and obs["step_ms"] == pytest.approx(10.0, rel=0.2), (lag, obs)
        assert obs["dispatch_ms"] == pytest.approx(0.1)


def _traced_loop(n: int, kind: str, key: str) -> object:
    """A loop of ``n`` steps 10 ms apart, but 40 ms under the profiler (``--trace``: it started at the end of
    step call 3 and stopped at the end of call 8, the first after it still slow: its waits, its export), each
    step's results ready 8 ms after its call."""
    from twinbench.doctor.recorder import Recorder
    from twinbench.doctor.trace import TRACE_FROM, TRACE_STEPS

    rec, t = Recorder(), 100.0
    first, last = TRACE_FROM - 1, TRACE_FROM - 1 + TRACE_STEPS
    rec.kinds[key] = kind
    for i in range(n):
        rec.calls[key].append((t, {}))
        rec.step_ready(key, i, t + 0.008)
        rec.step_returned(key, i, t + (0.008 if kind.startswith("torch") else 1e-4))
        t += 0.040 if first <= i <= last + 1 else 0.010
    rec.traced = (first, last)
    rec.info.trace = TraceInfo(framework="torch" if kind.startswith("torch") else "jax")
    return rec


@pytest.mark.parametrize(("kind", "key"), [("torch-optimizer", "torch:Optimizer.step"), ("jit", "jit:step")])
def test_the_steps_under_the_profiler_are_left_out_of_the_step_time(kind: str, key: str) -> None:
    """--trace: the iterations the profiler weighed on are not the script's steady step (4x slower here), like
    the host-read check's; too few steps outside them, and they stay in, the observations saying so."""
    obs = _traced_loop(14, kind, key).observations()  # --steps 14: 7 of its 12 steady iterations traced
    assert obs["step_ms"] == pytest.approx(10.0, rel=0.05) and obs["split"]["iter_ms"] == pytest.approx(10.0)
    assert obs["iter_ms"] == pytest.approx(10.0, rel=0.05) and obs["steady_steps"] == 5
    t = obs["trace_timing"]
    assert t.traced_step_ms == pytest.approx(40.0) and t.traced_steps == 4
    assert t.untraced_step_ms == obs["step_ms"] and not t.step_time_includes_trace
    rec = _traced_loop(10, kind, key)
    rec.read_mode.update({1: "deferred"})  # the host-read check took iterations 1 and 2: none left outside
    obs = rec.observations()
    assert obs["step_ms"] == pytest.approx(40.0, rel=0.05) and obs["trace_timing"].step_time_includes_trace
    assert obs["trace_timing"].untraced_step_ms is None


def test_the_step_calls_own_python_after_its_results_is_not_input() -> None:
    """nnx.jit: the device is done 3 ms into a 5 ms call, the graph's merge returns at 4.5 ms, the next call at
    5 ms: 1.5 ms the call's own tail, 0.5 ms waiting for the loop (no input-bound finding); a loop that spends
    2 ms between the call's return and the next call is still input-bound."""
    from twinbench.doctor.recorder import Recorder

    for gap_ms, bound in ((0.5, False), (4.0, True)):
        rec = Recorder()
        it = 4.5e-3 + gap_ms * 1e-3
        for i in range(20):
            t0 = 100.0 + it * i
            rec.calls["jit:step"].append((t0, {}))
            rec.step_ready("jit:step", i, t0 + 3e-3)
            rec.step_returned("jit:step", i, t0 + 4.5e-3)
        rec.kinds["jit:step"] = "jit"
        split = rec.split("jit:step")
        assert split["call_tail_ms"] == pytest.approx(1.5) and split["idle_ms"] == pytest.approx(gap_ms), split
        obs = {"steady_steps": 18, "split": split, "step_kind": "jit"}
        assert (fd.input_bound(obs) is not None) == bound, split


def test_time_the_loop_waited_for_a_cpu_is_not_input() -> None:
    """A 0.2 ms step in a loop that does nothing else, on a machine whose other processes hold the cores: the
    loop's thread waits 1.4 ms a step in the runqueue between the call's return and the next call. That is
    the machine's contention (cpu-oversubscribed), not the loop waiting for its input."""
    from twinbench.doctor.recorder import Recorder

    rec = Recorder()
    for i in range(20):
        t0 = 100.0 + 1.8e-3 * i
        rec.calls["jit:step"].append((t0, {"runq_s:s": 1.4e-3 * i}))  # the thread's runqueue wait so far
        rec.step_ready("jit:step", i, t0 + 2e-4)
        rec.step_returned("jit:step", i, t0 + 3e-4)
        rec.returned_runq["jit:step"][i] = 1.4e-3 * i  # none of it during the call
    rec.kinds["jit:step"] = "jit"
    split = rec.split("jit:step")
    assert split["descheduled_ms"] == pytest.approx(1.4) and split["idle_ms"] == pytest.approx(0.1), split
    assert fd.input_bound({"steady_steps": 18, "split": split, "step_kind": "jit"}) is None
    rec.returned_runq["jit:step"].clear()  # a kernel that does not say: the wait stays idle, as before
    assert rec.split("jit:step")["idle_ms"] == pytest.approx(1.5)


def test_the_doctors_own_work_in_the_loops_thread_is_not_the_loops_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A jitted loop of 10 ms iterations, each step's results ready 8 ms after its call, on the recorder's clock:
    the snapshot of the observations at the 8th step call takes 3 s (as the first input A/B's import of its test
    did, inside a steady iteration), and the input check's block after call 5 takes 40 ms. The iterations that
    held the doctor's own work are left out of the headline and the step time, and its seconds come off the
    end-to-end rate: the loop's 10 ms, not 3 s spread over the run."""
    import types

    from twinbench.doctor import recorder

    now = [1000.0]
    clock = types.SimpleNamespace(perf_counter=lambda: now[0], thread_time=time.thread_time,
                                  process_time=time.process_time)
    monkeypatch.setattr(recorder, "time", clock)
    rec, key = recorder.Recorder(), "jit:step"
    rec.snapshot_every_s = 1e9  # snapshots at the 2**k-th step call only

    def snapshot() -> None:
        now[0] += 3.0 if rec.steps_so_far() == 8 else 0.0

    rec.snapshot = snapshot
    for i in range(30):
        t = now[0]
        rec.step_call(key, "jit")
        rec.step_ready(key, i, t + 0.008)
        now[0] += 1e-4  # the call's dispatch
        if i == 5:  # the input check's block: four calls of the step on the batch already built
            now[0] += 0.040
            rec.own_work(0.040)
            rec.input_blocks.append(recorder.InputBlock(i, [9.0, 9.5, 9.2, 9.1], [9.0, 9.4, 9.3, 9.1]))
        rec.step_done(key)
        now[0] += 0.010 - 1e-4  # the loop's own work until its next call
    rec.drained_at = rec.calls[key][-1][0] + 0.008
    obs = rec.observations()
    assert obs["step_timing"] == "completion"
    assert obs["iter_ms"] == pytest.approx(10.0, rel=0.02) and obs["step_ms"] == pytest.approx(10.0, rel=0.02), obs
    assert obs["end_to_end_ms"] == pytest.approx(10.0, rel=0.05), obs["end_to_end_ms"]
    assert obs["own_work"]["s"] == pytest.approx(3.04) and obs["own_work"]["left_out"] >= 2
