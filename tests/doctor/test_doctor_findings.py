"""Each finding's threshold and wording, on hand-made observations (no framework, no subprocess)."""

from __future__ import annotations

from typing import Any

from twinbench.doctor import findings as fd


def obs(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"steps": 10, "steady_steps": 8, "step_ms": 10.0, "per_step": {}, "counters": {},
                            "notes": {}, "info": {}, "compile_s": 0.0, "wall_s": 10.0, "frameworks": ["jax"],
                            "steady_from_t": 1.0, "error": None, "step_kind": "jit", "step_fn": "train_step"}
    base.update(kw)
    return base


SHAPE = ("TRACING CACHE MISS at t.py:15:18 (<module>):\n  for f defined at t.py:11\n  all previously seen cache "
         "keys differ. For the closest previous key:\n  different input types:\n  * at x, now f32[4] and before f32[3]")
DTYPE = SHAPE.replace("now f32[4] and before f32[3]", "now i32[4] and before f32[3]")
WEAK = SHAPE.replace("now f32[4] and before f32[3]", "now f32[]{weak_type=False} and before f32[]{weak_type=True}")
STATIC = ("TRACING CACHE MISS at t.py:18:19 (<module>):\n  for f defined at t.py:11\n  different input pytree:\n"
          "  * at input path [0][2], now <class 'jax._src.tree_util.Static'> with pytree metadata Static(val=2)")
FIRST = "TRACING CACHE MISS at t.py:21 (<module>):\n  never seen function:\n    <lambda> id=1 defined at t.py:21"
NEWFN = FIRST + "\n  but seen another function defined on the same line; maybe the function is\n  being re-defined"
LIB = SHAPE.replace("for f defined at t.py:11", "for g defined at /x/site-packages/optax/_src/a.py:3")


def test_recompile_causes() -> None:
    assert [fd.recompile_cause(m) for m in (SHAPE, DTYPE, WEAK, STATIC, NEWFN)] == [
        "shape", "dtype", "weak type", "static argument", "new function object"]


def test_recompile_threshold_and_what_counts() -> None:
    def notes(*msgs: str, t: float = 2.0) -> dict[str, Any]:
        return {"cache_miss": [{"message": m, "t": t} for m in msgs]}

    assert fd.jax_recompile(obs(notes=notes(SHAPE, SHAPE, t=0.5))) is None  # before step 2: the first compile
    assert fd.jax_recompile(obs(notes=notes(FIRST, FIRST, LIB, LIB))) is None  # first traces, library code
    one = fd.jax_recompile(obs(notes=notes(SHAPE)))
    assert one is not None and one.severity == "info"
    two = fd.jax_recompile(obs(notes=notes(WEAK, WEAK, SHAPE)))
    assert two.severity == "warning" and "weak type" in two.title and "jnp.asarray" in two.fix
    # functions traced inside one retrace of the step (a shard_map body defined in it) are not recompiles
    nested = {"cache_miss": [{"message": SHAPE, "t": 2.0}, *({"message": NEWFN, "t": 2.0, "nested": True},) * 3]}
    assert fd.jax_recompile(obs(notes=nested)).severity == "info"


def test_per_step_findings_need_steady_steps() -> None:
    assert fd.jax_host_sync(obs(steady_steps=1, per_step={"jax_host_reads": 5.0})) is None
    assert fd.jax_host_sync(obs(per_step={"jax_host_reads": 0.9})) is None
    f = fd.jax_host_sync(obs(per_step={"jax_host_reads": 1.0}, info={"jax_host_read_sites": {"t.py:9 (float)": 8}}))
    assert f.severity == "warning" and "t.py:9" in f.evidence


def test_eager_ops_threshold() -> None:
    assert fd.jax_eager_ops(obs(per_step={"eager_ops": 19.0})) is None
    assert fd.jax_eager_ops(obs(per_step={"eager_ops": 20.0})).severity == "warning"
    assert fd.jax_eager_ops(obs(per_step={"eager_ops": 3.0, "optax_eager_updates": 1.0})) is not None


def test_no_donation_threshold() -> None:
    mib = 1 << 20
    info = {"carried": {"leaves": 4, "bytes": 3 * mib}, "donated_bytes": 0}
    f = fd.jax_no_donation(obs(info=info))
    assert f is not None and "3.00 MiB" in f.title and "donate_argnums" in f.fix
    # what donation gains is memory: the title claims no copy a step, the evidence says it is no speed-up
    assert "copied every step" not in f.title and "old and new copies at once" in f.title
    assert "saves that memory, not time" in f.evidence
    assert fd.jax_no_donation(obs(info={**info, "donated_bytes": 3 * mib})) is None
    assert fd.jax_no_donation(obs(info={"carried": {"bytes": mib // 2}, "donated_bytes": 0})) is None
    # it saves memory, not time: info (not counted in the exit code) unless memory is short (issue 76: 7.6 MiB on
    # a CPU was a warning)
    assert f.severity == "info" and not fd.serious([f])
    mem = {"argument_size_in_bytes": 8 * mib, "output_size_in_bytes": 8 * mib, "alias_size_in_bytes": 0,
           "temp_size_in_bytes": 4 * mib}
    roomy = fd.jax_no_donation(obs(info={**info, "memory": mem, "memory_capacity_bytes": 16 << 30}))
    assert roomy.severity == "info" and "memory is not short" in roomy.evidence
    short = fd.jax_no_donation(obs(info={**info, "memory": mem, "memory_capacity_bytes": 32 * mib}))
    assert short.severity == "warning" and "memory is short" in short.evidence


def test_replicated_batch_needs_several_devices() -> None:
    batch = [{"shape": [64, 32], "bytes": 8192, "kind": "jax", "devices": 1, "replicated": True}]
    assert fd.jax_replicated_batch(obs(info={"devices": 1, "fresh_args": batch})) is None
    f = fd.jax_replicated_batch(obs(info={"devices": 4, "fresh_args": batch}))
    assert f is not None and "NamedSharding" in f.fix
    sharded = [{**batch[0], "devices": 4, "replicated": False}]
    assert fd.jax_replicated_batch(obs(info={"devices": 4, "fresh_args": sharded})) is None


def test_input_bound_threshold() -> None:
    assert fd.input_bound(obs(step_ms=10.0, per_step={"data_wait_s:s": 0.002})) is None  # 20%: not above
    f = fd.input_bound(obs(step_ms=10.0, per_step={"data_wait_s:s": 0.005}))
    assert f is not None and "50%" in f.title and "num_workers" in f.fix


def split(**kw: Any) -> dict[str, Any]:
    return {"iterations": 6, "iter_ms": 50.0, "step_ms": 10.0, "data_ms": 0.0, "host_ms": 0.0, "async": True, **kw}


def test_input_bound_under_async_dispatch() -> None:
    # a jitted step: the device's idle time between the step's results being ready and the next call
    f = fd.input_bound(obs(split=split()))
    assert f is not None and f.severity == "warning" and "80%" in f.title
    assert "40.00 ms the device waited for the host" in f.evidence and "10.00 ms the step" in f.evidence
    assert fd.input_bound(obs(split=split(step_ms=45.0))) is None  # device-bound: 10% idle
    assert fd.input_bound(obs(split=split(host_ms=35.0))) is None  # eager ops / compilation: other findings
    assert fd.input_bound(obs(split=split(iter_ms=0.5, step_ms=0.1))) is None  # 0.4 ms: the loop's own Python
    # a synchronous (PyTorch) step: the DataLoader's wait, whatever the device's share
    sync = split(**{"async": False, "data_ms": 15.0, "step_ms": 2.0})
    f = fd.input_bound(obs(split=sync, step_kind="torch-optimizer"))
    assert f is not None and "30%" in f.title and "15.00 ms waiting for the next batch" in f.evidence
    assert fd.input_bound(obs(split={**sync, "data_ms": 5.0}, step_kind="torch-optimizer")) is None
    # a Python generator (no DataLoader): from the optimizer step's end to the next forward pass
    gen = fd.input_bound(obs(split={**sync, "data_ms": 0.0, "to_forward_ms": 30.0}, step_kind="torch-optimizer"))
    assert gen is not None and "60%" in gen.title and "any Python iterator" in gen.evidence
    manual_sgd = {**sync, "data_ms": 0.0, "to_forward_ms": 30.0}  # without an optimizer no such gap is measured
    assert fd.input_bound(obs(split=manual_sgd, step_kind="torch-backward")) is None


def test_host_sync_severity_follows_the_measured_wait() -> None:
    reads = {"torch_host_reads": 1.0}
    cheap = fd.torch_host_sync(obs(per_step={**reads, "torch_host_read_s:s": 2e-5}))
    assert cheap.severity == "info" and "0.020 ms per step" in cheap.evidence and "0.2% of" in cheap.evidence
    costly = fd.torch_host_sync(obs(per_step={**reads, "torch_host_read_s:s": 0.004}))
    assert costly.severity == "warning" and "40.0% of the 10.00 ms steady iteration" in costly.evidence
    cuda = fd.torch_host_sync(obs(per_step={**reads, "torch_host_read_s:s": 2e-5, "cuda_syncs": 1.0}))
    assert cuda.severity == "warning"  # synchronising CUDA calls are not timed: each one drains the queue
    jax_cheap = fd.jax_host_sync(obs(per_step={"jax_host_reads": 2.0, "jax_host_read_s:s": 1e-4}))
    assert jax_cheap.severity == "info" and "warning from 5% of it" in jax_cheap.evidence


def test_host_sync_cost_is_the_hosts_not_the_busy_devices() -> None:
    """A line's burst of reads costs the loop its host time; the part spent waiting for a step still running on
    the device is the step's own time, counted only where the device then idles between steps."""
    lib = "t.py:9 `batch = dataset[perm]` -> datasets/formatting/formatting.py:96 (int)"
    per = {"jax_host_reads": 24.0, "jax_host_read_s:s": 0.001, "jax_host_read_span_s:s": 0.006,
           "jax_host_read_blocked_s:s": 0.002}
    split = {"async": True, "idle_mean_ms": 0.5, "iterations": 8}
    f = fd.jax_host_sync(obs(per_step=per, iter_ms=10.0, split=split, info={"jax_host_read_sites": {lib: 240}}))
    assert f.severity == "warning" and "lost 4.50 ms per step, 45.0% of the 10.00 ms" in f.evidence
    assert f.location.startswith("t.py:9 `batch = dataset[perm]` -> datasets/") and "np.asarray(perm)" in f.fix
    # a read that only waits for the busy device, with the device never idle: the step's time, info
    own = fd.jax_host_sync(obs(per_step={**per, "jax_host_read_span_s:s": 0.004, "jax_host_read_blocked_s:s": 0.004},
                               iter_ms=10.0, split={**split, "idle_mean_ms": 0.0},
                               info={"jax_host_read_sites": {"t.py:12 `print(loss)` (format)": 10}}))
    assert own.severity == "info" and "keep" in own.fix.lower() and "0.0% of the 10.00 ms" in own.evidence


def test_donation_read_from_what_the_executable_aliases() -> None:
    """args_info of a pmapped step marks one leaf of a donated argument; the executable's aliasing decides,
    per device."""
    mib = 2**20
    info = {"carried": {"leaves": 127, "bytes": 2 * mib + 10, "device_bytes": mib + 5}, "donated_bytes": 0,
            "memory": {"argument_size_in_bytes": mib + 8, "output_size_in_bytes": mib, "alias_size_in_bytes": mib,
                       "temp_size_in_bytes": 0}}
    assert fd.jax_no_donation(obs(info=info)) is None
    undonated = {**info, "memory": {**info["memory"], "alias_size_in_bytes": 0}}
    f = fd.jax_no_donation(obs(info=undonated))
    assert f is not None and "per device" in f.evidence and "1.00 MiB of" in f.title


def test_transfer_figures_are_possible() -> None:
    """The bandwidth is a whole copy's bytes over its time: never a near-zero difference of two timings."""
    per = {"h2d_numpy_args": 4.0, "h2d_numpy_bytes": 12 * 1024, "h2d_guard": 8.0, "h2d_guard_arrays": 8.0}
    f = fd.jax_host_transfer(obs(per_step=per, iter_ms=12.0,
                                 info={"h2d": {"bytes_per_s": 1.5 * 2**30, "latency_s": 1e-4}}))
    assert f.severity == "info" and "1.50 GiB/s" in f.evidence  # 0.8 ms with latencies, 0.06% for the bytes


BERT = SHAPE.replace("* at x, now f32[4] and before f32[3]", "* at batch['input_ids'], now i32[32,55] and before "
                     "i32[32,39]")


def _code(fix: str) -> str:
    """The fix's code lines (indented by two spaces), as the user would paste them."""
    return "\n".join(ln.split("  # ")[0].strip() for ln in fix.splitlines() if ln.startswith("  "))


def test_the_recompile_fix_pads_the_axis_that_changes_and_runs_as_printed() -> None:
    import numpy as np

    f = fd.jax_recompile(obs(notes={"cache_miss": [{"message": BERT, "t": 2.0}] * 3}))
    assert "axis 1" in f.fix and "(0, B - len(x))" not in f.fix  # the sequence length, not the batch (issue 76)
    shapes = set()
    for n in (55, 39, 40, 17):  # every length lands in one of a few buckets, the batch untouched
        ns: dict[str, Any] = {"np": np, "x": np.ones((32, n), np.int32)}
        exec(_code(f.fix), ns)
        assert ns["x"].shape[0] == 32 and (ns["x"][:, :n] == 1).all() and (ns["x"][:, n:] == 0).all()
        shapes.add(ns["x"].shape)
    assert shapes == {(32, 64), (32, 32)}
    batch = SHAPE.replace("now f32[4] and before f32[3]", "now f32[17,8] and before f32[32,8]")
    fb = fd.jax_recompile(obs(notes={"cache_miss": [{"message": batch, "t": 2.0}] * 2}))
    ns = {"np": np, "x": np.ones((17, 8), np.float32)}
    exec(_code(fb.fix), ns)
    assert ns["x"].shape == (32, 8) and "drop_last=True" in fb.fix


def test_compile_dominates_points_at_the_recompiles_that_cause_it(tmp_path, monkeypatch) -> None:
    import os

    import jax

    recompiling = obs(compile_s=10.0, wall_s=12.0, notes={"cache_miss": [{"message": BERT, "t": 2.0}] * 24})
    f = fd.compile_dominates(recompiling)
    assert f.caused_by == "jax-recompile" and "24 recompiles" in f.evidence
    assert f.fix.index("fewer distinct input shapes") < f.fix.index("jax_compilation_cache_dir")
    assert fd.compile_dominates(obs(compile_s=10.0, wall_s=12.0)).caused_by == ""
    # the cache line runs as printed and names the home folder, not a folder literally called ~ (issue 73)
    line = next(ln for ln in f.fix.splitlines() if "jax_compilation_cache_dir" in ln)
    code = line[line.index("import os"):line.index("'~/.cache/jax'))") + len("'~/.cache/jax'))")]
    monkeypatch.setenv("HOME", str(tmp_path))
    before = jax.config.jax_compilation_cache_dir
    try:
        exec(code, {"jax": jax})
        assert jax.config.jax_compilation_cache_dir == os.path.join(str(tmp_path), ".cache", "jax")
    finally:
        jax.config.update("jax_compilation_cache_dir", before)


def test_speed_findings_come_before_memory_ones() -> None:
    mib = 1 << 20
    seen = obs(info={"carried": {"leaves": 4, "bytes": 3 * mib}, "donated_bytes": 0}, compile_s=5.0, wall_s=10.0)
    assert [f.id for f in fd.diagnose(seen)] == ["compile-dominates", "jax-no-donation"]  # both info


def test_threads_count_only_for_a_framework_the_script_runs() -> None:
    # a torch script whose library imports JAX too (issue 73): JAX's two threads are not the script's, and once
    # torch runs on the one free core the threads fix is not printed again
    busy = {"cores": 2, "others_cores": 1.2, "own_cores": 0.8, "window_s": 5.0}
    fixed = fd.cpu_oversubscribed(obs(machine=busy, frameworks=["jax", "torch"], frameworks_used=["torch"],
                                      info={"threads": {"torch": 1, "jax": 2}}))
    assert fixed.severity == "info" and "set_num_threads" not in fixed.fix
    before = fd.cpu_oversubscribed(obs(machine=busy, frameworks_used=["torch"], info={"threads": {"torch": 2,
                                                                                                  "jax": 2}}))
    assert before.severity == "warning" and "torch.set_num_threads(1)" in before.fix
    # JAX's threads alone: no thread setting printed (one XLA thread made a script slower in 3 of 3 A/B rounds)
    jax_only = fd.cpu_oversubscribed(obs(machine=busy, frameworks_used=["jax"], info={"threads": {"jax": 2}}))
    assert jax_only.severity == "info" and "xla_cpu_multi_thread_eigen" not in jax_only.fix
    assert "set_num_threads" not in jax_only.fix


def thread_check(written: list[float], fixed: list[float]) -> dict[str, Any]:
    return {"threads": 8, "fixed": 1, "cores": 2, "others_cores": 1.5, "start": 4, "block": 4, "blocks": 4,
            "as_written_ms": written, "fixed_ms": fixed, "block_ms": [written[0], fixed[0], fixed[-1], written[-1]]}


def test_threads_warn_only_where_the_doctors_ab_of_the_fix_gained() -> None:
    # issue 73: a finding about the user's code is true only where an A/B of that code confirms it
    busy = {"cores": 2, "others_cores": 1.5, "own_cores": 0.5, "window_s": 5.0}
    kw: dict[str, Any] = {"machine": busy, "frameworks_used": ["torch"], "info": {"threads": {"torch": 8}}}
    gained = fd.cpu_oversubscribed(obs(**kw, thread_check=thread_check([21.9, 24.5, 21.0, 16.3, 21.5, 22.0],
                                                                       [8.2, 12.9, 3.6, 7.7, 10.8, 9.0])))
    assert gained.severity == "warning" and "torch.set_num_threads(1)" in gained.fix
    assert "a gain of +13.10 ms" in gained.evidence and "not confirmed" not in gained.evidence
    # the same spread both ways: info, with the figures, the fix still the one that ran
    same = [20.0, 22.0, 18.0, 21.0, 19.0, 23.0]
    flat = fd.cpu_oversubscribed(obs(**kw, thread_check=thread_check(same, [21.5, 19.5, 20.5, 18.5, 22.5, 20.0])))
    assert flat.severity == "info" and "not confirmed by the A/B" in flat.evidence
    assert "torch.set_num_threads(1)" in flat.fix and "Mann-Whitney p = " in flat.evidence
    # too few iterations to test: the threshold decides, as without the check
    few = fd.cpu_oversubscribed(obs(**kw, thread_check=thread_check([21.0, 22.0], [8.0, 9.0])))
    assert few.severity == "warning" and "checked by the doctor" not in few.evidence
    # skipped (a short run): said so in the evidence
    kw["info"] = {"threads": {"torch": 8}, "skipped": {"thread-check": "too few steady steps: ..."}}
    assert "not checked by an A/B: too few steady steps" in fd.cpu_oversubscribed(obs(**kw)).evidence


def test_threads_beyond_the_cores_of_an_idle_machine_are_a_finding_where_the_ab_confirms_it() -> None:
    """The corpus's threads pair on an idle 2-core machine: 8 torch threads, the doctor's own A/B 9.5 -> 3.3 ms a
    step, and no finding, since the finding then asked for other processes' load first."""
    idle = {"cores": 2, "others_cores": 0.0, "own_cores": 1.9, "window_s": 5.0}
    kw: dict[str, Any] = {"machine": idle, "frameworks_used": ["torch"], "info": {"threads": {"torch": 8}}}
    check = thread_check([10.3, 9.2, 9.7, 8.7, 8.6, 9.7], [3.1, 5.1, 4.3, 3.3, 3.1])
    check.update(fixed=2, others_cores=0.0)
    f = fd.cpu_oversubscribed(obs(**kw, thread_check=check))
    assert f is not None and f.severity == "warning", f
    assert f.title == "torch runs 8 threads on 2 cores: they wait for each other"
    assert "torch.set_num_threads(2)" in f.fix and "a gain of +" in f.evidence
    # the same idle machine with no A/B, or one that does not confirm it: nothing (the load alone decides then)
    assert fd.cpu_oversubscribed(obs(**kw)) is None
    same = [9.0, 9.5, 8.5, 9.2, 8.8, 9.1]
    assert fd.cpu_oversubscribed(obs(**kw, thread_check=thread_check(same, [9.1, 8.9, 9.3, 8.7, 9.0]))) is None


def test_the_thread_check_switches_blocks_and_leaves_the_fixed_ones_out(monkeypatch: Any) -> None:
    # the script's process's side on a recorder and a stand-in for torch (no process): blocks as written,
    # fixed, fixed, as written at the fix's count, the script's count back after them and at the end
    import collections
    import sys
    import types

    from twinbench.doctor import thread_check
    from twinbench.doctor.recorder import Recorder

    def dynamo(graphs: int) -> None:  # torch.compile's counters, as the script's process would have them
        stats = collections.defaultdict(collections.Counter, stats=collections.Counter(unique_graphs=graphs))
        monkeypatch.setitem(sys.modules, "torch._dynamo.utils", types.SimpleNamespace(counters=stats))

    dynamo(0)

    class Torch:
        n, set_to = 8, []

        def get_num_threads(self) -> int:
            return self.n

        def set_num_threads(self, n: int) -> None:
            self.n = n
            self.set_to.append(n)

    def run(steps: int, done: bool) -> tuple[Recorder, Torch, list[int]]:
        """``steps`` calls of the script's step, one core free; torch's count as each call left it."""
        rec, torch = Recorder(), Torch()
        rec.check_reads = True
        rec.machine_load = lambda t0, t1: {"cores": 2, "others_cores": 1.4}  # one core free
        switch = thread_check.ThreadSwitch(rec, torch)
        seen = []
        for i in range(steps):
            rec.step_call("torch:Optimizer.step", "torch-optimizer", t=float(i))
            switch.at_call("torch:Optimizer.step")
            seen.append(torch.n)
            if done:
                rec.step_done("torch:Optimizer.step", synced=True)
        return rec, torch, seen

    rec, torch, seen = run(24, done=True)
    assert seen[:8] == [8] * 8 and seen[8:16] == [1] * 8 and seen[16:] == [8] * 8
    assert torch.set_to == [1, 8]
    assert [i for i in range(1, 23) if rec.skipped(i)] == list(range(8, 17))
    check = thread_check.summary(rec, "torch:Optimizer.step", set())
    assert check is not None and (check.threads, check.fixed, check.blocks) == (8, 1, 4)
    assert len(check.as_written_ms) == len(check.fixed_ms) == 6  # each block's first left out
    assert "thread-check" not in rec.info.skipped
    # the run ends inside a fixed block: the script's count comes back before torch's is read, and it is said
    rec2, torch2, _ = run(10, done=False)
    assert torch2.n == 1
    rec2.finish()
    assert torch2.n == 8
    short = thread_check.summary(rec2, "torch:Optimizer.step", set())
    assert short is not None and short.blocks == 1
    assert "ended after 1 of its 4 blocks" in rec2.info.skipped["thread-check"]
    # a torch.compile'd step keeps the count its kernels were compiled at: no switch, and said so
    dynamo(1)
    rec3, _, seen3 = run(24, done=False)
    assert seen3 == [8] * 24
    assert rec3.thread_check is None and "torch.compile" in rec3.info.skipped["thread-check"]


PMAP = {"step_kind": "pmap", "step_fn": "train_step",
        "info": {"jit_options": {"axis_name": "d", "donate_argnums": 0}, "carried_args": ["0:w"]},
        "counters": {"pmap_calls": 6.0},
        "notes": {"compile": [{"fn": "jit(stack)", "s": 0.06, "step": 0}, {"fn": "jit(_fun)", "s": 2.6, "step": 1},
                              {"fn": "jit(_multi_slice)", "s": 0.1, "step": 1}, {"fn": "jit(_fun)", "s": 2.7,
                                                                                 "step": 2}]}}


def test_a_pmapped_step_compiled_again_identically_is_a_recompile() -> None:
    # issue 73: compiled twice, at steps 1 and 2 (2.6-10.8 s each), with no cache miss: no finding before
    f = fd.jax_recompile(obs(**PMAP))
    assert f is not None and f.severity == "info" and "placement" in f.title and "steps 1" not in f.title
    assert "at step(s) 2" in f.evidence and "w = jax.device_put(w, NamedSharding(mesh, P('d')))" in f.fix
    once = PMAP["notes"]["compile"][:3]
    assert fd.jax_recompile(obs(**PMAP | {"notes": {"compile": once}})) is None
    assert fd.jax_recompile(obs(**PMAP | {"step_kind": "torch-optimizer"})) is None


def test_the_pmap_fixes_run_as_printed_and_keep_the_donation() -> None:
    import jax
    import jax.numpy as jnp

    def train_step(w: Any, x: Any) -> Any:
        return w - 0.01 * jax.grad(lambda w: jnp.mean((x @ w) ** 2))(w)

    legacy = fd.jax_pmap_legacy(obs(**PMAP))
    assert legacy.severity == "info" and "donate_argnums=0" in legacy.fix  # the script's donation kept
    ns: dict[str, Any] = {"jax": jax, "train_step": train_step, "batch": jnp.ones((8, 16))}
    exec(_code(legacy.fix), ns)  # on the installed JAX: make_mesh's explicit axes raised ShardingTypeError
    w = jnp.ones((16, 1))
    assert ns["step"](w, ns["batch"]).shape == (16, 1)
    ns = {"jax": jax, "w": jnp.ones((jax.local_device_count(), 16, 1))}
    exec(_code(fd.jax_recompile(obs(**PMAP)).fix), ns)
    assert ns["w"].sharding.spec == jax.sharding.PartitionSpec("d")


def test_a_finding_is_one_declaration_and_a_misspelled_id_fails() -> None:
    from pathlib import Path

    import pytest

    from twinbench.doctor.findings import base

    assert tuple(k.id for k in fd.KINDS) == fd.IDS and set(fd.IDS) == set(base.REGISTRY)
    assert [k.check for k in fd.KINDS] == list(fd.CHECKS)
    with pytest.raises(ValueError, match="not registered"):
        fd.Finding("jax-recompiles", "warning", "t", "e", "f")  # a misspelled id, where the finding is made
    with pytest.raises(ValueError, match="severity"):
        fd.Finding("jax-recompile", "warn", "t", "e", "f")
    with pytest.raises(ValueError, match="registered twice"):
        base.finding("jax-recompile", severity="info", about="speed", threshold="t", fix="f", example="x")
    with pytest.raises(ValueError, match="example"):
        base.finding("a-new-one", severity="info", about="speed", threshold="t", fix="f")

    @base.finding("test-only-finding", severity="info", about="speed", threshold="t", fix="f", tested_by="here")
    def wrong(o: Any) -> fd.Finding:
        return fd.Finding("jax-recompile", "info", "t", "e", "f")

    try:
        with pytest.raises(ValueError, match="registered as 'test-only-finding'"):
            wrong({})
    finally:
        del base.REGISTRY["test-only-finding"]
    # every example a finding names exists; the reference page's table is the registry's
    examples = Path(__file__).resolve().parents[2] / "examples" / "doctor"
    assert all((examples / f"{k.example}.py").exists() for k in fd.KINDS if k.example)
    page = (Path(__file__).resolve().parents[2] / "docs" / "doctor-findings.md").read_text()
    assert base.docs_table() in page, "docs/doctor-findings.md: paste findings.base.docs_table() between its markers"


def test_the_observations_a_finding_reads_are_declared() -> None:
    import msgspec
    import pytest

    from twinbench.doctor.observations import Observations, typed

    # a misspelled key fails instead of reading as 0 and never firing (issue 74)
    with pytest.raises(msgspec.ValidationError, match="steady_step"):
        typed(obs(steady_step=8))
    with pytest.raises(msgspec.ValidationError, match="page_fault_per_s"):
        fd.page_faults(obs(machine={"page_fault_per_s": 368_000.0, "kernel_cpu_share": 0.31}))
    with pytest.raises(KeyError, match="jax_host_read"):
        typed(obs()).per("jax_host_read")  # a per-step counter's name, misspelled
    with pytest.raises(KeyError, match="cache_mis"):
        typed(obs()).noted("cache_mis")
    # an older doctor's observations (fewer keys) still load, with every default
    old = typed({"steps": 10, "step_ms": 3.0, "info": {}})
    assert isinstance(old, Observations) and old.frameworks_used is None and old.machine is None
    assert fd.diagnose({"steps": 10, "step_ms": 3.0}) == []


def test_compile_dominates_tiers() -> None:
    assert fd.compile_dominates(obs(compile_s=0.9, wall_s=1.0)) is None  # too short to matter
    assert fd.compile_dominates(obs(compile_s=2.0, wall_s=10.0)) is None  # 20%
    assert fd.compile_dominates(obs(compile_s=5.0, wall_s=10.0)).severity == "info"
    assert fd.compile_dominates(obs(compile_s=31.9, wall_s=60.0)).severity == "info"  # a toy's spread: stable
    assert fd.compile_dominates(obs(compile_s=150.0, wall_s=200.0)).severity == "warning"


def test_torch_findings_from_logs() -> None:
    rec = {"message": "Recompiling function forward in t.py:3\n    triggered by the following guard failure(s):\n"
                      "    - 0/0: tensor 'x' size mismatch at index 0. expected 8, actual 9"}
    f = fd.torch_recompile(obs(notes={"recompile": [rec]}))
    assert "size mismatch" in f.evidence and "mark_dynamic" in f.fix
    gb = {"message": "Graph break in user code at t.py:14\nGraph Break Reason: Data-dependent branching\n..."}
    f = fd.torch_graph_break(obs(notes={"graph_break": [gb, gb]}))
    assert "Data-dependent branching at t.py:14 (x2)" in f.evidence


def test_graph_breaks_of_torch_itself_and_at_backward_are_not_the_scripts(tmp_path) -> None:
    """A whole step under torch.compile: torch's optimizer breaks the graph around its step on purpose (not the
    script's to remove), and loss.backward() always does (info, the code around it still compiled); a skipped
    call in the script (opt.zero_grad()) is a warning whose fix does not ask for fullgraph=True."""
    step = tmp_path / "step.py"
    step.write_text("def train_step(x, y):\n    opt.zero_grad()\n    loss = f(x, y)\n    loss.backward()\n"
                    "    opt.step()\n")

    def brk(at: str, reason: str = "Encountered graph break", extra: str = "") -> dict:
        return {"message": f"Graph break in user code at {at}\nGraph Break Reason: {reason}\n{extra}"}

    torch_own = brk("/venv/lib/python3.11/site-packages/torch/optim/optimizer.py:79", "User-inserted graph break")
    doctors = brk("/src/twinbench/doctor/instruments_torch.py:162", extra="qualname: backward, skip reason: ...")
    backward, zero = brk(f"{step}:4"), brk(f"{step}:2")
    assert fd.torch_graph_break(obs(notes={"graph_break": [torch_own, torch_own]})) is None
    info = fd.torch_graph_break(obs(notes={"graph_break": [backward, doctors, torch_own]}))
    assert info.severity == "info" and f"{step}:4" in info.title and "compiled_autograd" in info.fix
    warn = fd.torch_graph_break(obs(notes={"graph_break": [zero, backward, doctors, torch_own]}))
    assert warn.severity == "warning" and "at 1 graph breaks" in warn.title
    assert f"{step}:2 (x1)" in warn.evidence and "(inherent)" in warn.evidence and "optimizer.py" not in warn.evidence
    assert "zero_grad" in warn.fix and "fullgraph=True would fail" in warn.fix


def test_errors_and_ordering() -> None:
    err = {"type": "TracerBoolConversionError", "module": "jax.errors", "message": "Attempted boolean conversion",
           "traceback_tail": 'File "t.py", line 9, in train_step\n    if loss > 1.0:'}
    found = fd.diagnose(obs(error=err, compile_s=5.0, wall_s=10.0))
    assert [f.id for f in found] == ["script-error", "jax-python-control-flow", "compile-dominates"]
    assert "jax-python-control-flow" in found[0].fix and "jnp.where" in found[1].fix
    assert fd.serious(found) and not fd.serious([f for f in found if f.severity == "info"])
    assert fd.diagnose(obs()) == []


def test_page_faults_need_both_the_faults_and_the_kernels_share(monkeypatch) -> None:
    from twinbench import host_malloc

    monkeypatch.setattr(host_malloc, "thp_mode", lambda: "madvise")
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    machine = {"page_faults_per_s": 368_000.0, "kernel_cpu_share": 0.31, "window_s": 3.0, "cores": 2}
    found = fd.page_faults(obs(step_ms=100.0, machine=machine))  # a small GPT's XLA:CPU step, as measured
    assert found is not None and found.severity == "warning"
    assert "144 MiB of fresh memory" in found.title and "31%" in found.title
    assert "36,800 a step" in found.evidence
    assert "GLIBC_TUNABLES=glibc.malloc.hugetlb=1 in its environment" in found.fix  # huge pages first: no memory cost
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1")  # the script has them and still faults
    kept = fd.page_faults(obs(step_ms=100.0, machine=machine)).fix
    assert "GLIBC_TUNABLES=glibc.malloc.hugetlb=1:glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0:" in kept
    assert "already asks for huge pages" in kept
    monkeypatch.delenv("GLIBC_TUNABLES")
    monkeypatch.setattr(host_malloc, "thp_mode", lambda: "never")  # no huge pages here: keep freed memory instead
    no_thp = fd.page_faults(obs(step_ms=100.0, machine=machine)).fix
    assert "GLIBC_TUNABLES=glibc.malloc.arena_max=1" in no_thp and "hugetlb" not in no_thp
    assert "no transparent huge pages" in no_thp
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.tcache_count=0")  # another tunable of the user's: kept
    other = fd.page_faults(obs(step_ms=100.0, machine=machine)).fix
    assert "GLIBC_TUNABLES=glibc.malloc.tcache_count=0:glibc.malloc.arena_max=1" in other
    assert "no transparent huge pages" in other
    assert fd.page_faults(obs(step_ms=100.0, machine=machine | {"kernel_cpu_share": 0.05})) is None
    assert fd.page_faults(obs(step_ms=100.0, machine=machine | {"page_faults_per_s": 5_000.0})) is None  # 500 a step
    assert fd.page_faults(obs(step_ms=100.0, steady_steps=1, machine=machine)) is None
    # a busy machine: the faults may not be the script's allocations alone, but they are said, at info, to be
    # checked idle (issue 73: 104-128k faults a second and 14-20% in the kernel got nothing; the fix gained ~38%)
    busy = fd.page_faults(obs(step_ms=100.0, machine=machine | {"others_cores": 1.2}))
    assert busy.severity == "info" and "busy machine" in busy.fix and not fd.serious([busy])
    assert fd.page_faults(obs(step_ms=100.0, machine=machine | {"others_cores": 0.1})) is not None
    # a step compiled again every time faults for its compiler: jax-recompile's, not this finding's
    assert fd.page_faults(obs(step_ms=100.0, machine=machine, per_step={"compiles": 1.0, "compile_s:s": 0.09})) is None
    assert fd.page_faults(obs(step_ms=100.0, machine={"others_cores": 0.0})) is None  # not measured
    # costed on the machine: 36,800 faults of 1.5 µs in a step of one core's 100 ms are 55% of its CPU time
    costed = fd.page_faults(obs(step_ms=100.0, machine=machine | {"fault_us": 1.5, "own_cores": 1.0}))
    assert costed is not None and "1.5 µs each (measured on this machine) are 31%" in costed.evidence  # <= kernel's
    # a tokeniser's 3,300 faults a step of 130 ms at 2.7 µs: 7% of its CPU time, though the kernel had 14%
    tokeniser = {"page_faults_per_s": 25_400.0, "kernel_cpu_share": 0.14, "window_s": 3.0, "cores": 2,
                 "own_cores": 1.0, "fault_us": 2.7}
    assert fd.page_faults(obs(step_ms=130.0, machine=tokeniser)) is None
    assert fd.page_faults(obs(step_ms=130.0, machine=tokeniser | {"fault_us": 5.0})) is not None  # 13%
    assert "page-faults" in fd.IDS and fd.page_faults in fd.CHECKS


def test_the_recorder_measures_the_page_faults_of_its_window() -> None:
    import mmap
    import sys
    import time

    import pytest

    from twinbench.doctor.recorder import Recorder

    if not sys.platform.startswith("linux"):
        pytest.skip("page faults of fresh anonymous memory: Linux")
    rec = Recorder()
    t0 = time.perf_counter()
    for _ in range(3):
        m = mmap.mmap(-1, 8 << 20)
        m.madvise(mmap.MADV_NOHUGEPAGE)
        for off in range(0, 8 << 20, mmap.PAGESIZE):
            m[off] = 1
        m.close()
        time.sleep(0.4)
        rec._sample_load(time.perf_counter())
    machine = rec.machine_load(t0, time.perf_counter())
    assert machine is not None and machine["page_faults_per_s"] * machine["window_s"] >= 2 * 2048
    assert 0 <= machine["kernel_cpu_share"] <= 1
