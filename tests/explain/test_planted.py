"""Planted causes on real steps: two runs whose only difference is known, traced by the frameworks' profilers
and explained; the largest gap row must name the planted cause and carry most of the gap.

- torch: the twin's eager step against the same step whose update calls ``optimizer.step()`` 32 times
  (an accumulation bug that steps every micro-batch; 32 of them, so the cause stands well above a descheduled
  op on a busy machine): the gap is the optimizer's. (Fused against per-parameter AdamW, a cause on GPUs, makes
  no difference on a CPU: 1.46 ms either way on this model.)
- JAX: the example Llama port (``examples/byo/llama_jax.py``, a ``--jax-model``) against a copy whose attention
  scores are a broadcast multiply and sum instead of a matmul: the gap is attention's.

An even spread of the gap over the rows fails these assertions (``share > 0.5`` of one row).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.explain.typed import plain
from twinbench.explain import gap
from twinbench.measure.trace import trace_steps

ROOT = Path(__file__).resolve().parents[2]


def _record(fw: str, strategy: str, path: str, hlo: str | None = None) -> dict[str, Any]:
    r = {"framework": fw, "strategy": strategy, "status": "ok", "trace_path": path, "run_id": strategy,
         **({"explain_hlo_path": hlo} if hlo else {})}
    r["step_ms"] = gap.read_trace(r).step_ms  # the traced step: these runs are not timed apart
    return r


# ----------------------------------------------------------------------------------------------- torch
def _torch_run(tmp_path: Path, name: str, updates: int) -> dict[str, Any]:
    from twinbench.data import tasks
    from twinbench.models import family
    from twinbench.spec import from_preset
    from twinbench.strategies import registry

    # wide layers and few tokens: the update's ops are a large part of the step, so the planted cause stands
    # above a busy machine's noise (idle time from a descheduled process lands in "rest / idle")
    spec = from_preset("tiny", {"layers": 4, "d_model": 256, "heads": 4, "batch": 1, "seq": 16},
                       framework="torch", strategy="eager")
    trainer = registry.builder(spec)(spec, family.get(spec).init_weights(spec.model, 0))
    step = trainer.optimizer.step
    trainer.optimizer.step = lambda: [step() for _ in range(updates)]  # the one planted difference
    x, y = tasks.run_data(spec, 1).batches[0]
    path = trace_steps("torch", lambda _i: trainer.step(x, y), trainer.sync, tmp_path / name, n=6)
    return _record("torch", name, path)


def test_torch_repeated_update_is_the_optimizer_row(tmp_path: Path) -> None:
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: less idle time from sharing the cores with the other test worker
    try:
        once = _torch_run(tmp_path, "eager", 1)
        many = _torch_run(tmp_path, "eager-32-updates", 32)  # a cause far above a busy machine's noise
    finally:
        torch.set_num_threads(threads)
    res = plain(gap.explain_pair(once, many))
    assert res["largest"]["row"] == "optimizer / optimizer", res["rows"]
    assert res["largest"]["share"] > 0.5, res["rows"]
    opt = next(r for r in res["rows"] if r["row"] == "optimizer")
    assert opt["diff_ms"] > 0.5 * res["gap_ms"] > 0


# ------------------------------------------------------------------------------------------------- JAX
def _llama_port() -> Any:
    spec = importlib.util.spec_from_file_location("llama_jax_example", ROOT / "examples" / "byo" / "llama_jax.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _slow_attention(port: Any) -> Any:
    """The port's attention with its scores computed the slow way: a broadcast multiply and sum over the head
    dimension instead of a matmul, which materialises a batch x heads x T x T x head_dim product (the same
    maths)."""
    import jax
    import jax.numpy as jnp

    def attention(p: dict[str, Any], x: jax.Array, cos: jax.Array, sin: jax.Array, heads: int) -> jax.Array:
        B, T, C = x.shape

        def split(w: jax.Array) -> jax.Array:
            return (x @ w).reshape(B, T, heads, C // heads).transpose(0, 2, 1, 3)

        q, k, v = split(p["wq"]), split(p["wk"]), split(p["wv"])
        q, k = port.rotate(q, cos, sin), port.rotate(k, cos, sin)
        with jax.named_scope("attn_scores"):  # the port names its scope; explain's taxonomy reads it as attention
            scores = (q[:, :, :, None, :] * k[:, :, None, :, :]).sum(-1) / jnp.sqrt(C // heads).astype(x.dtype)
        scores = jnp.where(jnp.tril(jnp.ones((T, T), bool)), scores, -jnp.inf)
        y = jax.nn.softmax(scores, axis=-1) @ v
        return y.transpose(0, 2, 1, 3).reshape(B, T, C) @ p["wo"]

    return attention


def _jax_run(tmp_path: Path, name: str, slow: bool) -> dict[str, Any]:
    import jax
    import optax

    from twinbench.byo import UserConfig
    from twinbench.strategies.jax_jit import make_train_step

    port = _llama_port()
    if slow:
        port.attention = _slow_attention(port)
    cfg = UserConfig(layers=2, d_model=64, heads=4, d_ff=0, vocab=256, context=128, batch=4, seq=128, seed=0)
    rng = np.random.default_rng(0)
    d, ff = cfg.d_model, 4 * cfg.d_model

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    sd = {"tok.weight": w(cfg.vocab, d), "norm.weight": np.ones(d, np.float32), "head.weight": w(cfg.vocab, d)}
    for i in range(cfg.layers):
        sd |= {f"blocks.{i}.attn_norm.weight": np.ones(d, np.float32), f"blocks.{i}.mlp_norm.weight": np.ones(d, np.float32)}
        sd |= {f"blocks.{i}.attn.{n}.weight": w(d, d) for n in ("wq", "wk", "wv", "wo")}
        sd |= {f"blocks.{i}.mlp.w1.weight": w(ff, d), f"blocks.{i}.mlp.w3.weight": w(ff, d),
               f"blocks.{i}.mlp.w2.weight": w(d, ff)}
    model = port.build_jax(cfg)
    tx = optax.adamw(1e-3)
    params = jax.tree.map(jax.numpy.asarray, model.to_jax(sd))
    state = {"p": params, "s": tx.init(params)}
    x = rng.integers(0, cfg.vocab, (cfg.batch, cfg.seq), dtype=np.int32)
    step = jax.jit(make_train_step(model.loss_fn, tx), donate_argnums=(0, 1))
    hlo = tmp_path / f"{name}.hlo"
    hlo.write_text(step.lower(state["p"], state["s"], x, x).compile().as_text())

    def one(_i: int) -> None:
        state["p"], state["s"], _ = step(state["p"], state["s"], x, x)

    path = trace_steps("jax", one, lambda: jax.block_until_ready(state["p"]), tmp_path / name, n=6)
    return _record("jax", name, path, str(hlo))


@pytest.mark.slow
def test_jax_port_with_slow_attention_is_an_attention_row(tmp_path: Path) -> None:
    fast, slow = _jax_run(tmp_path, "port", False), _jax_run(tmp_path, "port-slow-attention", True)
    res = plain(gap.explain_pair(fast, slow))
    assert res["largest"]["row"].endswith("/ attention"), res["rows"]
    attention = sum(r["diff_ms"] for r in res["rows"] if r["level"] == 1 and r["row"].endswith("/ attention"))
    assert attention > 0.5 * res["gap_ms"] > 0, res["rows"]
