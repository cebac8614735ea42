"""JAX strategies against the ``jit`` baseline (tiny shapes, fp32 on CPU).

Tolerances: fp32 strategies match jit's loss trajectory within 2e-5 relative per step (scan-layers reorders
the layer loop into an XLA while loop: ~1e-6 observed); +nodonate and scan-steps are the same XLA program
and must agree to 1e-6 (scan-steps' weights within 2e-5 absolute: with XLA's classic CPU fusion emitters,
which the suite uses (tests/conftest.py), the scan's loop body is generated apart from the plain step). bf16
stays within 2e-2 relative of fp32 over 4 steps, yet differs from it (bf16 really is on). Gradients of
scan-layers and every remat policy equal the unrolled model's within 1e-6 + 1e-4 * max|grad| per tensor.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from strategy_helpers import OVERRIDES, make_spec, train

from twinbench.models.gpt import model_jax as gpt_jax
from twinbench.models.options import REMAT_POLICIES, ModelOptions
from twinbench.models.weights import canonical_to_jax, jax_to_canonical
from twinbench.spec import SpecError, from_preset, validate
from twinbench.strategies.jax_scan import resolve_k


@pytest.fixture(scope="module")
def jit_run(weights, host_batches):
    return train("jax", "jit", weights, host_batches)


@pytest.mark.parametrize("strategy", ["scan-layers", "scan-layers+remat"])
def test_fp32_strategies_match_jit(strategy, weights, host_batches, jit_run):
    losses, _ = train("jax", strategy, weights, host_batches)
    np.testing.assert_allclose(losses, jit_run[0], rtol=2e-5)


def test_nodonate_is_the_same_program(weights, host_batches, jit_run):
    losses, trainer = train("jax", "jit+nodonate", weights, host_batches)
    np.testing.assert_allclose(losses, jit_run[0], rtol=1e-6)
    w_jit, w = jit_run[1].weights(), trainer.weights()
    assert max(float(np.abs(w[k] - w_jit[k]).max()) for k in w) < 1e-6


def test_scan_steps_k_steps_equal_k_jit_steps(weights, host_batches, jit_run):
    k = 2  # two calls of two steps: the state carried across calls as well as within one
    losses, trainer = train("jax", "scan-steps", weights, host_batches, scan_k=k)
    assert trainer.steps_per_call == k
    np.testing.assert_allclose(losses, jit_run[0], rtol=1e-6)
    w_jit, w = jit_run[1].weights(), trainer.weights()
    # the scan's loop body is code-generated apart from the plain step: Adam's normalised update turns ulps of a
    # near-zero gradient into up to ~5e-6 of a weight; a state lost or stepped twice between calls moves them ~1e-3
    for name in w_jit:
        np.testing.assert_allclose(w[name], w_jit[name], atol=2e-5, err_msg=name)


@pytest.mark.parametrize(("preset", "over", "k"), [
    ("small", {}, 5),  # 30 steps, 5 warm-up: 6 calls of 5, 5 of them measured
    ("tiny", {}, 2),  # 8 steps, 2 warm-up: 4 calls of 2
    ("tiny", {"steps": 4, "warmup": 1}, 1),  # no K leaves two measured calls: plain steps
    ("tiny", {"scan_k": 4}, 4),  # --scan-k wins
])
def test_scan_k_choice(preset, over, k):
    spec = validate(from_preset(preset, over).evolve(framework="jax", strategy="scan-steps"))
    assert resolve_k(spec) == k


def test_scan_k_must_divide_steps():
    with pytest.raises(SpecError, match="--scan-k 3 must divide --steps 8"):
        validate(from_preset("tiny", {"scan_k": 3}))


def test_bf16_close_to_fp32_but_not_equal(weights, host_batches, jit_run):
    losses, trainer = train("jax", "jit+bf16", weights, host_batches)
    np.testing.assert_allclose(losses, jit_run[0], rtol=2e-2)
    assert max(abs(a - b) for a, b in zip(losses, jit_run[0], strict=True)) > 1e-7, "bf16 compute had no effect"
    # fp32 master weights and optimizer state
    assert {p.dtype for p in jax.tree.leaves(trainer.params)} == {jnp.dtype("float32")}
    assert {p.dtype for p in jax.tree.leaves(trainer.opt_state) if p.ndim} == {jnp.dtype("float32")}
    assert make_spec("jax", "jit+bf16").train.precision == "bf16"


def _grads(opts: ModelOptions, weights, x, y):
    cfg = make_spec("jax", "jit").model
    model = gpt_jax.GPT(cfg, nnx.Rngs(0), opts)
    canonical_to_jax(model, weights)
    graphdef, params = nnx.split(model, nnx.Param)

    def loss_of(p):
        return gpt_jax.loss_fn(nnx.merge(graphdef, p), x, y)

    loss, grads = jax.jit(jax.value_and_grad(loss_of))(params)
    return float(loss), jax_to_canonical(nnx.merge(graphdef, grads))


@pytest.fixture(scope="module")
def unrolled_grads(weights, host_batches):
    return _grads(ModelOptions(), weights, *host_batches[0])


@pytest.mark.parametrize("opts", [ModelOptions(scan_layers=True)]
                         + [ModelOptions(remat=p) for p in REMAT_POLICIES]
                         + [ModelOptions(scan_layers=True, remat="dots-saveable", scan_unroll=2)],
                         ids=lambda o: f"scan={o.scan_layers},remat={o.remat},unroll={o.scan_unroll}")
def test_scan_layers_and_remat_gradients_equal_unrolled(opts, weights, host_batches, unrolled_grads):
    loss0, g0 = unrolled_grads
    loss, g = _grads(opts, weights, *host_batches[0])
    assert abs(loss - loss0) <= 1e-6 * abs(loss0)
    assert set(g) == set(g0)
    for name in g0:
        np.testing.assert_allclose(g[name], g0[name], atol=1e-6 + 1e-4 * float(np.abs(g0[name]).max()),
                                   err_msg=name)


def test_scan_layers_weights_round_trip_bit_exact(weights):
    cfg = make_spec("jax", "scan-layers").model
    model = gpt_jax.GPT(cfg, nnx.Rngs(0), ModelOptions(scan_layers=True))
    stacked = nnx.state(model, nnx.Param)["blocks"]["attn"]["c_attn"]["weight"]
    assert stacked.get_value().shape[0] == OVERRIDES["layers"]  # really one stacked block
    canonical_to_jax(model, weights)
    back = jax_to_canonical(model)
    assert set(back) == set(weights)
    for name, w in weights.items():
        assert np.array_equal(back[name], w), name


def test_naive_sync_waits_for_the_parameters_too(weights, host_batches, monkeypatch):
    """Since Flax 0.11 ``nnx.Optimizer`` no longer holds the model: waiting on its state alone returns before
    the parameter update is done. ``sync`` must block on every parameter as well."""
    from twinbench.strategies import jax_naive

    spec = make_spec("jax", "naive")
    trainer = jax_naive.build(spec, weights)
    trainer.step(*host_batches[0])
    waited: list = []
    real = jax.block_until_ready
    monkeypatch.setattr(jax, "block_until_ready", lambda tree: waited.extend(jax.tree.leaves(tree)) or real(tree))
    trainer.sync()
    ids = {id(a) for a in waited}
    params = jax.tree.leaves(nnx.state(trainer.model, nnx.Param))
    assert params and all(id(p) in ids for p in params)


@pytest.mark.parametrize("preset", ["tiny", "bert-tiny", "llama-tiny"])
def test_the_step_takes_plain_dicts_and_rebuilds_the_same_model(preset):
    """The jitted step's state is plain nested dicts (flattened by jax.jit in C++ at every call), not nnx.State
    objects (flattened in Python: 1.3 ms more per call for BERT-base's 604 leaves), and the module rebuilt from
    them inside the step is the twin itself: every parameter under its own name."""
    from twinbench.models import family
    from twinbench.strategies import registry

    spec = validate(from_preset(preset, framework="jax", strategy="jit"))
    fam = family.get(spec)
    weights = fam.init_weights(spec.model, 0)
    trainer = registry.builder(spec)(spec, weights)
    for path, _ in jax.tree_util.tree_flatten_with_path((trainer.params, trainer.opt_state))[0]:
        assert not any(isinstance(k, jax.tree_util.GetAttrKey) and k.name == "value" for k in path), path
    assert type(trainer.params) is dict
    from twinbench.strategies.jax_jit import Split, make_model

    module = make_model(spec, weights, fam)
    split, pure = Split.of(module)
    rebuilt = split.module(pure)
    assert jax_to_canonical(rebuilt).keys() == weights.keys()
    for name, w in jax_to_canonical(rebuilt).items():
        np.testing.assert_array_equal(w, weights[name], err_msg=name)  # each array under its own name
