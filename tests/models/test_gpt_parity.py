"""The twin GPT is the same model in both frameworks: logits, loss, gradients, AdamW steps, weights.

Tolerances (float32 on CPU): logits max |diff| <= 2e-5 absolute (values are O(1)), loss relative <= 1e-5,
every gradient max |diff| <= 1e-5 + 1e-3 * max |grad| of that tensor, 10-step loss trajectory relative
<= 1e-4 per step. The round trip torch -> canonical -> JAX -> canonical -> torch is bit-exact.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from twinbench import hlo_text
from twinbench.data.text import batches, synthetic_corpus
from twinbench.models.gpt import init_gpt
from twinbench.models.gpt import model_jax as gpt_jax
from twinbench.models.gpt import model_torch as gpt_torch
from twinbench.models.weights import (
    canonical_to_jax,
    canonical_to_torch,
    jax_to_canonical,
    torch_to_canonical,
)
from twinbench.spec import ModelConfig, RunSpec, TrainConfig

CFG = ModelConfig(layers=2, d_model=64, heads=4, vocab=256, context=32)


@pytest.fixture(scope="module")
def twins():
    weights = init_gpt(CFG, seed=0)
    tm = gpt_torch.GPT(CFG)
    canonical_to_torch(tm, weights)
    jm = gpt_jax.GPT(CFG, nnx.Rngs(0))
    canonical_to_jax(jm, weights)
    x, y = next(batches(synthetic_corpus(n_bytes=20_000), batch=3, seq=32, seed=0))
    return weights, tm, jm, x, y


def test_canonical_names_match_both_models():
    weights = init_gpt(CFG, seed=0)
    assert set(weights) == set(torch_to_canonical(gpt_torch.GPT(CFG)))
    assert set(weights) == set(jax_to_canonical(gpt_jax.GPT(CFG, nnx.Rngs(0))))
    for name, w in torch_to_canonical(gpt_torch.GPT(CFG)).items():
        assert weights[name].shape == w.shape, name


def test_native_init_follows_gpt2(twins):
    """Both native initialisations: std 0.02, residual projections 0.02/sqrt(2L), LayerNorm 1/0."""
    for native in (torch_to_canonical(gpt_torch.GPT(CFG)), jax_to_canonical(gpt_jax.GPT(CFG, nnx.Rngs(1)))):
        assert abs(native["blocks.0.mlp.c_fc.weight"].std() - 0.02) < 0.002
        assert abs(native["blocks.0.mlp.c_proj.weight"].std() - 0.02 / np.sqrt(4)) < 0.001
        assert np.all(native["ln_f.weight"] == 1) and np.all(native["blocks.1.attn.c_attn.bias"] == 0)


def test_logits_and_loss_match(twins):
    _, tm, jm, x, y = twins
    with torch.no_grad():
        lt = tm(torch.from_numpy(x)).numpy()
        loss_t = gpt_torch.loss_fn(tm, torch.from_numpy(x), torch.from_numpy(y)).item()
    lj = np.asarray(jm(jnp.asarray(x)))
    assert lt.shape == lj.shape == (3, 32, 256)
    assert np.max(np.abs(lt - lj)) <= 2e-5
    loss_j = float(gpt_jax.loss_fn(jm, jnp.asarray(x), jnp.asarray(y)))
    assert abs(loss_t - loss_j) / loss_t <= 1e-5


def test_every_gradient_matches(twins):
    _, tm, jm, x, y = twins
    tm.zero_grad()
    gpt_torch.loss_fn(tm, torch.from_numpy(x), torch.from_numpy(y)).backward()
    grads_t = {n: p.grad.numpy().T if n.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight"))
               else p.grad.numpy() for n, p in tm.named_parameters()}
    grads_j = nnx.grad(gpt_jax.loss_fn)(jm, jnp.asarray(x), jnp.asarray(y))
    tmp = gpt_jax.GPT(CFG, nnx.Rngs(0))
    nnx.update(tmp, grads_j)
    grads_j = jax_to_canonical(tmp)
    assert set(grads_t) == set(grads_j)
    for name, gt in grads_t.items():
        scale = np.max(np.abs(gt))
        assert scale > 0, name
        assert np.max(np.abs(gt - grads_j[name])) <= 1e-5 + 1e-3 * scale, name


def test_ten_adamw_steps_follow_the_same_trajectory():
    """Through the real strategies (torch eager, JAX whole-step jit): same losses, same final weights."""
    from twinbench.strategies import jax_jit, torch_eager

    spec = RunSpec(model=CFG, train=TrainConfig(batch=4, seq=32, lr=3e-3, steps=10))
    weights = init_gpt(CFG, seed=0)
    data = list(zip(range(10), batches(synthetic_corpus(n_bytes=50_000), 4, 32, seed=1), strict=False))
    tt, jt = torch_eager.build(spec, weights), jax_jit.build(spec, weights)
    lt = [float(tt.step(x, y)) for _, (x, y) in data]
    lj = [float(jt.step(x, y)) for _, (x, y) in data]
    rel = np.abs(np.array(lt) - np.array(lj)) / np.array(lt)
    assert rel.max() <= 1e-4, rel
    assert lt[-1] < lt[0] - 0.3  # it is really training
    wt, wj = tt.weights(), jt.weights()
    assert max(np.max(np.abs(wt[k] - wj[k])) for k in wt) <= 1e-4
    # the compiled JAX step (in the jit's cache: no compile more): where XLA:CPU makes matmul fusions (YNNPACK), every
    # dot is inside one; the attention's dk left to JAX's transpose of the scores' einsum was a standalone dot, which
    # XLA runs slower (layers_jax.attention_scores; benchmarks/twin_programs.py prints the count)
    text = jt.explain_hlo(*data[-1][1])
    if "__ynn_fusion" in text:
        module = hlo_text.parse(text)
        assert not [i.op_name for i in module.computations[module.entry] if i.opcode == "dot"]


def test_naive_port_is_the_same_maths():
    from twinbench.strategies import jax_jit, jax_naive

    spec = RunSpec(model=CFG, train=TrainConfig(batch=4, seq=32, lr=3e-3, steps=3))
    weights = init_gpt(CFG, seed=0)
    data = [b for _, b in zip(range(3), batches(synthetic_corpus(n_bytes=50_000), 4, 32, seed=2), strict=False)]
    naive, jit = jax_naive.build(spec, weights), jax_jit.build(spec, weights)
    ln = [float(naive.step(x, y)) for x, y in data]
    lj = [float(jit.step(x, y)) for x, y in data]
    np.testing.assert_allclose(ln, lj, rtol=1e-5)


def test_round_trip_is_bit_exact():
    tm = gpt_torch.GPT(CFG)  # torch's own random init
    before = {k: v.clone() for k, v in tm.state_dict().items()}
    jm = gpt_jax.GPT(CFG, nnx.Rngs(3))
    canonical_to_jax(jm, torch_to_canonical(tm))
    back = gpt_torch.GPT(CFG)
    canonical_to_torch(back, jax_to_canonical(jm))
    for k, v in back.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_wrong_weights_are_refused():
    weights = init_gpt(CFG, seed=0)
    other = init_gpt(ModelConfig(layers=3, d_model=64, heads=4, vocab=256, context=32), seed=0)
    with pytest.raises(ValueError, match="do not fit"):
        canonical_to_torch(gpt_torch.GPT(CFG), other)
    bad = dict(weights, **{"wte.weight": np.zeros((10, 64), np.float32)})
    with pytest.raises(ValueError, match="shape"):
        canonical_to_jax(gpt_jax.GPT(CFG, nnx.Rngs(0)), bad)
