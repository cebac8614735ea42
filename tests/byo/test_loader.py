"""The --model / --jax-model protocol: what a user's file must give, and one-line errors when it does not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from twinbench.byo import UserConfig, UserModel, UserModelError, load_jax, load_torch, map_to_jax
from twinbench.byo.plan import select
from twinbench.spec import SpecError, from_preset

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "byo"
CFG = UserConfig(layers=2, d_model=32, heads=2, d_ff=0, vocab=64, context=16, batch=2, seq=16, seed=0)

GOOD_TAIL = '''
import numpy as np, torch
def _batch(i):
    return np.zeros((2, 4), np.int64), np.zeros((2, 4), np.int64)
def _loss(m, x, y):
    return m(x.float()).mean()
'''


def write(tmp_path: Path, body: str) -> str:
    path = tmp_path / "mine.py"
    path.write_text(GOOD_TAIL + body)
    return str(path)


@pytest.mark.parametrize(("body", "ref_suffix", "message"), [
    ("", ":build", "mine.py defines no 'build'"),
    ("def build(cfg):\n    raise RuntimeError('no GPU here')\n", ":build", "build(cfg) raised RuntimeError: no GPU here"),
    ("def build(cfg):\n    return 42\n", ":build", "build(cfg) returned int; expected a twinbench.byo.UserModel"),
    ("def build(cfg):\n    return ([1], _loss, _batch)\n", ":build", "is a list, not a torch.nn.Module"),
    ("def build(cfg):\n    return (torch.nn.Linear(4, 1), 3, _batch)\n", ":build", "loss_fn of build(cfg) is not callable"),
    ("raise ImportError('needs apex')\n", ":build", "importing mine.py raised ImportError: needs apex"),
    ("build = 3\n", ":build", "'build' is not a function (int)"),
    ("def make(cfg):\n    return (torch.nn.Linear(4, 1), _loss, _batch)\n", ":build", "defines no 'build'"),
])
def test_bad_model_files_get_one_line_errors(tmp_path, body, ref_suffix, message):
    ref = write(tmp_path, body) + ref_suffix
    with pytest.raises(UserModelError) as e:
        load_torch(ref, CFG)
    assert message in str(e.value) and "\n" not in str(e.value)
    assert str(e.value).startswith(f"--model {ref}")


def test_missing_file_and_tuple_form(tmp_path):
    with pytest.raises(UserModelError, match="no such file"):
        load_torch(str(tmp_path / "nope.py") + ":build", CFG)
    ref = write(tmp_path, "def make(cfg):\n    return (torch.nn.Linear(4, 1), _loss, _batch)\n") + ":make"
    um = load_torch(ref, CFG)
    assert isinstance(um, UserModel) and um.blocks is None


def test_the_examples_follow_the_protocol():
    um = load_torch(f"{EXAMPLES / 'llama.py'}:build", CFG)
    x, y = um.batch(3)
    assert x.shape == y.shape == (2, 16) and (x[:, 1:] == y[:, :-1]).all()
    assert (um.batch(3)[0] == x).all()  # deterministic in i
    port = load_jax(f"{EXAMPLES / 'llama_jax.py'}:build_jax", CFG)
    assert callable(port.loss_fn) and callable(port.to_jax)


def test_dict_mapping_to_jax():
    import numpy as np

    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = map_to_jax({"lin.weight": ("layer.kernel", "T"), "norm.weight": "norm.scale"},
                     {"lin.weight": w, "norm.weight": w[0]})
    assert out["layer"]["kernel"].shape == (3, 2) and (out["norm"]["scale"] == w[0]).all()


def test_strategy_selection_for_user_models():
    assert select(["torch", "jax"], None, port=False) == [("torch", "eager"), ("torch", "compile-regional"),
                                                          ("jax", "torchax")]
    assert ("jax", "port") in select(["torch", "jax"], None, port=True)
    assert select(["torch", "jax"], ["eager+bf16", "torchax"], port=False) == [("torch", "eager+bf16"),
                                                                            ("jax", "torchax")]
    with pytest.raises(SpecError, match=r"jax:jit with a user model .*: a user model has no NNX twin"):
        select(["torch", "jax"], ["jit"], port=False)
    with pytest.raises(SpecError, match="give --jax-model"):
        select(["torch", "jax"], ["port"], port=False)
    assert select(["torch", "jax"], ["eager+remat"], port=False) == [("torch", "eager+remat")]
    assert select(["torch", "jax"], ["torchax+remat"], port=False) == [("jax", "torchax+remat")]
    with pytest.raises(SpecError, match=r"modifier 'remat' does not apply to jax 'port' \(the user's port runs as "
                       r"written: it has no remat form\); allowed: nodonate"):
        select(["torch", "jax"], ["port+remat"], port=True)


def test_twins_refuse_user_only_strategies_and_all_excludes_them():
    from twinbench.strategies import registry

    with pytest.raises(SpecError, match=r"give --model FILE\.py:build"):
        registry.select(["torch", "jax"], ["port"])
    assert registry.select(["torch", "jax"], ["torchax"]) == [("jax", "torchax")]  # a twin's torch module too
    assert not {n for _, n in registry.select(["torch", "jax"], ["all"])} & {"port", "torchax-mesh-dp"}


def test_run_id_ignores_where_the_initial_weights_were_written():

    s = from_preset("tiny", {})
    assert s.evolve(user_dir="/a").run_id() == s.evolve(user_dir="/b").run_id()


def twinbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "twinbench.cli", *args], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize(("body", "message"), [
    (None, "no such file"),
    ("def build(cfg):\n    return 42\n", "build(cfg) returned int"),
    ("def build(cfg):\n    return (torch.nn.Linear(4, 1), _loss, lambda i: 3)\n", "batch(0) must return a pair"),
    ("class Noisy(torch.nn.Linear):\n    def forward(self, x):\n        return super().forward(x + torch.rand(x.shape))\n"
     "def build(cfg):\n    return (torch.nn.Sequential(Noisy(4, 1)), _loss, _batch)\n", "torch.rand in module 0"),
])
def test_compare_with_a_bad_model_exits_2_with_one_line_and_runs_nothing(tmp_path, body, message):
    ref = (write(tmp_path, body) if body else str(tmp_path / "missing.py")) + ":build"
    out = tmp_path / "out"
    p = twinbench("compare", "--model", ref, "--preset", "tiny", "--steps", "3", "--warmup", "1",
                  "--out", str(out))
    assert p.returncode == 2, p.stderr[-2000:]
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in p.stderr
    assert not (out / "results.jsonl").exists()


def test_jax_model_without_model_is_a_user_error():
    p = twinbench("compare", "--jax-model", "x.py:build_jax", "--preset", "tiny")
    assert p.returncode == 2 and "give --model FILE.py:build too" in p.stderr
