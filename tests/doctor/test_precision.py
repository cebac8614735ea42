"""``float64-compute``: the step's float64 products read from its compiled HLO (synthetic text, a GPU's, and a tiny
step compiled in-process in 64-bit mode), from its jaxpr, where the float64 comes from (64-bit mode's line, the
arguments holding float64 arrays), a torch optimizer's float64 parameters, and the finding's fix run as printed."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from twinbench.doctor import findings as fd
from twinbench.doctor import program
from twinbench.doctor.findings.precision import float64_compute
from twinbench.doctor.observed import Float64, Float64Arg

# the compiled (CPU) HLO names operands without their types: they are read where they are defined
COMPILED = """HloModule jit_step, entry_computation_layout={(f64[64,32]{1,0}, f32[16,64]{1,0})->f64[16,32]{1,0}}

%fused_dot (param_0: f64[16,64], param_1: f64[64,32]) -> f64[16,32] {
  %param_0 = f64[16,64]{1,0} parameter(0)
  %param_1 = f64[64,32]{1,0} parameter(1)
  ROOT %dot_general.0 = f64[16,32]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(step)/Dense_0/dot_general"}
}

%small (param_0: f32[16,8], param_1: f32[8,4]) -> f32[16,4] {
  %param_0 = f32[16,8]{1,0} parameter(0)
  %param_1 = f32[8,4]{1,0} parameter(1)
  ROOT %dot.1 = f32[16,4]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main.1 (w.1: f64[64,32], x.1: f32[16,64]) -> f64[16,32] {
  %w.1 = f64[64,32]{1,0} parameter(0)
  %x.1 = f32[16,64]{1,0} parameter(1)
  %conv = f32[2,8,8,4]{3,2,1,0} convolution(f32[2,8,8,3]{3,2,1,0} %a, f32[3,3,3,4]{3,2,1,0} %b), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  ROOT %fusion = f64[16,32]{1,0} fusion(%w.1, %x.1), kind=kOutput, calls=%fused_dot
}
"""

GPU_GEMM = """ENTRY %main (p0: f64[32,128], p1: f64[128,64]) -> f64[32,64] {
  %p0 = f64[32,128]{1,0} parameter(0)
  %p1 = f64[128,64]{1,0} parameter(1)
  %custom-call.1 = (f64[32,64]{1,0}, s8[4194304]{0}) custom-call(f64[32,128]{1,0} %p0, f64[128,64]{1,0} %p1), custom_call_target="__cublas$gemm", backend_config={}
  ROOT %get-tuple-element = f64[32,64]{1,0} get-tuple-element(%custom-call.1), index=0
}
"""


def test_float64_products_from_hlo_text() -> None:
    f = program.float64(COMPILED)
    assert f is not None
    assert (f.dots, f.all_dots) == (1, 3)  # the f64 dot of three products (an f32 dot, an f32 convolution)
    assert f.flops == 2 * 16 * 32 * 64  # 2 x its output x its contracted size, its operands typed by name
    assert f.all_flops == f.flops + 2 * 16 * 4 * 8 + 2 * (2 * 8 * 8 * 4) * (3 * 3 * 3)
    assert f.largest.startswith("f64[16,32] dot") and "Dense_0" in f.largest
    assert program.float64(COMPILED.replace("f64", "f32")) is None  # nothing in float64: no observation
    gpu = program.float64(GPU_GEMM)  # a GPU's gemm call: counted, not sized (its dims are in its config)
    assert gpu is not None and (gpu.dots, gpu.flops) == (1, 0.0) and "cublas" in gpu.largest


def step(w: dict[str, Any], x: jax.Array) -> dict[str, Any]:
    def loss(w: dict[str, Any]) -> jax.Array:
        return jnp.sum(jnp.tanh(x @ w["emb"]) @ w["out"])

    return jax.tree.map(lambda p, g: p - 0.1 * g, w, jax.grad(loss)(w))


def test_a_compiled_float64_step_and_its_sources(tmp_path: Path) -> None:
    """The accident as it happens: 64-bit mode on, one parameter from numpy (float64 by default); every product
    of the step, forward and backward, computes in float64."""
    script = tmp_path / "train.py"
    script.write_text("import jax\n# jax.config.update('jax_enable_x64', True)\n"
                      "jax.config.update('jax_enable_x64', True)\n")
    w = {"emb": np.random.default_rng(0).normal(size=(64, 32)), "out": np.ones((32, 8), np.float32)}
    x = np.ones((16, 64), np.float32)
    with jax.enable_x64(True):
        jitted = jax.jit(step)
        traced = jitted.trace(w, x)
        hlo = traced.lower().compile().as_text()
        found, from_jaxpr = program.float64(hlo), program.float64_jaxpr(traced.jaxpr)
        assert found is not None and from_jaxpr is not None
        program.float64_sources(found, jax, step, ((w, x), {}), f"jit:{script}:12:step")
    assert found.dots == found.all_dots >= 4 and found.flops == found.all_flops > 0  # all of it float64
    assert from_jaxpr.dots == from_jaxpr.all_dots >= 4
    assert found.x64_line == f"{script}:3"  # the commented-out line is not it
    assert [(a.name, a.leaves, a.bytes) for a in found.args] == [("w", 1, 64 * 32 * 8)]  # x is float32
    assert found.args[0].largest == "['emb'] f64[64,32]"
    with jax.enable_x64(False):  # without 64-bit mode the same arrays are made float32: nothing
        assert program.float64(jax.jit(step).lower(w, x).compile().as_text()) is None


def obs(f64: Float64 | None = None, **info: Any) -> dict[str, Any]:
    prog = {"float64": dataclasses.asdict(f64)} if f64 is not None else None
    return {"info": {"step_program": prog, **info}}


def test_the_jax_finding_and_its_fix_run_as_printed() -> None:
    f64 = program.float64(COMPILED)
    assert f64 is not None
    f64.x64, f64.x64_line = True, "train.py:3"
    f64.args = [Float64Arg(name="params", leaves=1, bytes=16384, largest="['w'] f64[64,32]")]
    got = float64_compute(obs(f64))
    assert got is not None and got.id == "float64-compute" and got.severity == "warning"  # 94% of the FLOPs
    assert got.location == "train.py:3" and "jax_enable_x64" in got.fix and "`params`" in got.evidence
    # the cast as printed, on a TrainState-like tree (a Python int step, float64 and int arrays)
    expr = re.search(r"params = (jax\.tree\.map\(.*?, params\))", got.fix).group(1)
    with jax.enable_x64(True):
        params = {"w": jnp.ones((4, 3), jnp.float64), "step": 0, "ids": np.arange(3), "b": np.zeros(3)}
        out = eval(expr, {"jax": jax, "jnp": jnp, "params": params})
    assert (out["w"].dtype, out["b"].dtype, out["ids"].dtype, out["step"]) == ("float32", "float32", "int64", 0)
    small = dataclasses.replace(f64, flops=0.05 * f64.all_flops)  # a small float64 part: said, not warned
    assert float64_compute(obs(small)).severity == "info"
    assert float64_compute(obs()) is None  # no float64 product, no torch optimizer: nothing
    assert "float64-compute" in fd.IDS and [f.id for f in fd.diagnose(obs(f64))] == ["float64-compute"]


def test_the_torch_finding_reads_the_optimizers_parameters() -> None:
    torch = pytest.importorskip("torch")
    from twinbench.doctor.instruments_torch import param_bytes

    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(4, 2)).double()
    seen = param_bytes(torch.optim.AdamW(model.parameters()))
    assert seen == {"float64": (8 * 4 + 4 + 4 * 2 + 2) * 8}
    got = float64_compute(obs(torch_param_bytes={"Optimizer.step": seen}, torch_optimizers={
        "Optimizer.step": "AdamW"}, torch_float64_line="train.py:9"))
    assert got is not None and got.severity == "warning" and "AdamW" in got.evidence and "model.float()" in got.fix
    assert got.location == "train.py:9"
    model.float()  # the fix as printed: in place, so the optimizer made before it updates float32 parameters
    assert param_bytes(torch.optim.AdamW(model.parameters())) == {"float32": seen["float64"] // 2}
    mixed = {"Optimizer.step": {"float32": 600, "float64": 400}}  # a float64 part below half: nothing
    assert float64_compute(obs(torch_param_bytes=mixed)) is None


def test_the_x64_line_patterns() -> None:
    on = ['jax.config.update("jax_enable_x64", True)', "jax.config.update('jax_enable_x64', args.x64)",
          "with jax.enable_x64():", "jax.config.jax_enable_x64 = True"]
    off = ['jax.config.update("jax_enable_x64", False)', "# jax.config.update('jax_enable_x64', True)",
           "with jax.enable_x64(False):"]
    assert all(program.X64_ON.search(s) for s in on) and not any(program.X64_ON.search(s) for s in off)
