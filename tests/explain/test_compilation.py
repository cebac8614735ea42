"""Compilation is a row, never idle (issue 73): the time a step spends compiling, in a JAX profile (XLA's backend
compile and jit's tracing and lowering) or a torch trace (``torch.compile``'s Dynamo and Inductor passes), is
``rest / compilation`` with its count, and the doctor's log beside the trace says how many compiled over the run
and which shapes caused it.

The fixture (tests/explain/fixtures/recompile_*.py, recorded by ``twinbench doctor --trace`` on the shared 2-core
machine): a small jitted classifier whose batch is padded to its own longest sequence, so every step traces and
compiles again, against the same classifier in eager PyTorch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.explain.test_corpus import FIX, _doctor_dir
from tests.explain.typed import plain, side
from twinbench.explain import breakdown, causes, command, compilation, doctor_timing, taxonomy, torch_trace

QUIET = {"others_cores": 0.05, "cores": 2, "busy": False}


def _pair(tmp: Path, load: dict[str, Any] | None = None) -> dict[str, Any]:
    load = load or QUIET
    t = _doctor_dir(tmp, "tr-torch", "recompile_torch.json.gz", "recompile_torch.doctor.json", load=load)
    j = _doctor_dir(tmp, "tr-jax", "recompile_jax.xplane.pb.gz", "recompile_jax.doctor.json",
                    "recompile_jax.hlo.txt.gz", load=load)
    return plain(command.explain_traces(str(t), str(j)))


def test_a_recompiling_jax_step_is_compilation_not_idle(tmp_path: Path) -> None:
    r = _pair(tmp_path)
    rows = {x["row"]: x for x in r["rows"]}
    comp, idle = rows["rest / compilation"], rows["rest / idle"]
    assert comp["diff_ms"] > 0.9 * r["gap_ms"], (comp, r["gap_ms"])
    assert idle["b_ms"] < 0.05 * r["b"]["step_ms"], idle
    assert r["b"]["steps_used"] == r["b"]["steps_traced"] == 5  # a step that compiled is not "disturbed"
    assert r["b"]["compiles"] == 5  # one backend compile a traced step: each step has a new length
    assert r["b"]["categorized_share"] >= 0.9  # of the ops' time: the compile is no op


def test_the_summary_says_compilation_with_the_doctors_count_and_shapes(tmp_path: Path) -> None:
    s = _pair(tmp_path)["summary"]
    assert "compilation +2.0 s a step on jax:tr-jax: 11 compiles in 12 steps (twinbench doctor)" in s, s
    assert "caused by the shape of ids (i32[8,24] against i32[8,16]: its dimension 1, the sequence length)" in s, s
    assert "(see the doctor's jax-recompile)" in s and "host time no op covers" not in s, s


def test_the_compilation_facts_a_joined_answer_reads(tmp_path: Path) -> None:
    f = compilation.facts(_pair(tmp_path)["b"])
    assert f is not None
    assert f.compiles == 11 and f.steps == 12 and f.finding == "jax-recompile" and f.cause == "shape"
    assert f.argument == "ids" and f.shapes == ["i32[8,24]", "i32[8,16]"] and f.axes == [1]
    assert f.ms > 1000 and f.traced_compiles == 5 and f.traced_steps == 5


def test_compile_event_names() -> None:
    """The names the profilers give a compiler at work (JAX 0.4-0.10, PJRT CPU/GPU, torch 2.x's dynamo_timed),
    and names that are not one (a compiled region running, the guard check every call makes, an XLA op)."""
    for name in ("backend_compile", "backend_compile_and_load", "PjRtCpuClient::Compile",
                 "PjRtStreamExecutorClient::Compile", "GpuCompiler::RunHloPasses", "CpuCompiler::RunBackend",
                 "$pjit.py:466 _trace_for_jit", "lower_sharding_computation", "_compile.compile_inner (dynamo_timed)",
                 "compile_fx_inner (dynamo_timed)", "inductor_do_bench_using_profiling", "GemmFusionAutotuner"):
        assert taxonomy.compile_event(name), name
    for name in ("Torch-Compiled Region: 0/0", "TorchDynamo Cache Lookup", "PjitFunction(train_step)",
                 "ynn_fusion.54", "aten::addmm", "CompiledFunction"):
        assert not taxonomy.compile_event(name), name


def test_compile_time_is_the_union_within_each_step() -> None:
    events = [(0.0, 10.0, "backend_compile"), (2.0, 8.0, "PjRtCpuClient::Compile"), (15.0, 30.0, "trace_to_jaxpr")]
    ms, n = breakdown.compile_time([(0.0, 20.0), (20.0, 40.0)], events)
    assert ms == [15.0, 10.0] and n == [1, 0]
    _, outer = breakdown.compile_time([(0.0, 40.0)], [(0.0, 5.0, "a (dynamo_timed)"), (1.0, 2.0, "b (dynamo_timed)"),
                                                       (6.0, 9.0, "c (dynamo_timed)")])
    assert outer == [2]  # no event that is one compile each: each outermost one is


def _ev(name: str, ts: float, dur: float, cat: str = "cpu_op") -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}


def test_a_torch_compile_frame_compiling_in_a_step_is_compilation(tmp_path: Path) -> None:
    """SYNTHETIC torch trace: four steps of 1 ms of addmm; the second compiles a frame (Dynamo's
    ``_compile.compile_inner``, 5 ms, running aten ops on fake tensors and AOT's ``backend_compile`` inside, as a
    real torch 2.13 trace records them): that step is kept, its 5 ms are compilation (the ops inside it none of
    their own), one compile is counted, and no step is said to be disturbed."""
    events, t = [], 0.0
    for i in range(4):
        comp = 5000.0 if i == 1 else 0.0
        events.append(_ev(f"ProfilerStep#{i}", t, 1100 + comp, "user_annotation"))
        if comp:
            events += [_ev("_compile.compile_inner (dynamo_timed)", t + 10, comp),  # torch 2.13 records a cpu_op
                       _ev("aten::addmm", t + 20, 3000), _ev("backend_compile", t + 3100, 1000)]  # AOT's, inside
        events.append(_ev("aten::addmm", t + 20 + comp, 1000))
        t += 1100 + comp + 10
    (tmp_path / "t.json").write_text(json.dumps({"traceEvents": events}))
    b = torch_trace.read(str(tmp_path / "t.json"))
    assert (b.steps_used, b.compiles) == (4, 1)
    assert b.cells["rest"]["compilation"] == pytest.approx(5.0 / 4, rel=1e-6)
    assert b.cells["forward"]["matmul"] == pytest.approx(1.0, rel=1e-6)


def test_the_doctor_writes_its_compile_log_and_explain_reads_it(tmp_path: Path) -> None:
    import msgspec

    from twinbench.doctor import trace

    miss = ("TRACING CACHE MISS at /u/train.py:20:4 (train_step) because:\n  all previously seen cache keys differ."
            " For the closest previous key:\n  different input types:\n  * at ids, now i32[32,55] and before "
            "i32[32,39]")
    obs = {"trace_timing": {}, "steady_from_t": 1.0, "steps": 60,
           "notes": {"compile": [{"t": 2.0, "fn": "train_step", "s": 0.4}] * 24,
                     "cache_miss": [{"t": 2.0, "message": miss}] * 24}}
    log = msgspec.to_builtins(trace.compile_log(obs))  # what write_timing adds to DIR/trace.json as "compiles"
    (tmp_path / "trace.json").write_text(json.dumps({"framework": "jax", "steps": [4, 5], "compiles": log}))
    got = doctor_timing.conditions(str(tmp_path), tmp_path / "x.xplane.pb").compiles
    assert got is not None
    assert got.compiles == 24 and got.steps == 60 and got.finding == "jax-recompile"
    assert got.causes == {"shape": 24} and got.shapes and got.shapes[0] == "at ids, now i32[32,55] and before i32[32,39]"
    e = {"run": "jax:x", "cells": {"rest": {"compilation": 10300.0}}, "recorded": {"compiles": got}}
    said = compilation.said({"diff_ms": 10300.0}, {"run": "torch:y"}, e)
    assert said == ("compilation +10.3 s a step on jax:x: 24 compiles in 60 steps (twinbench doctor), caused by the "
                    "shape of ids (i32[32,55] against i32[32,39]: its dimension 1, the sequence length) (see the "
                    "doctor's jax-recompile)")
    assert doctor_timing.compile_log({"compiles": "24", "shapes": [3]}) is None  # a malformed log: nothing


def test_the_clocks_median_step_leaves_out_compiles_of_few_steps(tmp_path: Path) -> None:
    """The doctor's clock is a median step: where fewer than half the steps compiled (here 5 of 60), it leaves
    them out, the traced gap it is held to leaves the compilation row out too, and the summary says so; where
    most steps compiled (the fixture: 11 of 12), the median has them and nothing is said."""
    assert "the clock's step is a median" not in _pair(tmp_path / "most")["summary"]
    log = {**json.loads((FIX / "recompile_jax.doctor.json").read_text())["compiles"], "steps": 60, "retraces": 5}
    t = _doctor_dir(tmp_path / "few", "tr-torch", "recompile_torch.json.gz", "recompile_torch.doctor.json", load=QUIET)
    j = _doctor_dir(tmp_path / "few", "tr-jax", "recompile_jax.xplane.pb.gz", "recompile_jax.doctor.json",
                    "recompile_jax.hlo.txt.gz", load=QUIET, compiles=log)
    r = plain(command.explain_traces(str(t), str(j)))
    c = plain(causes.clock(side(r["a"]), side(r["b"])))
    assert c is not None and set(c["compile_left_out"]) == {"jax:tr-jax"}
    assert c["traced_gap_ms"] == pytest.approx(r["gap_ms"] - c["compile_left_out"]["jax:tr-jax"])
    assert "the clock's step is a median, which leaves out the steps that compiled on jax:tr-jax" in r["summary"]


def test_a_changing_dimension_is_named_only_where_the_shape_says_what_it_is() -> None:
    assert compilation._named_axis("f32[8,16]", [0]) == ", the batch"
    assert compilation._named_axis("i32[32,55]", [1]) == ", the sequence length"  # token ids: [batch, length]
    assert compilation._named_axis("f32[32,55,64]", [1]) == ""  # activations: not told
    assert compilation._named_axis("i32[32,55]", [0, 1]) == ""


def test_what_the_doctor_writes_beside_its_trace_is_what_explain_reads(tmp_path: Path) -> None:
    """The doctor's keys of DIR/trace.json (observations.TraceTimes, its writer's declaration) and explain's
    reader (doctor_timing.Timing and Conditions, which also bound what a file may hold) declare the same fields,
    and every one written comes back as written."""
    import msgspec

    from twinbench.doctor import observations as o

    assert set(o.TraceTimes.__struct_fields__) == {*doctor_timing.Timing.__struct_fields__,
                                                   *doctor_timing.Conditions.__struct_fields__}
    assert set(o.CompileLog.__struct_fields__) == set(doctor_timing.CompileLog.__struct_fields__)
    assert set(o.Load.__struct_fields__) == set(doctor_timing.Load.__struct_fields__)
    log = o.CompileLog(steps=60, compiles=24, compile_s=9.6, retraces=24, causes={"shape": 24},
                       shapes=["at ids, now i32[32,55] and before i32[32,39]"], finding="jax-recompile")
    written = o.TraceTimes(traced_step_ms=60.0, traced_steps=4, untraced_step_ms=20.0, untraced_steps=9,
                           untraced_spread=0.05, load=o.Load(others_cores=1.6, cores=2, busy=True),
                           step_kind="jax-eager", eager_ops_per_step=245.0, compiles=log)
    (tmp_path / "trace.json").write_text(written.merged('{"framework": "jax", "steps": [4, 5]}'))
    timing, note = doctor_timing.read(str(tmp_path), tmp_path / "x.xplane.pb")
    got = doctor_timing.conditions(str(tmp_path), tmp_path / "x.xplane.pb")
    assert note is None and timing is not None
    assert {**msgspec.to_builtins(timing), **msgspec.to_builtins(got)} == msgspec.to_builtins(written)
