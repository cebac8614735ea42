"""``ModelOptions.attention_impl``: the chunked attention of the JAX twin is the same maths as the default
(values and gradients), with several query blocks, a sequence the block size does not divide, and bf16."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from twinbench.models.layers_jax import chunked_attention
from twinbench.models.options import ModelOptions


@pytest.mark.parametrize(("T", "chunk"), [(64, 16), (48, 32)])  # 4 blocks; gcd(48, 32) = 16: 3 blocks
def test_chunked_attention_matches_the_default(T: int, chunk: int) -> None:
    q, k, v = jax.random.normal(jax.random.key(0), (3, 2, T, 3, 8))

    def default(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
        return jax.nn.dot_product_attention(q, k, v, is_causal=True)

    def chunked(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
        return chunked_attention(q, k, v, chunk)

    def value_and_grads(f):
        return jax.jit(lambda q, k, v: (f(q, k, v), jax.grad(lambda *a: (f(*a) ** 2).sum(), (0, 1, 2))(q, k, v)))

    want, g_want = value_and_grads(default)(q, k, v)
    got, g_got = value_and_grads(chunked)(q, k, v)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    for a, b in zip(g_got, g_want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_chunked_attention_in_bf16_stays_close() -> None:
    q, k, v = jax.random.normal(jax.random.key(1), (3, 2, 32, 2, 16)).astype(jnp.bfloat16)
    want = jax.jit(lambda *a: jax.nn.dot_product_attention(*a, is_causal=True))(q, k, v).astype(jnp.float32)
    got = jax.jit(lambda *a: chunked_attention(*a, 8))(q, k, v)
    assert got.dtype == jnp.bfloat16
    np.testing.assert_allclose(got.astype(jnp.float32), want, rtol=2e-2, atol=2e-2)


def test_unknown_attention_impl_is_refused() -> None:
    with pytest.raises(ValueError, match="attention_impl"):
        ModelOptions(attention_impl="flash-ish")


@pytest.mark.parametrize("kind", ["causal", "mask", "bias"])
def test_einsum_attention_is_jax_nn_attention(kind: str) -> None:
    """The default formulation computes what jax.nn.dot_product_attention computes (values and gradients)."""
    from twinbench.models.layers_jax import attention

    q, k, v = jax.random.normal(jax.random.key(2), (3, 2, 24, 3, 8))
    keep = jnp.arange(24)[None, None, None, :] < jnp.array([24, 17])[:, None, None, None]  # padding of sample 2
    masks = {"causal": {"is_causal": True}, "mask": {"mask": keep},
             "bias": {"bias": jnp.where(keep, 0.0, -1e9).astype(jnp.float32)}}[kind]

    def value_and_grads(impl: str):
        def f(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
            return attention(q, k, v, impl, **masks)
        return jax.jit(lambda q, k, v: (f(q, k, v), jax.grad(lambda *a: (f(*a) ** 2).sum(), (0, 1, 2))(q, k, v)))

    want, g_want = value_and_grads("jax-nn")(q, k, v)
    got, g_got = value_and_grads("default")(q, k, v)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for a, b in zip(g_got, g_want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("seq_minor", [False, True])
@pytest.mark.parametrize("kind", ["causal", "padding"])
def test_splash_attention_is_the_default_maths(kind: str, seq_minor: bool) -> None:
    """The Pallas TPU splash kernel (Pallas's interpreter on the CPU) computes the einsum attention: values and
    gradients, causal (GPT, Llama) and with a key padding mask (BERT; padding queries' outputs are read by no
    loss, so they are left out of the comparison), reading q, k, v head-dim-minor or sequence-minor."""
    from twinbench.models.layers_jax import attention

    T = 256  # two blocks of 128: the block loop and the causal block skipping both run
    q, k, v = jax.random.normal(jax.random.key(3), (3, 2, T, 2, 64))
    lengths = jnp.array([T, 130])
    keep = jnp.arange(T)[None, None, None, :] < lengths[:, None, None, None]
    masks = {"causal": {"is_causal": True}, "padding": {"mask": keep}}[kind]
    real = (jnp.arange(T)[None, :] < lengths[:, None])[:, :, None, None] if kind == "padding" else 1.0

    def value_and_grads(impl: str):
        def f(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
            return attention(q, k, v, impl, seq_minor=seq_minor, **masks) * real
        return jax.jit(lambda q, k, v: (f(q, k, v), jax.grad(lambda *a: (f(*a) ** 2).sum(), (0, 1, 2))(q, k, v)))

    want, g_want = value_and_grads("default")(q, k, v)
    got, g_got = value_and_grads("splash")(q, k, v)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    for a, b in zip(g_got, g_want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * float(jnp.abs(b).max()))


@pytest.mark.parametrize("impl", ["default", "jax-nn", "chunked", "splash"])
@pytest.mark.parametrize("heads_first_in", [False, True])
def test_grouped_query_heads_are_the_repeated_heads(impl: str, heads_first_in: bool) -> None:
    """Fewer key/value heads than query heads (grouped-query) give the attention of the key/value heads repeated
    in torch's ``repeat_interleave`` order, values and gradients, in both layouts: the kernels that take groups
    themselves (splash, jax-nn) get them as they are, the others repeat them inside ``attention()``."""
    from twinbench.models.layers_jax import attention

    T, H, G = 256, 4, 2  # 2 key/value heads, each serving 2 consecutive query heads
    kq, kk, kv = jax.random.split(jax.random.key(5), 3)
    q = jax.random.normal(kq, (2, T, H, 64))
    k, v = jax.random.normal(kk, (2, T, H // G, 64)), jax.random.normal(kv, (2, T, H // G, 64))
    axis = 1 if heads_first_in else 2
    if heads_first_in:
        q, k, v = (jnp.swapaxes(t, 1, 2) for t in (q, k, v))

    def value_and_grads(repeat: bool):
        def f(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
            if repeat:
                k, v = jnp.repeat(k, G, axis=axis), jnp.repeat(v, G, axis=axis)
            return attention(q, k, v, impl, layout_heads_first=heads_first_in, is_causal=True)
        return jax.jit(lambda q, k, v: (f(q, k, v), jax.grad(lambda *a: (f(*a) ** 2).sum(), (0, 1, 2))(q, k, v)))

    want, g_want = value_and_grads(True)(q, k, v)
    got, g_got = value_and_grads(False)(q, k, v)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    for a, b in zip(g_got, g_want, strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * float(jnp.abs(b).max()))


def test_grouped_query_heads_must_divide_the_query_heads() -> None:
    from twinbench.models.layers_jax import attention

    q, kv = jnp.zeros((1, 128, 4, 64)), jnp.zeros((1, 128, 3, 64))
    with pytest.raises(ValueError, match="dividing the query heads"):
        attention(q, kv, kv, "default", is_causal=True)


def test_splash_blocks_follow_the_sequence() -> None:
    from twinbench.models.layers_jax import splash_block

    assert [splash_block(t) for t in (128, 384, 512, 1024, 2048)] == [128, 128, 512, 512, 512]
    assert splash_block(768) == 256
    with pytest.raises(ValueError, match="multiple of 128"):
        splash_block(100)


def test_splash_layout_auto_is_sequence_minor_only_where_the_projections_write_heads_first() -> None:
    """``ModelOptions.splash_layout``: "auto" resolves per twin (BERT's projections write q, k, v heads first,
    GPT-2's and Llama's come through a transpose, as BERT's do with ``fused_qkv``); a named layout is taken as
    named; an unknown one is refused."""
    from flax import nnx

    from twinbench.config import ModelConfig
    from twinbench.models.bert import model_jax as bert_jax
    from twinbench.models.gpt import model_jax as gpt_jax
    from twinbench.models.llama import model_jax as llama_jax

    cfg = ModelConfig(layers=1, d_model=32, heads=2, vocab=64, context=128)

    def seq_minor(family: str, **opts: object) -> bool:
        o = ModelOptions(attention_impl="splash", **opts)
        if family == "bert":
            return bert_jax.BERT(cfg, nnx.Rngs(0), o).encoder.layer[0].attention.self.seq_minor
        if family == "gpt":
            return gpt_jax.GPT(cfg, nnx.Rngs(0), o).blocks[0].attn.seq_minor
        return llama_jax.Llama(cfg, nnx.Rngs(0), o).layers[0].self_attn.seq_minor

    assert [seq_minor(f) for f in ("bert", "gpt", "llama")] == [True, False, False]
    assert not seq_minor("bert", fused_qkv=True)
    assert not seq_minor("bert", splash_layout="head-dim-minor")
    assert seq_minor("gpt", splash_layout="seq-minor") and seq_minor("llama", splash_layout="seq-minor")
    with pytest.raises(ValueError, match="splash_layout"):
        ModelOptions(splash_layout="lanes")


def test_splash_refuses_an_additive_bias() -> None:
    from twinbench.models.layers_jax import attention

    q = jnp.zeros((1, 128, 1, 64))
    with pytest.raises(ValueError, match="not an additive bias"):
        attention(q, q, q, "splash", bias=jnp.zeros((1, 1, 1, 128)))


def _twin_inputs(family: str) -> tuple[object, tuple, object]:
    """A small config of ``family``, its loss inputs (x, y) and its canonical weights."""
    from twinbench.config import ModelConfig
    from twinbench.models.bert import init_bert
    from twinbench.models.gpt import init_gpt
    from twinbench.models.llama import init_llama

    cfg = ModelConfig(layers=2, d_model=128, heads=4, vocab=256, context=128)
    if family == "bert":  # one row padded: the padding mask reaches the kernel as segment ids
        ids = jax.random.randint(jax.random.key(4), (2, 128), 0, 256)
        mask = (jnp.arange(128)[None, :] < jnp.array([[128], [77]])).astype(jnp.int32)
        return cfg, ((ids, jnp.zeros_like(ids), mask), jnp.array([0, 1])), init_bert(cfg, 0)
    x = jax.random.randint(jax.random.key(4), (2, 129), 0, 256)
    init = init_gpt if family == "gpt" else init_llama  # llama: grouped-query, 2 key/value heads for 4
    return cfg, (x[:, :-1], x[:, 1:]), init(cfg, 0)


@pytest.mark.parametrize(("family", "fused_qkv", "layout"), [
    ("gpt", False, "auto"), ("bert", False, "auto"), ("llama", False, "auto"), ("gpt", True, "auto"),
    ("bert", True, "auto"), ("gpt", False, "seq-minor"), ("llama", False, "seq-minor"),
    ("bert", False, "head-dim-minor")])
def test_twin_with_splash_attention_is_the_same_model(family: str, fused_qkv: bool, layout: str) -> None:
    """The whole twin (loss and every gradient) with the splash kernel, whose q, k, v its projections write
    heads first (``layers_jax.Linear.to_heads``), or with ``fused_qkv`` one product laid out by one transpose of
    the three, against the default attention on ``[B, T, H, D]``; the kernel reading q, k, v in either layout
    (``splash_layout``: "auto" is sequence-minor for BERT's heads-first projections, head-dim-minor elsewhere)."""
    from flax import nnx

    from twinbench.models.bert import model_jax as bert_jax
    from twinbench.models.gpt import model_jax as gpt_jax
    from twinbench.models.llama import model_jax as llama_jax
    from twinbench.models.weights import canonical_to_jax

    module, cls = {"gpt": (gpt_jax, "GPT"), "bert": (bert_jax, "BERT"), "llama": (llama_jax, "Llama")}[family]
    cfg, (x, y), weights = _twin_inputs(family)
    results = []
    for impl in ("default", "splash"):
        splash = impl == "splash"
        opts = ModelOptions(attention_impl=impl, fused_qkv=fused_qkv and splash,
                            splash_layout=layout if splash else "auto")
        model = getattr(module, cls)(cfg, nnx.Rngs(0), opts)
        canonical_to_jax(model, weights)
        loss, grads = nnx.jit(nnx.value_and_grad(module.loss_fn))(model, x, y)
        results.append((float(loss), jax.tree.leaves(grads)))
    (loss_d, g_d), (loss_s, g_s) = results
    assert abs(loss_s - loss_d) <= 1e-5 * abs(loss_d)
    for a, b in zip(g_s, g_d, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5 * float(jnp.abs(b).max()) + 1e-7)


def _dot_input_dtypes(jaxpr: jax.extend.core.ClosedJaxpr | jax.extend.core.Jaxpr) -> list[tuple[str, ...]]:
    """The input dtypes of every dot_general in a jaxpr, sub-jaxprs (jit, custom_vjp) included."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            found.append(tuple(str(x.aval.dtype) for x in eqn.invars))
        for sub in jax.core.jaxprs_in_params(eqn.params):
            found += _dot_input_dtypes(sub)
    return found


def test_einsum_attention_backward_in_bf16_multiplies_bf16() -> None:
    """bf16 q, k: the scores are accumulated in fp32, and the backward pass's products (dq = ds @ k, dk = ds.T @ q)
    take bf16 operands (the scores' gradient rounded to bf16, as torch's bf16 attention), not fp32 x fp32 ones
    (a TPU runs those as 6 bf16 passes under jax_default_matmul_precision=highest); the gradients stay within
    bf16 rounding of the fp32 attention's."""
    from twinbench.models.layers_jax import attention

    q, k, v = jax.random.normal(jax.random.key(4), (3, 2, 32, 2, 16))
    keep = jnp.arange(32)[None, None, None, :] < jnp.array([32, 20])[:, None, None, None]

    def grads(q: jax.Array, k: jax.Array, v: jax.Array) -> tuple[jax.Array, ...]:
        return jax.grad(lambda *a: attention(*a, "default", mask=keep).astype(jnp.float32).sum() ** 2, (0, 1, 2))(q, k, v)

    low = [x.astype(jnp.bfloat16) for x in (q, k, v)]
    dtypes = _dot_input_dtypes(jax.make_jaxpr(grads)(*low))
    assert len(dtypes) == 6  # scores, probabilities @ v; dq, dk, dv, dp
    assert all(d == ("bfloat16", "bfloat16") for d in dtypes), dtypes
    got = jax.jit(grads)(*low)
    want = jax.jit(grads)(*(x.astype(jnp.float32) for x in low))
    for a, b in zip(got, want, strict=True):
        assert a.dtype == jnp.bfloat16
        scale = float(jnp.abs(b).max())
        np.testing.assert_allclose(np.asarray(a.astype(jnp.float32)), np.asarray(b), atol=3e-2 * scale)


def test_einsum_attention_scores_are_fp32_in_both_precisions() -> None:
    from twinbench.models.layers_jax import attention_scores

    q, k = jax.random.normal(jax.random.key(5), (2, 1, 8, 2, 4))
    for dtype in (jnp.float32, jnp.bfloat16):
        assert attention_scores(q.astype(dtype), k.astype(dtype)).dtype == jnp.float32


def test_attention_scores_gradients_are_the_einsums():
    """attention_scores writes its backward products out (the order XLA:CPU's matmul fusions take): in fp32 they are
    JAX's own gradients of the scores' einsum, to rounding."""
    from twinbench.models.layers_jax import attention_scores

    q, k = jax.random.normal(jax.random.key(6), (2, 2, 16, 3, 8))
    w = jax.random.normal(jax.random.key(7), (2, 3, 16, 16))

    def grads(f):
        return jax.jit(jax.grad(lambda q, k: (f(q, k) * w).sum(), (0, 1)))(q, k)

    got = grads(attention_scores)
    want = grads(lambda q, k: jnp.einsum("bqhd,bkhd->bhqk", q, k))
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
