"""The twin BERT is the same model in both frameworks: logits, loss, gradients, AdamW steps, masks.

Tolerances (float32 on CPU): logits max |diff| <= 2e-5 absolute, loss relative <= 1e-5, every gradient
max |diff| <= 1e-5 + 1e-3 * max |grad| of that tensor, 10-step loss trajectory relative <= 1e-4 per step.
The three padding-mask implementations (where, mul, cond) agree to 1e-5 in each framework.
"""

from __future__ import annotations

from dataclasses import replace

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from twinbench.models.bert import init_bert
from twinbench.models.bert import model_jax as bert_jax
from twinbench.models.bert import model_torch as bert_torch
from twinbench.models.weights import (
    canonical_to_jax,
    canonical_to_torch,
    jax_to_canonical,
    torch_to_canonical,
)
from twinbench.spec import ModelConfig

CFG = ModelConfig(family="bert", layers=2, d_model=64, heads=4, vocab=260, context=32, num_labels=3)


def make_batch(seed: int = 0, batch: int = 4, seq: int = 32, pad: bool = True):
    """(input_ids, token_type_ids, attention_mask) with ragged lengths, and labels."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(5, seq + 1, size=batch) if pad else np.full(batch, seq)
    if pad:
        lengths[0] = seq  # one full row: the longest sets the batch length
    pos = np.arange(seq)
    mask = (pos[None, :] < lengths[:, None]).astype(np.int32)
    ids = rng.integers(4, CFG.vocab, size=(batch, seq)).astype(np.int32) * mask
    types = ((pos[None, :] >= lengths[:, None] // 2) & (mask == 1)).astype(np.int32)
    labels = rng.integers(0, CFG.num_labels, size=batch).astype(np.int32)
    return (ids, types, mask), labels


def _torch(x):
    return tuple(torch.from_numpy(a) for a in x)


def _jax(x):
    return tuple(jnp.asarray(a) for a in x)


@pytest.fixture(scope="module")
def twins():
    weights = init_bert(CFG, seed=0)
    tm = bert_torch.BERT(CFG)
    canonical_to_torch(tm, weights)
    jm = bert_jax.BERT(CFG, nnx.Rngs(0))
    canonical_to_jax(jm, weights)
    return weights, tm, jm


def test_canonical_names_match_both_models_and_mirror_hugging_face():
    weights = init_bert(CFG, seed=0)
    native_t = torch_to_canonical(bert_torch.BERT(CFG))
    assert set(weights) == set(native_t) == set(jax_to_canonical(bert_jax.BERT(CFG, nnx.Rngs(0))))
    for name, w in native_t.items():
        assert weights[name].shape == w.shape, name
    for name in ("embeddings.word_embeddings.weight", "embeddings.token_type_embeddings.weight",
                 "encoder.layer.1.attention.self.query.weight", "encoder.layer.0.attention.output.LayerNorm.bias",
                 "encoder.layer.0.intermediate.dense.weight", "encoder.layer.0.output.dense.bias",
                 "pooler.dense.weight", "classifier.weight"):
        assert name in weights, name
    assert weights["encoder.layer.0.intermediate.dense.weight"].shape == (64, 256)  # linear: [in, out]


def test_logits_and_loss_match(twins):
    _, tm, jm = twins
    x, y = make_batch()
    with torch.no_grad():
        lt = tm(*_torch(x)).numpy()
        loss_t = bert_torch.loss_fn(tm, _torch(x), torch.from_numpy(y)).item()
    lj = np.asarray(jm(*_jax(x)))
    assert lt.shape == lj.shape == (4, 3)
    assert np.max(np.abs(lt - lj)) <= 2e-5
    loss_j = float(bert_jax.loss_fn(jm, _jax(x), jnp.asarray(y)))
    assert abs(loss_t - loss_j) / loss_t <= 1e-5


def _logits(model, x) -> np.ndarray:
    if isinstance(model, torch.nn.Module):
        with torch.no_grad():
            return model(*_torch(x)).numpy()
    return np.asarray(model(*_jax(x)))


def test_padding_is_masked(twins):
    """Changing the tokens under padding changes nothing; changing a real token does."""
    _, tm, jm = twins
    (ids, types, mask), _ = make_batch()
    assert mask[1].min() == 0
    other = ids.copy()
    other[mask == 0] = 7
    changed = ids.copy()
    changed[1, 1] = 9 if ids[1, 1] != 9 else 10
    for model in (tm, jm):
        a = _logits(model, (ids, types, mask))
        np.testing.assert_allclose(_logits(model, (other, types, mask)), a, atol=1e-6)
        assert np.max(np.abs(a[1] - _logits(model, (changed, types, mask))[1])) > 1e-6


def test_every_gradient_matches(twins):
    _, tm, jm = twins
    x, y = make_batch(seed=1)
    tm.zero_grad()
    bert_torch.loss_fn(tm, _torch(x), torch.from_numpy(y)).backward()
    lin = ("query.weight", "key.weight", "value.weight", "dense.weight", "classifier.weight")
    grads_t = {n: p.grad.numpy().T if n.endswith(lin) else p.grad.numpy() for n, p in tm.named_parameters()}
    grads_j = nnx.grad(bert_jax.loss_fn)(jm, _jax(x), jnp.asarray(y))
    tmp = bert_jax.BERT(CFG, nnx.Rngs(0))
    nnx.update(tmp, grads_j)
    grads_j = jax_to_canonical(tmp)
    assert set(grads_t) == set(grads_j)
    for name, gt in grads_t.items():
        scale = np.max(np.abs(gt))
        assert scale > 0, name
        assert np.max(np.abs(gt - grads_j[name])) <= 1e-5 + 1e-3 * scale, name


@pytest.mark.parametrize("pad", [True, False], ids=["padded", "unpadded"])
def test_mask_implementations_agree(twins, pad):
    """where, mul (0/1 mask times a large negative) and cond (lax.cond / Python if) give the same logits."""
    weights = twins[0]
    x, y = make_batch(seed=2, pad=pad)
    outs = {}
    for impl in ("where", "mul", "cond"):
        cfg = replace(CFG, mask_impl=impl)
        tm = bert_torch.BERT(cfg)
        canonical_to_torch(tm, weights)
        jm = bert_jax.BERT(cfg, nnx.Rngs(0))
        canonical_to_jax(jm, weights)
        with torch.no_grad():
            outs[("torch", impl)] = tm(*_torch(x)).numpy()
        outs[("jax", impl)] = np.asarray(jm(*_jax(x)))
        gj = nnx.grad(bert_jax.loss_fn)(jm, _jax(x), jnp.asarray(y))
        outs[("jax-grad", impl)] = np.asarray(gj["encoder"]["layer"][0]["attention"]["self"]["query"]["weight"][...])
    ref = outs[("torch", "where")]
    for key, value in outs.items():
        if key[0] != "jax-grad":
            np.testing.assert_allclose(value, ref, atol=1e-5, err_msg=str(key))
    np.testing.assert_allclose(outs[("jax-grad", "mul")], outs[("jax-grad", "where")], atol=1e-6)
    np.testing.assert_allclose(outs[("jax-grad", "cond")], outs[("jax-grad", "where")], atol=1e-6)


def test_round_trip_is_bit_exact():
    tm = bert_torch.BERT(CFG)
    before = {k: v.clone() for k, v in tm.state_dict().items()}
    jm = bert_jax.BERT(CFG, nnx.Rngs(3))
    canonical_to_jax(jm, torch_to_canonical(tm))
    back = bert_torch.BERT(CFG)
    canonical_to_torch(back, jax_to_canonical(jm))
    for k, v in back.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_ten_adamw_steps_follow_the_same_trajectory():
    """Through the real strategies (torch eager, JAX whole-step jit) on the classification task."""
    from twinbench.data import tasks
    from twinbench.spec import from_preset, validate
    from twinbench.strategies import jax_jit, torch_eager

    over = {"layers": 2, "d_model": 64, "heads": 4, "context": 32, "seq": 32, "batch": 8, "steps": 10,
            "num_labels": 3, "lr": 3e-3}
    spec = validate(from_preset("bert-tiny", over, strategy="jit+bucket"))
    weights = init_bert(spec.model, seed=0)
    data = tasks.run_data(spec).batches
    tt, jt = torch_eager.build(spec, weights), jax_jit.build(spec, weights)
    lt = [float(tt.step(*data[i])) for i in range(10)]
    lj = [float(jt.step(*data[i])) for i in range(10)]
    rel = np.abs(np.array(lt) - np.array(lj)) / np.array(lt)
    assert rel.max() <= 1e-4, rel
    wt, wj = tt.weights(), jt.weights()
    assert max(np.max(np.abs(wt[k] - wj[k])) for k in wt) <= 1e-4
    assert np.max(np.abs(wt["classifier.weight"] - weights["classifier.weight"])) > 1e-3  # it really trained


@pytest.mark.parametrize("rows", [2, 3])
def test_segment_lookup_is_the_gather(rows):
    """The segment embeddings' select lookup gives the gather's values exactly, and its gradient per row."""
    import jax

    table = jax.random.normal(jax.random.key(0), (rows, 8))
    ids = jax.random.randint(jax.random.key(1), (4, 16), 0, rows)
    cot = jax.random.normal(jax.random.key(2), (4, 16, 8))
    np.testing.assert_array_equal(bert_jax.lookup_few(table, ids), jnp.take(table, ids, axis=0))
    got = jax.grad(lambda t: (bert_jax.lookup_few(t, ids) * cot).sum())(table)
    want = jax.grad(lambda t: (jnp.take(t, ids, axis=0) * cot).sum())(table)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert set(np.unique(np.asarray(ids))) == set(range(rows))  # every row is looked up
