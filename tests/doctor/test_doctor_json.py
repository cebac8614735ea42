"""The doctor's data, typed end to end (issue 74): what the script's process writes (standard-library dataclasses,
doctor/observed.py) is what the doctor reads back (observations.Observations), and the report it writes
(report.DoctorReport: --json, doctor.json) keeps every key the reports written before it had, readable by explain."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import msgspec
import pytest

from twinbench.doctor import findings as fd
from twinbench.doctor.bootstrap import write_json
from twinbench.doctor.observations import (
    Attention,
    Carried,
    EagerFunction,
    EagerWork,
    FreshArg,
    Info,
    Note,
    Observations,
    ScriptError,
    StepProgram,
    TraceInfo,
    typed,
)
from twinbench.doctor.recorder import Recorder
from twinbench.doctor.report import DoctorReport, to_json

FIXTURE = Path(__file__).parent / "fixtures" / "pair_reports.json.gz"
REPORTS = {k: v["report"] for k, v in json.loads(gzip.decompress(FIXTURE.read_bytes()))["scripts"].items()}


def _keys_kept(old: object, new: object, where: str) -> None:
    """Every key of ``old`` is in ``new``, at every depth of the objects they share (a dict of the report's own
    keys; a counter's or a site's keys are data, compared alike)."""
    if isinstance(old, dict) and isinstance(new, dict):
        assert set(old) <= set(new), (where, sorted(set(old) - set(new)))
        for k, v in old.items():
            _keys_kept(v, new[k], f"{where}.{k}")


@pytest.mark.parametrize("name", sorted(REPORTS))
def test_the_report_keeps_every_key_of_the_reports_written_before(name: str) -> None:
    old = REPORTS[name]
    obs = typed(old["observations"])
    new = to_json(fd.diagnose(obs), obs, old["script"])
    _keys_kept(old, new, name)
    assert new["observations"]["steps"] == old["observations"]["steps"] and new["iter_ms"] == old["iter_ms"]
    assert typed(new["observations"]) == obs  # written and read back: the same observations
    back = msgspec.convert(json.loads(json.dumps(new)), DoctorReport)  # the report reads back as declared
    assert [f.id for f in back.findings] == [f["id"] for f in new["findings"]]
    from twinbench.explain.answer import DoctorReport as ExplainsReport  # and explain's reader takes it

    theirs = msgspec.convert(new, ExplainsReport)
    assert theirs.iter_ms == old["iter_ms"] and theirs.observations.read_check == obs.read_check


def test_what_the_scripts_process_writes_the_doctor_reads_back(tmp_path: Path) -> None:
    rec = Recorder()
    for i in range(6):  # a jitted step of 6 calls, 10 ms apart
        rec.calls["jit:step"].append((100.0 + 0.01 * i, {"compiles": 1}))
        rec.step_ready("jit:step", i, 100.0 + 0.01 * i + 0.008)
    rec.kinds["jit:step"] = "jit"
    rec.note("compile", fn="jit(step)", s=0.25)
    rec.note("cache_miss", message="TRACING CACHE MISS at /u/t.py:3", nested=True)
    rec.error = ScriptError(type="ValueError", module="builtins", message="bad", traceback_tail="File t.py")
    attention = Attention(kind="unfused", scores_shape=[2, 4, 16, 16], dtype="f32", scores_bytes=8192, causal=True)
    rec.info.step_program = StepProgram(eqns=40, backend="cpu", repeat={"period": 8, "copies": 4, "start": 0,
                                                                         "eqns": 40}, attention=attention)
    rec.info.carried = Carried(leaves=3, bytes=4096, device_bytes=4096)
    rec.info.fresh_args = [FreshArg(shape=[32, 8], bytes=1024, kind="numpy")]
    rec.info.eager_step = EagerWork(functions=[EagerFunction(name="apply", file="/u/t.py", line=7, params=["s", "n"],
                                                             static={"n": "an int"})], at="/u/t.py:9")
    rec.info.trace = TraceInfo(framework="jax", steps=[4, 5], files=["p.xplane.pb"])
    rec.info.jit_options = {"static_argnums": (1,)}  # the script's own options: free-form
    path = tmp_path / "observations.json"
    write_json(str(path), rec.observations())
    obs = typed(json.loads(path.read_text()))
    assert isinstance(obs, Observations) and obs.steps == 6 and obs.step_kind == "jit"
    assert obs.info.step_program is not None and obs.info.step_program.attention == attention
    assert obs.info.carried == Carried(leaves=3, bytes=4096, device_bytes=4096)
    assert obs.info.fresh_args[0].shape == [32, 8] and obs.info.eager_step.functions[0].static == {"n": "an int"}
    assert obs.info.trace.steps == [4, 5] and obs.info.jit_options == {"static_argnums": [1]}
    assert obs.error == rec.error and obs.noted("compile")[0].fn == "jit(step)" and obs.noted("cache_miss")[0].nested
    assert obs.counters == {} and obs.split is not None and obs.split.async_  # the split's "async" key, renamed
    # in this process (watch()), the same observations without the file between (a tuple option still a tuple)
    assert json.loads(json.dumps(msgspec.to_builtins(typed(rec.observations()).info))) == msgspec.to_builtins(obs.info)


def test_a_misspelled_fact_fails_where_it_is_written() -> None:
    info = Info()
    with pytest.raises(AttributeError):
        info.torch_optimizer = {}  # type: ignore[attr-defined]  (torch_optimizers)
    with pytest.raises(TypeError):
        Note(mesage="a cache miss")  # type: ignore[call-arg]
    with pytest.raises(AttributeError):
        typed({"steps": 3}).step_time_ms  # type: ignore[attr-defined]  # noqa: B018
    # read from JSON: a part the script's process declares refuses a key it does not declare, at any depth
    with pytest.raises(msgspec.ValidationError, match="torch_optimizer"):
        typed({"info": {"torch_optimizer": {}}})
    with pytest.raises(msgspec.ValidationError, match=r"scores_byte.*\$\.info\.step_program\.attention"):
        typed({"info": {"step_program": {"attention": {"scores_byte": 1}}}})
    with pytest.raises(msgspec.ValidationError, match="mesage"):
        typed({"notes": {"cache_miss": [{"t": 1.0, "mesage": "x"}]}})
    # ... but an older split or A/B's other keys are still read (Part, observations.LENIENT)
    assert typed({"read_check": {"waited_n": 3, "waited_s": 1.0}}).read_check.waited_n == 3
