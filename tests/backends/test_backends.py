"""The framework backends: each provides every member of the Backend protocol, and they are the only place
that branches on the framework's name (a ratchet on the branches left elsewhere)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from twinbench import backends
from twinbench.backends.common import RecordFields
from twinbench.strategies.base import JaxStepTrainer, TorchModuleTrainer

SRC = Path(__file__).resolve().parents[2] / "src" / "twinbench"
#: framework branches outside backends/ when they became the place for them; lower it as branches move there
BRANCHES_ELSEWHERE = 0
NAME = r"""["'](?:jax|torch)["']"""
#: a branch on which framework runs: its name compared (either side), the Framework enum compared or matched
#: (``is Framework.JAX``, ``case "torch":``), or the name in a literal set (``in ("jax", ...)``)
BRANCH = re.compile(rf"""[!=]=\s*{NAME}|{NAME}\s*[!=]=|\bis(?:\s+not)?\s+Framework\.|[!=]=\s*Framework\.|"""
                    rf"""Framework\.\w+\s*[!=]=|\bcase\s+(?:{NAME}|Framework\.)|\bin\s*[(\[{{][^)\]}}]*{NAME}""")
#: ... but not a loop over a literal of names (``for fw in ("jax", "torch")``: each in turn, none chosen)
LOOP = re.compile(r"""\bfor\s+[\w, ()]+?\s+in\s*[(\[{][^)\]}]*[)\]}]""")


def branches(line: str) -> bool:
    """Whether ``line`` branches on which framework runs (:data:`BRANCH`, its loops left out)."""
    return bool(BRANCH.search(LOOP.sub("", line)))


@pytest.mark.parametrize("name", ["torch", "jax"])
def test_each_backend_provides_the_whole_protocol(name):
    backend = backends.get(name)
    members = [m for m in backends.Backend.__dict__ if not m.startswith("_")]
    members += list(backends.Backend.__annotations__)
    assert [m for m in members if not hasattr(backend, m)] == []
    assert name == backend.NAME


def test_an_unknown_framework_is_a_one_line_error():
    with pytest.raises(ValueError, match="no backend for framework 'mxnet'"):
        backends.get("mxnet")


def test_what_only_one_framework_records(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_flag=1")
    assert backends.get("jax").record_fields("chunked") == RecordFields(xla_flags="--xla_cpu_flag=1",
                                                                        attention_impl="chunked")
    # the torch twins read no --attention-impl and no XLA flags, whatever the spec says
    assert backends.get("torch").record_fields("chunked") == RecordFields(xla_flags=None, attention_impl="default")
    assert backends.get("jax").attention_impl("splash") == "splash"
    assert backends.get("torch").attention_impl("splash") == "default"


def test_the_memory_protocols_and_labels():
    assert backends.get("jax").MEMORY_PROTOCOL is JaxStepTrainer
    assert backends.get("torch").MEMORY_PROTOCOL is TorchModuleTrainer
    assert backends.get("jax").attention_label(2, 32, 16, "bf16", True, False, "cudnn") == "cudnn (fused)"
    assert backends.get("jax").lean_attention("tpu") == "splash"
    assert backends.get("torch").lean_attention("tpu") == ""


def test_process_index_reads_torchrun_s_rank_alone(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    assert backends.get("torch").process_index(1) == 3
    assert backends.get("jax").process_index(1) == 3  # one JAX process: torchrun's rank where it set one


def test_what_each_framework_asks_of_the_spec_and_the_platform():
    jax, torch = backends.get("jax"), backends.get("torch")
    assert jax.remat_refusal("dots-saveable") == "" and torch.remat_refusal("full") == ""
    assert torch.remat_refusal("dots-saveable").startswith("--remat-policy dots-saveable: torch +remat recomputes whole blocks")
    assert "6 bf16 passes" in jax.fp32_matmul_words("tpu", False) and jax.fp32_matmul_words("gpu", True) == "tf32"
    assert torch.fp32_matmul_words("gpu", False) == "fp32 (no TF32)" and torch.fp32_matmul_words("cpu", True) == "tf32"
    assert (jax.TWIN_OPTION, torch.TWIN_OPTION) == ("jax-twin", "")


def test_how_a_run_s_processes_start(monkeypatch):
    jax, torch = backends.get("jax"), backends.get("torch")
    assert jax.process_env(4, 2) == {"JAX_NUM_CPU_DEVICES": "2", "JAX_CPU_COLLECTIVES_IMPLEMENTATION": "gloo"}
    assert jax.process_env(1, 1) == {} and torch.process_env(4, 1) == {}
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    torch.join(1, "", -1)  # not a torchrun rank: joins nothing (and imports no torch.distributed)
    jax.join(1, "", -1)  # one process: nothing to join
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert jax.cpu_peaks(2, 4, 2) == 2  # JAX's simulated devices share their process's threads
    assert torch.cpu_peaks(1, 4, 2) == 4 and torch.cpu_peaks(1, 4, 4) == 2  # ranks at once: cores / threads


def test_framework_branches_stay_in_the_backends():
    found = [f"{p.relative_to(SRC)}:{i}" for p in sorted(SRC.rglob("*.py")) if "backends" not in p.parts
             for i, line in enumerate(p.read_text().splitlines(), 1) if branches(line)]
    assert len(found) <= BRANCHES_ELSEWHERE, (
        f"{len(found)} branches on the framework's name outside src/twinbench/backends (at most "
        f"{BRANCHES_ELSEWHERE}): ask backends.get(framework) instead\n" + "\n".join(found))


@pytest.mark.parametrize(("line", "counted"), [
    ('if spec.framework == "jax":', True), ("if 'torch' != fw:", True), ("if side.framework is Framework.JAX:", True),
    ("if fw != Framework.TORCH:", True), ('    case "torch":', True), ('ok = fw in ("jax", "torchax")', True),
    ('if fw not in {"torch"}:', True), ('for fw in ("jax", "torch"):', False),
    ('libs = [k for k in ("jax", "torch") if k in v]', False), ("backends.get(spec.framework).NAME", False),
])
def test_the_ratchet_sees_every_way_of_branching_on_a_framework(line, counted):
    assert branches(line) is counted


def test_the_doctor_s_trace_of_a_script_s_steps(tmp_path):
    import torch

    backend = backends.get("torch")
    started = backend.start_trace(tmp_path)
    for i in range(2):
        with backend.step_annotation(i):
            torch.ones(4) @ torch.ones(4)
        backend.wait_dispatched()
    assert backend.stop_trace(started, tmp_path) == ["doctor.pt.trace.json"]
    text = (tmp_path / "doctor.pt.trace.json").read_text()
    assert "ProfilerStep#1" in text and "ProfilerStep#2" in text  # the steps as profile.step() names them
    assert type(backends.get("jax").step_annotation(0)).__name__ == "StepTraceAnnotation"
