"""The ranked answer (explain/answer.py): the doctor's findings beside two traces joined with their gap rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.explain.typed import side as typed_side
from twinbench.explain import answer


def side(run: str, cells: dict[str, dict[str, float]], untraced: float | None = None,
         spread: float = 0.5, untraced_steps: int = 8) -> dict[str, Any]:
    step = sum(v for row in cells.values() for v in row.values())
    out: dict[str, Any] = {"run": run, "step_ms": step, "cells": cells, "step_spread_ms": spread}
    if untraced is not None:
        out["measured"] = {"untraced_step_ms": untraced, "traced_step_ms": step, "untraced_steps": untraced_steps}
    return out


def _join(result: dict[str, Any], arg_a: str, arg_b: str) -> answer.Answer | None:
    """answer.join of a pair written as the dicts of its sides (and its ``noise_ms`` where given)."""
    return answer.join(typed_side(result["a"]), typed_side(result["b"]), result.get("noise_ms"), arg_a, arg_b)


def finding(id: str, severity: str = "warning", **kw: str) -> dict[str, str]:
    return {"id": id, "severity": severity, "title": id, "evidence": f"{id}'s evidence", "fix": f"{id}'s fix",
            "doc": "", "location": "train.py:12 (def train_step)", **kw}


def folder(tmp: Path, name: str, findings: list[dict[str, str]], obs: dict[str, Any] | None = None) -> str:
    d = tmp / name
    d.mkdir()
    (d / answer.NAME).write_text(json.dumps({"findings": findings, "script": f"{name}.py", "steps": 12,
                                             "observations": obs or {"per_step": {}, "notes": {}}}))
    return str(d)


TORCH = {"forward": {"matmul": 2.0, "element-wise": 1.0}, "backward": {"matmul": 3.0}, "optimizer": {"optimizer": 1.0},
         "rest": {"idle": 1.0}}


def recompiling(compile_ms: float = 400.0) -> dict[str, dict[str, float]]:
    return {"forward": {"matmul": 1.5, "element-wise": 0.5}, "backward": {"matmul": 2.5},
            "optimizer": {"optimizer": 0.5}, "rest": {"idle": 2.0, "compilation": compile_ms}}


def test_the_recompiles_are_the_first_cause_sized_by_the_compilation_row(tmp_path: Path) -> None:
    a = folder(tmp_path, "torch", [finding("cpu-oversubscribed")])
    b = folder(tmp_path, "flax", [finding("jax-recompile"), finding("compile-dominates", "info", caused_by="jax-recompile"),
                                  finding("jax-no-donation", "info")])
    result = {"a": side("torch:t", TORCH), "b": side("jax:f", recompiling())}
    log = {"compiles": 11, "steps": 12, "causes": {"shape": 11}, "shapes": ["at x, now i32[8,58] and before i32[8,64]"]}
    result["b"].update(compiles=5, steps_used=5, recorded={"compiles": log})  # explain's compilation facts
    got = _join(result, a, b)
    assert got is not None and got.slower == "jax:f" and got.clock == "traced"
    first = got.causes[0]
    assert first.finding == "jax-recompile" and first.rows == ["rest / compilation"]
    assert first.ms == pytest.approx(400.0)
    assert "(5 compiles in the 5 traced steps, 11 in the run's 12 steps, caused by the shape of x (i32[8,58] against " \
        "i32[8,64]))" in first.what
    assert first.fix == "jax-recompile's fix" and first.location.startswith("train.py:12")
    assert got.unexplained_ms == pytest.approx(got.gap_ms - 400.0)
    said = dict(got.not_in_gap)
    assert said["compile-dominates"].startswith("caused by jax-recompile")  # not counted twice
    assert "faster side" in said["cpu-oversubscribed"] and "not time" in said["jax-no-donation"]
    text = "\n".join(answer.lines(got))
    # torch:t is slower in every other row: the causes add up to more than the gap, and the answer says so
    assert "1. 400.0 ms +-4.1 (98% of jax:f's step)" in text and "jax-recompile" in text and "1.0 ms the other way" in text


def test_rows_are_put_on_the_step_measured_without_the_profiler_and_the_clock_decides_the_slower_side(
        tmp_path: Path) -> None:
    """Traced, B is slower; the doctor's untraced clocks say A is: the answer is framed on A, its cause sized
    on A's untraced step (its rows scaled by untraced / traced)."""
    slow = {"forward": {"matmul": 2.0}, "rest": {"idle": 8.0}}  # traced 10 ms, untraced 20 ms
    fast = {"forward": {"matmul": 2.0}, "rest": {"idle": 10.0}}  # traced 12 ms, untraced 6 ms
    a = folder(tmp_path, "a", [finding("jax-host-sync")])
    b = folder(tmp_path, "b", [])
    got = _join({"a": side("jax:a", slow, untraced=20.0), "b": side("torch:b", fast, untraced=6.0)}, a, b)
    assert got is not None and got.slower == "jax:a" and got.clock == "untraced"
    assert got.gap_ms == pytest.approx(14.0)
    assert got.causes[0].finding == "jax-host-sync"
    assert got.causes[0].ms == pytest.approx(16.0 - 5.0)  # idle 8 x 2 against 10 x 0.5


def test_a_row_is_claimed_by_one_cause_and_a_cause_within_the_noise_is_not_named(tmp_path: Path) -> None:
    slow = {"forward": {"matmul": 2.0}, "rest": {"idle": 6.0}, "input": {"data movement": 0.7}}
    fast = {"forward": {"matmul": 2.0}, "rest": {"idle": 1.0}, "input": {"data movement": 0.5}}
    a = folder(tmp_path, "a", [])
    b = folder(tmp_path, "b", [finding("nnx-graph-overhead"), finding("jax-host-sync"),
                               finding("jax-host-transfer", "info")])
    got = _join({"a": side("torch:a", fast), "b": side("jax:b", slow, spread=1.0)}, a, b)
    assert got is not None
    assert [c.finding for c in got.causes] == ["nnx-graph-overhead"]  # the first of two of equal size claims idle
    said = dict(got.not_in_gap)
    assert said["jax-host-sync"] == "its rows (rest / idle) are counted with nnx-graph-overhead"
    assert "within the noise" in said["jax-host-transfer"]


def test_a_whole_side_finding_is_said_as_possibly_part_of_what_is_left_unsized(tmp_path: Path) -> None:
    """A thread pool oversubscribed slows every row: no rows are its own, so the trace cannot size it (taking all
    that was left named a torch pool 15.6 ms a step where its A/B gained 1.1)."""
    slow = {"forward": {"matmul": 6.0}, "backward": {"matmul": 9.0}, "rest": {"idle": 5.0}}
    a = folder(tmp_path, "a", [finding("cpu-oversubscribed"), finding("torch-host-sync")])
    b = folder(tmp_path, "b", [])
    got = _join({"a": side("torch:a", slow), "b": side("jax:b", TORCH)}, a, b)
    assert got is not None and got.slower == "torch:a"
    assert [(c.finding, c.ms) for c in got.causes] == [("torch-host-sync", pytest.approx(4.0))]
    assert got.unexplained_ms == pytest.approx(got.gap_ms - 4.0)
    assert [fid for fid, _ in got.unsized] == ["cpu-oversubscribed"]
    assert "the doctor's cpu-oversubscribed may be part: more threads" in "\n".join(answer.lines(got))


def thread_check(written: list[float], fixed: list[float]) -> dict[str, Any]:
    return {"threads": 8, "fixed": 1, "cores": 2, "others_cores": 1.5, "start": 4, "block": 4, "blocks": 4,
            "as_written_ms": written, "fixed_ms": fixed, "block_ms": []}


def test_a_whole_side_finding_with_the_doctors_ab_is_sized_by_its_gain(tmp_path: Path) -> None:
    """The thread check's A/B sizes cpu-oversubscribed: as written less fixed (medians) a step, its spread the +-;
    where its A/B did not confirm it (info), it is not in the gap, with the figures."""
    slow = {"forward": {"matmul": 6.0}, "backward": {"matmul": 9.0}, "rest": {"idle": 5.0}}
    ab = thread_check([21.0, 22.0, 20.0, 23.0, 21.5, 22.5], [9.0, 10.0, 8.0, 11.0, 9.5, 10.5])
    a = folder(tmp_path, "a", [finding("cpu-oversubscribed"), finding("torch-host-sync")],
               {"per_step": {}, "thread_check": ab})
    got = _join({"a": side("torch:a", slow), "b": side("jax:b", TORCH)}, a, folder(tmp_path, "b", []))
    assert got is not None and not got.unsized
    sized = {c.finding: c for c in got.causes}
    threads = sized["cpu-oversubscribed"]
    assert threads.ms == pytest.approx(21.75 - 9.75) and threads.rows == []
    assert threads.noise == pytest.approx(2.014, abs=1e-3)  # twice the medians' standard error (0.93 IQR/sqrt(n))
    assert threads.ab.startswith("confirmed by the doctor's A/B (21.75 -> 9.75")
    assert got.unexplained_ms == pytest.approx(got.gap_ms - 4.0 - 12.0)  # the host sync's 4 ms and the A/B's 12
    assert [c.finding for c in got.causes] == ["cpu-oversubscribed", "torch-host-sync"]
    # the A/B ran and the doctor did not confirm it: not in the gap, with its figures
    flat = thread_check([21.0, 22.0, 20.0, 23.0], [21.5, 20.5, 22.5, 21.0])
    c = folder(tmp_path, "c", [finding("cpu-oversubscribed", "info")], {"per_step": {}, "thread_check": flat})
    got = _join({"a": side("torch:c", slow), "b": side("jax:b", TORCH)}, c, folder(tmp_path, "d", []))
    assert got is not None and not got.causes and not got.unsized
    assert dict(got.not_in_gap)["cpu-oversubscribed"].startswith("its A/B did not confirm it: 21.50 -> 21.25 ms")


def test_the_doctors_own_ab_is_said(tmp_path: Path) -> None:
    slow = {"forward": {"matmul": 2.0}, "rest": {"idle": 12.0}}
    obs = {"read_check": {"waited_ms": 8.0, "deferred_ms": 3.0, "waited_n": 10, "deferred_n": 10}}
    a = folder(tmp_path, "a", [finding("jax-host-sync")], obs)
    got = _join({"a": side("jax:a", slow), "b": side("torch:b", TORCH)}, a, folder(tmp_path, "b", []))
    assert got is not None and got.causes[0].ab.startswith("confirmed by the doctor's A/B (8.00 -> 3.00")


def test_rows_no_finding_names_are_left_unexplained_and_listed(tmp_path: Path) -> None:
    slow = {"forward": {"matmul": 12.0}, "backward": {"matmul": 3.0}, "rest": {"idle": 1.0}}
    got = _join({"a": side("torch:a", TORCH), "b": side("jax:b", slow)}, folder(tmp_path, "a", []),
                      folder(tmp_path, "b", []))
    assert got is not None and not got.causes
    assert got.unexplained_ms == pytest.approx(got.gap_ms)
    assert got.unnamed_rows[0] == ("forward / matmul", pytest.approx(10.0))
    assert "ms unexplained; rows beyond the noise no finding names: forward / matmul +10.0 ms" in "\n".join(answer.lines(got))


def test_no_report_no_answer_and_a_broken_one_is_a_note(tmp_path: Path) -> None:
    result = {"a": side("torch:a", TORCH), "b": side("jax:b", recompiling())}
    plain = tmp_path / "plain"
    plain.mkdir()
    assert _join(result, str(plain), str(plain)) is None
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / answer.NAME).write_text(json.dumps({"findings": [{"id": 3}]}))
    got = _join(result, str(plain), str(bad))
    assert got is not None and "not twinbench doctor's report" in got.notes[0]
    assert answer.lines(got)[0].startswith("answer: ")
    (bad / answer.NAME).write_text("{not json")
    got = _join(result, str(bad), str(plain))
    assert got is not None and got.notes


def test_the_report_is_found_above_a_jax_profile(tmp_path: Path) -> None:
    d = Path(folder(tmp_path, "flax", []))
    run = d / "plugins" / "profile" / "2026_01_01"
    run.mkdir(parents=True)
    assert answer.doctor_file(str(run / "vm.xplane.pb")) == d / answer.NAME


def test_every_finding_the_doctor_can_make_has_its_rows_declared() -> None:
    from twinbench.doctor import findings

    ids = set(getattr(findings, "REGISTRY", None) or findings.IDS)
    assert ids <= set(answer.CAUSES), sorted(ids - set(answer.CAUSES))


def test_the_answer_survives_explains_json() -> None:
    a = answer.Answer(10.0, "untraced", "jax:b", "torch:a", [answer.Named("compilation", 9.0, 0.5, ["rest / compilation"],
                                                                    "jax-recompile")], 1.0, [("forward / matmul", 1.0)],
                      [("jax-no-donation", "memory")], [])
    back = msgspec.convert(json.loads(json.dumps(msgspec.to_builtins(a))), answer.Answer)
    assert back == a


def test_a_busy_machine_on_both_sides_alike_is_not_a_cause(tmp_path: Path) -> None:
    slow = {"forward": {"matmul": 6.0}, "backward": {"matmul": 9.0}, "rest": {"idle": 5.0}}
    a = folder(tmp_path, "a", [finding("cpu-oversubscribed", "info")])
    b = folder(tmp_path, "b", [finding("cpu-oversubscribed", "info")])
    got = _join({"a": side("torch:a", slow), "b": side("jax:b", TORCH)}, a, b)
    assert got is not None and not got.causes and got.unexplained_ms == pytest.approx(got.gap_ms)
    assert ("cpu-oversubscribed", "the whole side, and the faster side has it as well") in got.not_in_gap


def test_the_loops_wait_for_a_cpu_is_said(tmp_path: Path) -> None:
    obs = {"per_step": {"runq_s:s": 0.262}}
    d = tmp_path / "b"
    d.mkdir()
    (d / answer.NAME).write_text(json.dumps({"findings": [finding("jax-eager-ops")], "iter_ms": 401.5,
                                             "observations": obs}))
    slow = {"rest": {"idle": 380.0, "other": 20.0}}
    got = _join({"a": side("torch:a", TORCH), "b": side("jax:b", slow)}, folder(tmp_path, "a", []), str(d))
    assert got is not None and got.waits == [("jax:b", 262.0, 401.5)] and got.slow_step_ms == pytest.approx(400.0)
    assert got.causes[0].finding == "jax-eager-ops" and got.causes[0].ms == pytest.approx(400.0 - 1.0)
    assert "jax:b's loop waited 262.0 ms of its 401.5 ms iteration for a CPU" in "\n".join(answer.lines(got))


@pytest.mark.parametrize(("untraced", "steps", "why"), [(4299.8, 8, "over 4x apart"), (11.0, 1, "fewer than 2 steps")])
def test_a_clock_of_other_steps_puts_no_side_on_it(tmp_path: Path, untraced: float, steps: int, why: str) -> None:
    """The doctor's untraced step of 1 step, or 1000x the traced step (a compile, the doctor's own checks), is
    not a clock of the traced steps: neither side's rows are put on the clock, and the answer says why."""
    slow = {"forward": {"matmul": 2.0}, "rest": {"idle": 2.2}}
    got = _join({"a": side("torch:a", TORCH, untraced=9.0),
                       "b": side("jax:b", slow, untraced=untraced, untraced_steps=steps)},
                      folder(tmp_path, "a", []), folder(tmp_path, "b", [finding("jax-host-sync")]))
    assert got is not None and got.clock == "traced" and got.slower == "torch:a"
    assert got.gap_ms == pytest.approx(8.0 - 4.2) and why in got.notes[0]  # the traced steps, both sides


def test_what_the_doctor_keeps_beside_its_trace_is_what_the_answer_reads(tmp_path: Path) -> None:
    """The writer (twinbench doctor --trace: cli/doctor.keep_report) and the reader (answer.read_report) agree:
    the findings, their lines and fixes, and the doctor's own A/B come back typed."""
    from twinbench.cli.doctor import keep_report
    from twinbench.doctor import DoctorResult
    from twinbench.doctor.findings import Finding

    found = [Finding("jax-host-sync", "warning", "a read a step", "1 read a step", "read it every 100 steps",
                     location="train.py:40 `float(loss)`")]
    obs = {"steps": 12, "iter_ms": 9.5, "read_check": {"waited_ms": 9.5, "deferred_ms": 4.0, "waited_n": 8,
                                                       "deferred_n": 8}, "per_step": {"runq_s:s": 0.001}}
    keep_report(tmp_path, DoctorResult(found, obs, "", False), "train.py")
    got, note = answer.read_report(str(tmp_path))
    assert note is None and got is not None and got.script == "train.py" and got.iter_ms == 9.5
    assert got.findings[0].location == "train.py:40 `float(loss)`" and got.findings[0].fix == "read it every 100 steps"
    assert answer.CAUSES["jax-host-sync"].ab(got) == answer.AB(9.5, 4.0)


def test_on_the_doctors_mean_iteration_recompiles_count_at_the_runs_rate_not_the_traced_windows(
        tmp_path: Path) -> None:
    """Two of four traced steps compiled (400 ms a traced step), the run five times in forty: the answer puts each
    side on the doctor's mean iteration (what the loop's own clock shows), the compilation row at the run's rate
    (its mean less its steady step), the other rows on the steady step; the slower side is the one the means say."""
    def report(name: str, findings: list[dict[str, str]], iter_ms: float) -> str:
        d = folder(tmp_path, name, findings)
        doc = json.loads((Path(d) / answer.NAME).read_text())
        (Path(d) / answer.NAME).write_text(json.dumps({**doc, "iter_ms": iter_ms}))
        return d

    a = report("torch", [finding("cpu-oversubscribed", "info")], iter_ms=9.0)
    b = report("flax", [finding("jax-recompile"), finding("cpu-oversubscribed", "info")], iter_ms=110.0)
    result = {"a": side("torch:t", TORCH, untraced=8.0), "b": side("jax:f", recompiling(), untraced=6.0)}
    result["b"].update(compiles=2, steps_used=4, recorded={"compiles": {"compiles": 5, "steps": 40}})
    got = _join(result, a, b)
    assert got is not None and got.clock == "run" and got.slower == "jax:f"
    assert got.gap_ms == pytest.approx(101.0)  # the means: 110 - 9, not the traced window's 407 - 9
    first = got.causes[0]
    assert first.finding == "jax-recompile" and first.ms == pytest.approx(104.0)  # 110 less the steady 6 ms
    assert [f for f, _ in got.not_in_gap].count("cpu-oversubscribed") <= 1  # said once, not per side
    assert "mean iteration" in "\n".join(answer.lines(got))
    assert any("the summary above is on each side's median step" in n for n in got.notes)  # why two gap figures
