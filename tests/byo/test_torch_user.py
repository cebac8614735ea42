"""The torch strategies over a user's module: the twins' trainers (in-process: torch only, torchax never imported)."""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from twinbench.byo import family as fam
from twinbench.byo import load_torch
from twinbench.spec import from_preset, with_precision

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "byo" / "llama.py"


def spec(strategy: str):
    s = from_preset("tiny", {"layers": 2, "d_model": 32, "heads": 2})
    s = s.evolve(model=replace(s.model, family="user"), train=replace(s.train, task="custom"),
                user_model=f"{EXAMPLE}:build", framework="torch", strategy=strategy)
    return with_precision(s)


def initial(s):
    torch.manual_seed(s.train.seed)
    um = load_torch(s.user.user_model, fam.config(s))
    assert fam.dropout_off(um.module) == 2  # the example's two blocks each hold an nn.Dropout(0.1)
    assert all(m.p == 0.0 for m in um.module.modules() if isinstance(m, torch.nn.Dropout))  # kept, p = 0
    return fam.state_numpy(um.module), um


def test_eager_and_bf16_train_the_user_module_from_the_given_weights(monkeypatch):
    from twinbench.strategies.torch_eager import build

    for name in [m for m in sys.modules if m == "torchax" or m.startswith("torchax.")]:
        monkeypatch.delitem(sys.modules, name)  # another test of this worker may have imported it: not this one

    weights, um = initial(spec("eager"))
    x, y = um.batch(0)
    with torch.no_grad():
        want = float(um.loss_fn(um.module, torch.from_numpy(x), torch.from_numpy(y)))
    fp32 = build(spec("eager"), weights)
    bf16 = build(spec("eager+bf16"), weights)
    assert bf16.autocast and not fp32.autocast
    assert type(fp32).__name__ == "TorchTrainer"  # the twins' trainer, not a user-only one
    losses = [float(fp32.step(*um.batch(i))) for i in range(3)]
    assert losses[0] == pytest.approx(want, rel=1e-6)  # the step starts from exactly the given weights
    assert float(bf16.step(x, y)) == pytest.approx(want, rel=2e-2)  # bf16 compute, same function
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]
    after = fp32.weights()
    assert set(after) == set(weights) and not all((after[k] == weights[k]).all() for k in weights)
    assert "torchax" not in sys.modules


def test_remat_checkpoints_each_user_block_and_trains_the_same_function():
    from twinbench.strategies.torch_eager import build

    weights, um = initial(spec("eager"))
    plain, remat = build(spec("eager"), weights), build(spec("eager+remat"), weights)
    assert all(getattr(b.forward, "remat", False) for b in remat.model.blocks)
    assert not any(getattr(b.forward, "remat", False) for b in plain.model.blocks)
    for i in range(2):
        assert float(remat.step(*um.batch(i))) == pytest.approx(float(plain.step(*um.batch(i))), rel=1e-6)


def test_compile_regional_compiles_each_user_block_and_nothing_else():
    from twinbench.strategies.torch_compile import build_regional

    weights, _ = initial(spec("compile-regional"))
    t = build_regional(spec("compile-regional"), weights)
    compiled = [m for m in t.model.modules() if getattr(m, "_compiled_call_impl", None) is not None]
    assert compiled == list(t.model.blocks)  # the blocks UserModel.blocks names; no step run (no compile)


def test_flops_count_linear_weights_once_plus_the_attention_term():
    s = spec("eager")
    _, um = initial(s)
    linear = sum(m.weight.numel() for m in um.module.modules() if isinstance(m, torch.nn.Linear))
    assert fam.flops_per_token(um) == 6 * linear + 12 * 2 * 32 * s.train.seq
    assert fam.n_params(um.module) == sum(p.numel() for p in um.module.parameters())


def test_user_family_gives_the_family_contract_names(tmp_path):
    from twinbench.byo.family import UserFamily
    from twinbench.byo.prepare import prepare

    s = spec("eager")
    meta = prepare(s, tmp_path, with_ref=False)
    f = UserFamily(s.evolve(user_dir=str(tmp_path)))
    assert (f.name, f.task) == ("user", "custom") and "compile-regional" in f.supports
    model = f.torch_model(s.model, None)
    weights = f.init_weights(s.model, s.train.seed)
    assert set(weights) == set(model.state_dict())
    assert all((model.state_dict()[k].numpy() == v).all() for k, v in weights.items())
    assert f.torch_blocks(model) == list(model.blocks)
    assert f.flops_per_token(s.model, s.train.seq) == meta.flops_per_token
    assert f.n_params(weights) == meta.n_params == sum(p.numel() for p in model.parameters())
    x, y = (torch.from_numpy(a) for a in load_torch(s.user.user_model, fam.config(s)).batch(0))
    assert float(f.torch_loss(model, x, y)) == pytest.approx(meta.loss0, rel=1e-6)
    with pytest.raises(NotImplementedError, match="no NNX form"):
        f.jax_model(s.model, None, None)
