"""torchax on this torch, parity of torch and torchax on a user model, and torchax kept out of torch runs.

The checks run in fresh processes (tests/byo/child.py): torchax changes global torch settings on import. The
compat layer, the parity and the dropout models share one process (the compat check first, before anything
imports torchax); the torch run that must never import torchax has its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = Path(__file__).with_name("child.py")


def child(modes: str, tmp_path: Path) -> dict:
    out = tmp_path / "child.json"
    p = subprocess.run([sys.executable, str(CHILD), modes, str(out)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def torchax_child(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """compat (first: the plain import before the compatibility layer), parity and dropout-models, one process."""
    return child("compat,parity,dropout-models", tmp_path_factory.mktemp("torchax-child"))


def test_compat_layer_imports_torchax_where_the_plain_import_fails(torchax_child):
    r = torchax_child["compat"]
    if r["needs_patch"]:  # torch >= 2.13: the plain import fails on a removed named-tensor overload
        assert "dim_Dimname" in r["plain"]
        assert "aten.prod.dim_Dimname" in r["patched"]
        assert all("imname" in n.lower() or "names" in n for n in r["patched"])
        assert len(set(r["patched"])) >= 20  # the 21 overloads of torchax 0.0.13 (google/torchax issue 101)
    else:  # an older torch: torchax is imported untouched
        assert r["plain"] == "ok" and r["patched"] == []
    assert r["value"] == 8.0  # torch.prod on a JAX array of 2s, run by torchax


def test_torch_and_torchax_agree_on_loss_gradients_and_steps(torchax_child):
    r = torchax_child["parity"]
    assert r["loss_torchax"] == pytest.approx(r["loss_torch"], rel=1e-5)
    assert r["n_grads"] == r["n_params"]  # every trained parameter has a gradient
    assert r["grad_rel"] < 1e-4
    assert r["steps_torchax"] == pytest.approx(r["steps_torch"], abs=1e-4)
    assert r["steps_torch"][-1] < r["steps_torch"][0]  # the steps do train
    assert r["round_trip_exact"]  # torchax trainer's weights() gives back the state_dict layout


def test_torchax_bf16_runs_a_user_module_in_bf16(torchax_child):
    r = torchax_child["parity"]
    assert r["loss_torchax_bf16"] == pytest.approx(r["loss_torch"], rel=2e-2)  # the same function
    assert r["loss_torchax_bf16"] != r["loss_torchax"]  # computed in bf16, not fp32


def test_torchax_bf16_of_a_user_model_is_planned_without_precision_given():
    from twinbench.byo.plan import build_specs
    from twinbench.spec import SpecError

    model = f"{Path(__file__).resolve().parents[2] / 'examples' / 'byo' / 'llama.py'}:build"
    (spec,) = build_specs("tiny", ["jax"], ["torchax+bf16"], {}, user_model=model)
    assert (spec.strategy.name, spec.train.precision) == ("torchax+bf16", "bf16")
    (spec,) = build_specs("tiny", ["jax"], ["torchax"], {"precision": "bf16"}, user_model=model)
    assert spec.strategy.name == "torchax+bf16"
    port = f"{Path(__file__).resolve().parents[2] / 'examples' / 'byo' / 'llama_jax.py'}:build_jax"
    with pytest.raises(SpecError, match=r"--precision bf16: jax 'port' of a user model runs fp32 only"):
        build_specs("tiny", ["jax"], ["port"], {"precision": "bf16"}, user_model=model, user_jax_model=port)


def test_a_torch_run_of_a_user_model_never_imports_torchax(tmp_path):
    r = child("torch-worker", tmp_path)["torch-worker"]
    assert r["status"] == "ok"
    assert r["torchax_imported"] is False
    assert "nn.Linear" in r["flops_convention"]


@pytest.mark.slow
def test_models_with_dropout_left_on_train_the_same_function_in_torch_and_torchax(torchax_child):
    """torch's nn.TransformerEncoder (dropout 0.1, MultiheadAttention's included) and Hugging Face BERT (sdpa
    and eager attention, default dropout): every step within 1e-5 relative, the first within 1e-6."""
    r = torchax_child["dropout-models"]
    assert r["encoder"]["switched"] == 8  # 3 nn.Dropout + MultiheadAttention's float, in each of 2 layers
    for name in ("encoder", "bert_sdpa", "bert_eager"):
        eager, jax_losses = r[name]["eager"], r[name]["torchax"]
        assert jax_losses[0] == pytest.approx(eager[0], rel=1e-6), name
        assert jax_losses == pytest.approx(eager, rel=1e-5), name
        assert len(set(eager)) == len(eager), name  # the weights do change from step to step
        assert r[name]["int_params"] == [], name  # integer buffers (BERT's position_ids) are not trained
    assert len(r["encoder"]["eager"]) == 12
    assert r["bert_sdpa"]["switched"] > 0
    doctor = r["encoder"]["doctor"]
    assert "error" not in doctor and isinstance(doctor.get("findings"), list)  # the doctor watched the torchax run


UNLOWERABLE = '''
import numpy as np
import torch
from torch import nn

from twinbench.byo import UserModel


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(1, 4, 3, padding=1)
        self.features = nn.Sequential(nn.ReLU(), nn.FractionalMaxPool2d(2, output_size=4))
        self.head = nn.Linear(4 * 4 * 4, 10)

    def forward(self, x):
        return self.head(self.features(self.stem(x)).flatten(1))


def batch(i):
    rng = np.random.default_rng(i)
    return rng.standard_normal((2, 1, 8, 8)).astype(np.float32), rng.integers(0, 10, 2)


def build(cfg):
    return UserModel(module=Net(), loss_fn=lambda m, x, y: nn.functional.cross_entropy(m(x), y), batch=batch)
'''


@pytest.mark.slow
def test_an_operator_torchax_cannot_lower_is_one_line_naming_it_and_its_layer_exit_2(tmp_path):
    """nn.FractionalMaxPool2d runs aten::fractional_max_pool2d, which torchax 0.0.13 has no lowering for."""
    model = tmp_path / "net.py"
    model.write_text(UNLOWERABLE)
    p = subprocess.run([sys.executable, "-m", "twinbench.cli", "compare", "--model", f"{model}:build", "--preset",
                        "tiny", "--steps", "2", "--warmup", "1", "--strategies", "torchax", "--out",
                        str(tmp_path / "out")], capture_output=True, text=True, timeout=600)
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    error = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.startswith("error:")]
    assert len(error) == 1, p.stdout + p.stderr
    assert "aten::fractional_max_pool2d" in error[0] and "features.1 (FractionalMaxPool2d)" in error[0], error
    assert "Traceback" not in p.stdout + p.stderr
