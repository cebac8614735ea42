"""The Llama twins compute the same function: logits, loss and every gradient agree between PyTorch and JAX
from the same canonical weights; names, scan-layers and the round trip are exact."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from twinbench.data.text import batches, synthetic_corpus
from twinbench.models.llama import FAMILY, PRESETS, init_llama
from twinbench.models.llama import model_jax as llama_jax
from twinbench.models.llama import model_torch as llama_torch
from twinbench.models.llama.shape import kv_heads
from twinbench.models.options import ModelOptions
from twinbench.models.weights import (
    canonical_to_jax,
    canonical_to_torch,
    jax_to_canonical,
    torch_to_canonical,
)
from twinbench.spec import ModelConfig

CFG = ModelConfig(family="llama", layers=2, d_model=64, heads=4, d_ff=176, vocab=256, context=32)
LINEARS = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight", "gate_proj.weight",
           "up_proj.weight", "down_proj.weight", "lm_head.weight")


@pytest.fixture(scope="module")
def twins():
    weights = init_llama(CFG, seed=0)
    tm = llama_torch.Llama(CFG)
    canonical_to_torch(tm, weights)
    jm = llama_jax.Llama(CFG, nnx.Rngs(0))
    canonical_to_jax(jm, weights)
    x, y = next(batches(synthetic_corpus(n_bytes=20_000), batch=3, seq=32, seed=0))
    return weights, tm, jm, x, y


def test_canonical_names_and_shapes_match_both_models():
    weights = init_llama(CFG, seed=0)
    native_t, native_j = torch_to_canonical(llama_torch.Llama(CFG)), jax_to_canonical(llama_jax.Llama(CFG, nnx.Rngs(0)))
    assert set(weights) == set(native_t) == set(native_j)
    for name, w in native_t.items():
        assert weights[name].shape == w.shape == native_j[name].shape, name
    assert kv_heads(CFG) == 2 and weights["layers.0.self_attn.k_proj.weight"].shape == (64, 32)  # grouped-query
    assert not any(n.endswith("bias") for n in weights)  # no biases
    assert weights["lm_head.weight"].shape == (64, 256)  # untied head


def test_logits_and_loss_match(twins):
    _, tm, jm, x, y = twins
    with torch.no_grad():
        lt = tm(torch.from_numpy(x)).numpy()
        loss_t = llama_torch.loss_fn(tm, torch.from_numpy(x), torch.from_numpy(y)).item()
    lj = np.asarray(jm(jnp.asarray(x)))
    assert lt.shape == lj.shape == (3, 32, 256)
    assert np.max(np.abs(lt - lj)) <= 2e-5
    loss_j = float(llama_jax.loss_fn(jm, jnp.asarray(x), jnp.asarray(y)))
    assert abs(loss_t - loss_j) / loss_t <= 1e-5


def test_every_gradient_matches(twins):
    _, tm, jm, x, y = twins
    tm.zero_grad()
    llama_torch.loss_fn(tm, torch.from_numpy(x), torch.from_numpy(y)).backward()
    grads_t = {n: p.grad.numpy().T if n.endswith(LINEARS) else p.grad.numpy() for n, p in tm.named_parameters()}
    grads_j = nnx.grad(llama_jax.loss_fn)(jm, jnp.asarray(x), jnp.asarray(y))
    tmp = llama_jax.Llama(CFG, nnx.Rngs(0))
    nnx.update(tmp, grads_j)
    grads_j = jax_to_canonical(tmp)
    assert set(grads_t) == set(grads_j)
    for name, gt in grads_t.items():
        scale = np.max(np.abs(gt))
        assert scale > 0, name
        assert np.max(np.abs(gt - grads_j[name])) <= 1e-5 + 1e-3 * scale, name


def test_scan_layers_is_the_same_model(twins):
    weights, _, jm, x, _ = twins
    scanned = llama_jax.Llama(CFG, nnx.Rngs(0), ModelOptions(scan_layers=True, remat="full"))
    canonical_to_jax(scanned, weights)
    np.testing.assert_allclose(np.asarray(scanned(jnp.asarray(x))), np.asarray(jm(jnp.asarray(x))), atol=2e-5)
    assert set(jax_to_canonical(scanned)) == set(weights)


def test_round_trip_is_bit_exact():
    tm = llama_torch.Llama(CFG)  # torch's own random init
    before = {k: v.clone() for k, v in tm.state_dict().items()}
    jm = llama_jax.Llama(CFG, nnx.Rngs(3))
    canonical_to_jax(jm, torch_to_canonical(tm))
    back = llama_torch.Llama(CFG)
    canonical_to_torch(back, jax_to_canonical(jm))
    for k, v in back.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_presets_and_parameter_counts():
    assert set(PRESETS) == {"llama-tiny", "llama-small", "llama-300m"}
    big = PRESETS["llama-300m"][0]
    n = FAMILY.n_params(FAMILY.hf.shapes(big) and {k: np.empty(s, np.int8) for k, s in FAMILY.hf.shapes(big).items()})
    assert n == 301_507_584  # ~300M
    small = PRESETS["llama-small"][0]
    assert FAMILY.n_params(init_llama(small, 0)) == sum(p.numel() for p in llama_torch.Llama(small).parameters())
