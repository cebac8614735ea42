"""``twinbench predict --compile``: a TPU step compiled here by libtpu (deviceless) for the memory the chip
reports. The parts that need no libtpu run everywhere (CI has none): the kernel traced for the TPU, the
prediction's memory replaced by the compiled step's, the one-line refusal without libtpu. One test compiles
for a TPU v5e where libtpu is installed."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import pytest
from typer.testing import CliRunner

from twinbench.cli import app
from twinbench.measure.memory import jax_step_estimate
from twinbench.models.layers_jax import attention, lowering_for, target_platform
from twinbench.plan import build_specs
from twinbench.predict import command, tpu_compile
from twinbench.predict.datasheets import DEVICES, lookup

GiB = 2**30


def _splash_interpret_flags() -> list[str]:
    q = jnp.zeros((1, 2, 128, 64), jnp.bfloat16)
    jaxpr = jax.make_jaxpr(lambda q: attention(q, q, q, "splash", layout_heads_first=True, is_causal=True))(q)
    return re.findall(r"interpret=(\w+)", str(jaxpr))


def test_the_splash_kernel_is_traced_for_the_platform_lowered_for():
    """On this CPU the kernel is built for Pallas's interpreter; traced for a TPU, as a Mosaic kernel, even
    right after the same function was traced for the CPU (a cached trace would have kept the interpreter)."""
    assert target_platform() == jax.default_backend() == "cpu"
    assert set(_splash_interpret_flags()) == {"True"}
    with lowering_for("tpu"):
        assert target_platform() == "tpu"
        assert set(_splash_interpret_flags()) == {"False"}
    assert set(_splash_interpret_flags()) == {"True"}


def test_every_tpu_device_has_a_one_chip_topology():
    tpus = {name for name in DEVICES if name != "here" and lookup(name).platform == "tpu"}
    assert tpus and tpus == set(tpu_compile.TOPOLOGIES)


def _fake_step(temp_gib: float):
    sizes = {"argument": int(1 * GiB), "output": int(1 * GiB), "alias": int(1 * GiB), "temp": int(temp_gib * GiB),
             "generated_code": int(0.25 * GiB)}
    return tpu_compile.CompiledStep(sizes, "TPU v5 lite", "libtpu test")


@pytest.mark.parametrize(("temp_gib", "fits"), [(2.0, "yes"), (20.0, "no")])
def test_the_compiled_steps_memory_replaces_the_estimate(monkeypatch, temp_gib, fits):
    """The prediction's memory is the compiled step's (arguments + temporaries + code + outputs not aliased),
    a single figure without the estimates' error bar, and it decides whether the step fits the chip."""
    monkeypatch.setattr(tpu_compile, "target_device", lambda device: None)
    monkeypatch.setattr(tpu_compile, "compile_step", lambda trainer, x, y, device, state=None: _fake_step(temp_gib))
    spec = build_specs("tiny", "jax", "jit+bf16", {})[0]
    estimate = command.run([spec], "tpu-v5e")[0][0]
    compiled = command.run([spec], "tpu-v5e", compile_step=True)[0][0]
    want = (1 + temp_gib + 0.25) * GiB
    assert compiled.memory_range == (want, want) != estimate.memory_range
    assert compiled.memory_error_bar is None and compiled.fits == fits
    assert compiled.step_ms == estimate.step_ms  # the time is still the roofline's
    assert any("compiled here for TPU v5 lite by libtpu test" in n for n in compiled.notes)


def test_a_torch_strategy_keeps_the_estimate_and_says_why(monkeypatch):
    monkeypatch.setattr(tpu_compile, "target_device", lambda device: None)
    monkeypatch.setattr(tpu_compile, "compile_step", lambda *a, **k: pytest.fail("torch has no XLA program"))
    spec = build_specs("tiny", "torch", "eager", {})[0]
    pred = command.run([spec], "tpu-v5e", compile_step=True)[0][0]
    assert pred.memory_range[0] > 0 and any("a torch strategy has no XLA program" in n for n in pred.notes)


@pytest.mark.skipif(tpu_compile.libtpu_version() is not None, reason="libtpu is installed here")
def test_without_libtpu_compile_is_one_line_and_exit_2():
    r = CliRunner().invoke(app, ["predict", "--preset", "tiny", "--strategies", "jax:jit+bf16", "--device",
                                 "tpu-v5e", "--compile"])
    assert r.exit_code == 2, r.output
    assert "needs the TPU compiler (libtpu)" in r.output and f"jax[tpu]=={jax.__version__}" in r.output
    assert "Traceback" not in r.output


@pytest.mark.skipif(tpu_compile.libtpu_version() is None, reason="needs libtpu (pip install 'jax[tpu]')")
def test_a_splash_step_compiled_for_a_v5e_holds_mosaic_kernels_and_its_sizes():
    """Compiled for a TPU v5e here: the attention is the Mosaic kernel (a custom call), not Pallas's
    interpreter (a while loop over the grid), and the peak is memory_analysis()'s sum."""
    from twinbench.predict.program import trainer_and_batch

    spec = build_specs("tiny", "jax", "jit+bf16", {"seq": 128, "context": 128}, attention_impl="splash")[0]
    trainer, x, y = trainer_and_batch(spec)
    step = tpu_compile.compile_step(trainer, x, y, "tpu-v5e")
    assert step.device_kind == "TPU v5 lite" and step.peak_bytes == jax_step_estimate(step.sizes) > 0
    assert step.kernels >= 2 * spec.model.layers  # each layer's forward and backward kernel
    assert step.sizes["alias"] > 0  # the donated state is updated in place


def test_the_compiled_steps_kernels_replace_the_models_step_and_carry_their_own_error_bar(monkeypatch):
    """With the compiled program's kernels the step is theirs (plus the host's dispatch the model adds), and the
    error bar is that of ``--compile``'s own predictions of the shipped points, not the model's."""
    from twinbench.predict import calibration
    from twinbench.predict.roofline import Op

    kernels = (Op("fusion.1", "matmul", 2e12, 1e8, "bf16"), Op("fusion.2", "fused", 0.0, 4e9, ""))
    step = tpu_compile.CompiledStep(_fake_step(2.0).sizes, "TPU v5 lite", "libtpu test", 0, kernels)
    monkeypatch.setattr(tpu_compile, "target_device", lambda device: None)
    monkeypatch.setattr(tpu_compile, "compile_step", lambda trainer, x, y, device, state=None: step)
    spec = build_specs("tiny", "jax", "jit+bf16", {})[0]
    estimate = command.run([spec], "tpu-v5e")[0][0]
    pred = command.run([spec], "tpu-v5e", compile_step=True)[0][0]
    names = [t.op.name for t in pred.roof.times]
    assert names == ["fusion.1", "fusion.2", "dispatch"]
    assert pred.step_ms > 10 * estimate.step_ms  # 2 TFLOP and 4 GB against the tiny model's own
    shipped = [p.compiled_error for p in calibration.shipped() if p.kind == ("tpu", "jax") and p.compiled_ms]
    assert shipped and pred.error_bar.n == len(shipped)
    assert pred.error_bar.errors != estimate.error_bar.errors
    assert pred.error_bar.max_abs == pytest.approx(max(abs(e) for e in shipped))
