"""examples/flax_port: a PyTorch classifier and its two Flax ports (NNX, and linen with a TrainState step), as a
user brings them to ``twinbench compare --model ... --jax-model ...``: each port maps the torch weights onto its own
parameters, passes twinbench's parity check, and is measured beside the torch module."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import jax
import numpy as np
import pytest

from twinbench.byo import UserConfig

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "flax_port"
TINY = {"layers": 2, "d_model": 32, "heads": 2, "steps": 4, "warmup": 1}
CFG = UserConfig(layers=2, d_model=32, heads=2, d_ff=0, vocab=64, context=16, batch=4, seq=16, seed=0)


def example(name: str) -> ModuleType:
    """The example file imported as twinbench's loader imports it (a module of its own, in sys.modules, which
    linen's dataclasses need)."""
    if f"flax_port_{name}" not in sys.modules:
        spec = importlib.util.spec_from_file_location(f"flax_port_{name}", EXAMPLE / f"{name}.py")
        sys.modules[spec.name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[f"flax_port_{name}"]


def own_params(port: str) -> object:
    """The shapes of the port's own parameters, as its framework initialises them (abstractly: nothing runs)."""
    m = example(port)
    if port == "model_nnx":
        from flax import nnx

        return nnx.state(nnx.eval_shape(lambda: m.Classifier(CFG, nnx.Rngs(0)))).to_pure_dict()
    x = jax.ShapeDtypeStruct((CFG.batch, CFG.seq), np.int32)
    return jax.eval_shape(m.classifier(CFG).init, jax.random.key(0), x)["params"]


@pytest.mark.parametrize("port", ["model_nnx", "model_linen"])
def test_to_jax_gives_the_ports_own_parameters(port):
    """Every torch tensor lands on a parameter of the port, with its shape: the same tree as the framework's own."""
    import torch

    torch.manual_seed(0)
    state = {k: v.numpy() for k, v in example("model_torch").build(CFG).module.state_dict().items()}
    mapped = example(port).to_jax(state)
    shapes = lambda tree: jax.tree.map(lambda a: tuple(a.shape), tree)  # noqa: E731
    assert jax.tree.structure(shapes(mapped)) == jax.tree.structure(shapes(own_params(port)))
    assert shapes(mapped) == shapes(own_params(port))
    assert sum(a.size for a in jax.tree.leaves(mapped)) == sum(a.size for a in state.values())


@pytest.mark.heavy  # compiles the port's loss and its 10 parity steps in process
def test_the_linen_port_passes_the_parity_check_and_its_train_state_step_is_the_same_loss(tmp_path):
    from twinbench.byo import parity, prepare
    from twinbench.plan import build_specs

    spec = build_specs("tiny", "jax", "port", TINY, user_model=f"{EXAMPLE / 'model_torch.py'}:build",
                       user_jax_model=f"{EXAMPLE / 'model_linen.py'}:build_jax")[0]
    prepare.prepare(spec, tmp_path, with_ref=True)
    result = parity.check(spec, tmp_path)
    assert result.ok, result
    assert result.loss_rel < 1e-5 and result.grad_rel < 1e-5 and result.steps_abs < 1e-5
    # the user's own TrainState step differentiates the loss twinbench measured: its first loss is the torch loss
    import optax
    from safetensors.numpy import load_file

    linen, cfg = example("model_linen"), UserConfig.from_spec(spec)
    state = linen.create_state(cfg, linen.to_jax(load_file(str(tmp_path / "init.safetensors"))), optax.adamw(1e-3))
    x, y = example("model_torch").batches(cfg)(0)
    _, loss = linen.train_step(state, x, y)
    assert float(loss) == pytest.approx(result.loss_torch, rel=1e-5)


@pytest.mark.slow  # a real compare: the preparation and parity processes, then one process per run
def test_compare_measures_the_nnx_port_beside_its_torch_model(tmp_path):
    js = tmp_path / "r.json"
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in TINY.items()]
    p = subprocess.run([sys.executable, "-m", "twinbench.cli", "compare", "--preset", "tiny", *flags,
                        "--model", f"{EXAMPLE / 'model_torch.py'}:build",
                        "--jax-model", f"{EXAMPLE / 'model_nnx.py'}:build_jax", "--strategies", "eager,port",
                        "--out", str(tmp_path / "out"), "--json", str(js)], capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "parity of the JAX port against the torch model: OK" in p.stdout
    records = {r["strategy"]: r for r in json.loads(js.read_text())}
    assert [records[s]["status"] for s in ("eager", "port")] == ["ok", "ok"]
    assert records["port"]["parity"]["ok"] and records["port"]["compiles_during_steps"] == 0
    assert records["port"]["losses"] == pytest.approx(records["eager"]["losses"], rel=1e-4)
