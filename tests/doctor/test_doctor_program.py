"""What the doctor reads from the step's program: a Python loop unrolled into its jaxpr (small functions traced
in-process)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from twinbench.doctor import findings as fd
from twinbench.doctor import program

W = jnp.ones((8, 16, 16))
X = jnp.ones((4, 16))


def layer(h: Any, w: Any) -> Any:
    return jnp.tanh(h @ w) + h


def unrolled(ws: Any, x: Any) -> Any:
    for i in range(8):  # layers applied in a Python loop
        x = layer(x, ws[i])
    return jnp.sum(x)


def scanned(ws: Any, x: Any) -> Any:
    x, _ = jax.lax.scan(lambda h, w: (layer(h, w), None), x, ws)
    return jnp.sum(x)


def test_unrolled_layers_are_found_and_scan_is_not() -> None:
    rep = program.find_repeat(program.tokens(jax.make_jaxpr(jax.grad(unrolled))(W, X)))
    assert rep is not None and rep["copies"] >= 6  # 8 layers: the backward pass of the middle ones, one unit each
    assert program.find_repeat(program.tokens(jax.make_jaxpr(jax.grad(scanned))(W, X))) is None


def test_a_tree_map_over_same_shaped_leaves_is_no_loop() -> None:
    params = {f"w{i}": jnp.ones((16, 16)) for i in range(12)}

    def update(p: Any, g: Any) -> Any:  # an optimizer's per-leaf update: repeated, but no matmul
        return jax.tree.map(lambda a, b: a - 0.1 * jnp.sqrt(jnp.abs(b) + 1e-8) * jnp.sign(b) / 3.0, p, g)

    assert program.find_repeat(program.tokens(jax.make_jaxpr(update)(params, params))) is None


def test_unrolled_loop_threshold() -> None:
    def prog(compile_s: float) -> dict[str, Any]:
        rep = {"period": 50, "copies": 24, "start": 4, "eqns": 1300}  # 1150 of 1300 equations are copies
        return {"info": {"step_program": {"repeat": rep, "compile_s": compile_s}}}

    assert fd.jax_unrolled_loop(prog(0.4)).severity == "info"  # 0.35 s for the copies
    warn = fd.jax_unrolled_loop(prog(0.6))  # 0.53 s for the copies
    assert warn.severity == "warning" and "24 copies of the same 50 operations" in warn.title
    assert fd.jax_unrolled_loop({"info": {"step_program": {"repeat": None, "compile_s": 9.0}}}) is None
