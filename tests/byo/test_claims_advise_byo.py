"""`claims --model` and `advise --model`: which claims take a user model (their runs on it, jit read as torchax
or the port), and the one line of the others; no run is started here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from twinbench.claims import suite
from twinbench.claims.core import Setup, select
from twinbench.claims.user import ANY_MODEL, NEEDS_TWIN, jax_name, split
from twinbench.plan import RunFields
from twinbench.spec import SpecError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "byo"
LLAMA, PORT = f"{EXAMPLES / 'llama.py'}:build", f"{EXAMPLES / 'llama_jax.py'}:build_jax"


def test_every_claim_either_takes_a_user_model_or_says_why_not():
    ids = [c.id for c in select(None)]
    assert sorted(ids, key=lambda i: int(i[1:])) == sorted([*ANY_MODEL, *NEEDS_TWIN], key=lambda i: int(i[1:]))
    runnable, lines = split(select("C2,C6,C12"))
    assert [c.id for c in runnable] == ["C6", "C12"]
    assert lines == ["C2 needs a twin: it measures scan-steps (K steps per lax.scan call), which runs the twins only"]
    with pytest.raises(SpecError, match=r"none of C2, C10 can take a user model .*those that can: C6, C7, C8, C12"):
        split(select("C2,C10"))


def test_jax_twin_names_read_as_the_user_models_jax_side():
    assert [jax_name(n, False) for n in ("jit", "jit+bf16", "mesh-dp", "mesh-fsdp")] == [
        "torchax", "torchax+bf16", "torchax-mesh-dp", "torchax-mesh-fsdp"]
    assert [jax_name(n, True) for n in ("jit", "mesh-dp")] == ["port", "port-mesh-dp"]


def test_claim_runs_on_a_user_model_are_user_specs():
    setup = Setup(quick=True, gpt="tiny", top=RunFields(user_model=LLAMA), repeats=1)
    per_claim, specs = suite.plan(select("C6,C12"), setup)
    assert {s.model.family for s in specs} == {"user"} and all(s.user.user_model.endswith("llama.py:build") for s in specs)
    assert {(s.framework, s.strategy.name) for s in per_claim["C6"].values()} == {
        ("torch", "eager"), ("torch", "compile"), ("jax", "torchax")}
    assert {(s.strategy.name, s.launch.devices) for s in per_claim["C12"].values()} == {("torchax-mesh-dp", 1), ("torchax-mesh-dp", 2)}
    port = Setup(quick=True, gpt="tiny", top=RunFields(user_model=LLAMA, user_jax_model=PORT), repeats=1)
    assert {s.strategy.name for s in suite.plan(select("C12"), port)[1]} == {"port-mesh-dp"}


@pytest.mark.parametrize("args, message", [
    (["claims", "--quick", "--only", "C2,C13", "--model", LLAMA], "none of C2, C13 can take a user model"),
    (["claims", "--only", "C6", "--jax-model", PORT], "give --model FILE.py:build too"),
    (["advise", "--model", LLAMA, "--strategies", "scan-steps"], "jax:scan-steps with a user model (--model): a user model has no NNX twin"),
])
def test_claims_and_advise_refuse_in_one_line(args, message, tmp_path):
    p = subprocess.run([sys.executable, "-m", "twinbench.cli", *args, "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and message in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not (tmp_path / "o").exists()
