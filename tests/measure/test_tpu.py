"""The TPU paths of measurement, on the CPU, from the figures of one TPU v5e sitting (fixtures/tpu/v5e_run.json):
datasheets by ``device_kind``, the matmul precision's words, the host CPU of a VM that hides its model, the
peak memory a TPU's allocator leaves temporaries out of, and the preflight the compiler's refusal becomes."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from twinbench import backends
from twinbench.measure import device, memory, peak, platforms
from twinbench.spec import from_preset

RUN = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "tpu" / "v5e_run.json").read_text())
GiB = 2**30


@pytest.mark.parametrize(("kind", "entry", "bf16", "hbm_gbs", "hbm_gib"), [
    ("TPU v4", "TPU v4", 275, 1228, 32), ("TPU v5 lite", "TPU v5e", 197, 819, 16),
    ("TPU v5e", "TPU v5e", 197, 819, 16), ("TPU v5", "TPU v5p", 459, 2765, 95), ("TPU v5p", "TPU v5p", 459, 2765, 95),
    ("TPU v6 lite", "TPU v6e", 918, 1640, 32)])
def test_every_tpu_generation_has_its_datasheet(kind: str, entry: str, bf16: float, hbm_gbs: float,
                                                hbm_gib: int) -> None:
    sheet = peak.datasheet(kind)
    assert sheet is not None and sheet.name == entry
    assert sheet.bf16_tflops == bf16 and sheet.hbm_gbs == hbm_gbs and sheet.hbm_bytes == hbm_gib * GiB
    assert sheet.interconnect_gbs and sheet.int8_tops and sheet.int8_tops >= sheet.bf16_tflops
    assert sheet.fp32_tflops == pytest.approx(bf16 / 6)  # fp32 at precision highest: 6 bf16 passes
    assert peak.datasheet_tflops(kind, "bf16") == bf16


def test_the_v5e_run_gets_an_mfu_against_its_datasheet() -> None:
    from twinbench.measure.metrics import speed

    sheet = peak.datasheet_tflops(RUN["device_kind"], "bf16")
    assert sheet == 197
    timing = SimpleNamespace(step_s=[0.108] * 3)
    tp = speed(timing, 8 * 1024, 855166464, RUN["gpt2_124m"]["peak_tflops"], sheet, 1, 1)
    assert 0 < tp.mfu_datasheet < tp.mfu < 1  # the chip's measured matmul peak is below its datasheet


@pytest.mark.parametrize(("name", "entry"), [("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H200", "H200 SXM"),
                                             ("NVIDIA A100-SXM4-80GB", "A100"), ("AMD Instinct MI300X", "MI300X")])
def test_gpus_have_the_same_datasheet_fields(name: str, entry: str) -> None:
    sheet = peak.datasheet(name)
    assert sheet is not None and sheet.name == entry
    assert sheet.bf16_tflops and sheet.fp32_tflops and sheet.hbm_gbs and sheet.hbm_bytes
    assert sheet.bf16_tflops > sheet.fp32_tflops


def test_no_datasheet_is_borrowed() -> None:
    for name in ("TPU v3", "NVIDIA A10G", "AMD EPYC 7B13", "", None, "TPU v5 lite extra"):
        assert peak.datasheet(name) is None
    assert peak.datasheet("NVIDIA A100-SXM4-40GB").hbm_bytes == 40 * 10**9  # type: ignore[union-attr]


def test_a_tpu_says_what_its_fp32_matmuls_are() -> None:
    jax_words = backends.get("jax").fp32_matmul_words
    assert "6 bf16 passes" in jax_words("tpu", tf32=False)
    assert "3 bf16 passes" in jax_words("tpu", tf32=True)
    assert "TF32" not in jax_words("tpu", tf32=False)
    for p in ("cpu", "gpu", "cuda"):
        assert jax_words(p, tf32=False) == "fp32 (no TF32)"
    words = device.set_fp32_matmul("jax", platform="tpu")
    assert words.endswith("; jax_default_matmul_precision=highest") and "6 bf16 passes" in words
    assert device.matmul_label(words) == jax_words("tpu", tf32=False)
    assert device.set_fp32_matmul("jax").startswith("fp32 (no TF32); ")  # here: the CPU, as before


def test_a_bf16_run_on_a_tpu_keeps_jax_default_precision() -> None:
    """The TPU's Pallas kernels (Mosaic) refuse ``highest`` on bf16 operands ("Bad lhs type", seen on a v5e):
    a bf16 run's matmuls take bf16 operands, one pass whatever the setting, so it keeps JAX's default."""
    import jax

    try:
        words = device.set_fp32_matmul("jax", platform="tpu", precision="bf16")
        assert jax.config.jax_default_matmul_precision == "default"
        assert words == "bf16 operands, one bf16 pass; jax_default_matmul_precision=default"
        device.set_fp32_matmul("jax", platform="cpu", precision="bf16")  # elsewhere: fp32 means fp32, as before
        assert jax.config.jax_default_matmul_precision == "highest"
        device.set_fp32_matmul("jax", platform="tpu", precision="fp32")
        assert jax.config.jax_default_matmul_precision == "highest"
    finally:
        jax.config.update("jax_default_matmul_precision", "highest")


def test_platforms_are_asked_not_branched_on() -> None:
    assert platforms.get("cuda") is platforms.get("gpu") is platforms.GPU
    assert platforms.get(None) is platforms.CPU and not platforms.CPU.accelerator
    assert platforms.get("tpu").routes["torch"].startswith("torchax")
    assert platforms.get("gpu").routes == {}
    assert platforms.accelerator_words(["cpu", "tpu"]) == "the TPU"
    assert platforms.accelerator_words(["gpu", "tpu"]) == "the accelerator"


def test_a_vm_that_hides_its_cpu_model_is_named_by_its_vendor() -> None:
    assert device.cpu_name(RUN["cpuinfo"]) == "AMD"
    assert device.cpu_name(RUN["cpuinfo"] + "\ncpu family\t: 25") == "AMD family 25"
    assert device.cpu_isa(RUN["cpuinfo"]) == "AVX2, FMA"
    assert device.cpu_name("vendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R)") == "Intel(R) Xeon(R)"
    assert "unknown" not in device.cpu_name("model name\t: unknown\n").lower()


def test_a_tpu_peak_includes_the_compiled_steps_temporaries() -> None:
    """The allocator's 1.52 GiB leaves out 8.66 GiB of temporaries: the peak is the compiled step's, and the
    breakdown's parts sum to within 10% of it (they were 660% of the allocator's)."""
    gpt = RUN["gpt2_124m"]
    sizes = gpt["memory_analysis"]
    got = memory.device_peak("tpu", gpt["allocator_peak_bytes"], device.ALLOCATOR_PEAK, sizes)
    assert got.peak_source == memory.PROGRAM_PEAK and got.allocator_peak_bytes == gpt["allocator_peak_bytes"]
    assert got.peak_bytes == got.program_peak_bytes == memory.jax_step_estimate(sizes)
    # the same figure as the HLO dump's memory-usage report of the step, within 2%
    assert got.peak_bytes == pytest.approx(gpt["hlo_memory_usage_report_total_bytes"], rel=0.02)
    params = SimpleNamespace(nbytes=gpt["params_bytes"])
    opt = SimpleNamespace(nbytes=gpt["optimizer_state_bytes"])
    residuals = [(where, n) for where, n in gpt["residuals"]]
    b = memory.jax_breakdown(got.peak_bytes, got.peak_source, 0, [params], [opt], gpt["inputs_bytes"],
                             sizes, residuals, on_cpu=False).to_dict()
    assert 0.9 <= b["accounted"] <= 1.1, b
    assert b["parts"]["gradients"] == gpt["params_bytes"]
    assert "unaccounted" not in memory.summary(b)
    # before: the allocator's peak, 660% accounted
    before = memory.jax_breakdown(gpt["allocator_peak_bytes"], "x", 0, [params], [opt], gpt["inputs_bytes"], sizes,
                                  residuals, on_cpu=False).to_dict()
    assert before["accounted"] > 5


@pytest.mark.parametrize("platform", ["cpu", "gpu"])
def test_where_the_allocator_sees_temporaries_its_peak_stays(platform: str) -> None:
    sizes = RUN["gpt2_124m"]["memory_analysis"]
    got = memory.device_peak(platform, 12 * GiB, device.ALLOCATOR_PEAK, sizes)
    assert got.peak_bytes == 12 * GiB and got.peak_source == device.ALLOCATOR_PEAK
    assert got.program_peak_bytes == memory.jax_step_estimate(sizes)
    assert memory.device_peak("tpu", 5, "a", {}).peak_bytes == 5  # no compiled sizes: the allocator's
    assert memory.record_peak("no breakdown: why", 7, "a") == (7, "a")
    assert memory.record_peak(memory.Breakdown(9, "b", "m"), 7, "a") == (9, "b")


def test_the_compilers_refusal_is_read() -> None:
    temps, limit = memory.compile_refusal(RuntimeError(RUN["llama_300m_refusal"]))  # type: ignore[misc]
    assert temps == pytest.approx(16.52 * GiB, rel=1e-3) and limit == pytest.approx(15.75 * GiB, rel=1e-3)
    assert limit == pytest.approx(RUN["memory_stats"]["bytes_limit"], rel=1e-3)
    assert memory.compile_refusal(RuntimeError("RESOURCE_EXHAUSTED: no sizes")) == (0, 0)
    assert memory.compile_refusal(ValueError("shapes do not match")) is None


class _Trainer:
    """Enough of a JAX trainer for the preflight: state that is resident, a step whose compile is faked."""

    def __init__(self, resident: int) -> None:
        self.params = [SimpleNamespace(nbytes=resident // 3)]
        self.opt_state = [SimpleNamespace(nbytes=resident - resident // 3)]


def _tpu(monkeypatch: pytest.MonkeyPatch, stats: dict[str, int]) -> None:
    monkeypatch.setattr(memory, "jax_available",
                        lambda platform: (stats["bytes_limit"] - stats["bytes_in_use"], "the TPU"))
    monkeypatch.setattr(memory, "lacks", lambda *a: None)
    monkeypatch.setattr(memory, "resident_bytes", lambda trainer: trainer.params[0].nbytes + trainer.opt_state[0].nbytes)


def llama(**over: Any) -> Any:
    return from_preset("llama-300m", {"batch": 8, "seq": 1024, "precision": "bf16", **over}, framework="jax",
                       strategy="jit+bf16")


def test_a_step_the_tpu_compiler_refuses_is_a_preflight_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    """llama-300m 8x1024 on a v5e: the compile itself says RESOURCE_EXHAUSTED. The preflight turns it into
    a refusal whose one line names what would fit, instead of a failure after the compile."""
    _tpu(monkeypatch, RUN["memory_stats"])

    def refuse(*a: Any) -> dict[str, int]:
        raise RuntimeError(RUN["llama_300m_refusal"])

    monkeypatch.setattr(memory, "jax_sizes", refuse)
    flight = memory.preflight(llama(), _Trainer(3 * GiB), None, "tpu", 300_000_000)  # type: ignore[arg-type]
    assert flight is not None and not flight.fits and flight.refused_by_compiler
    line = flight.reason()
    assert "\n" not in line and line.startswith("preflight: ") and "the TPU" in line
    assert "+remat" in line and "--attention-impl splash" in line and "--no-preflight" in line
    batch = int(line.split("--batch ")[1].split()[0])
    assert 1 <= batch < 8
    assert flight.to_dict()["refused_by_compiler"] is True
    # a remat run that still does not fit names no +remat, and a splash run no splash
    s = from_preset("llama-300m", {"batch": 8, "seq": 1024, "precision": "bf16"}, framework="jax",
                    strategy="jit+bf16+remat")
    again = memory.preflight(s, _Trainer(3 * GiB), None, "tpu", 300_000_000)  # type: ignore[arg-type]
    assert again is not None and "+remat" not in again.reason()

    def other(*a: Any) -> dict[str, int]:
        raise ValueError("not about memory")

    monkeypatch.setattr(memory, "jax_sizes", other)
    with pytest.raises(ValueError):  # any other compile error is the run's, not a preflight refusal
        memory.preflight(llama(), _Trainer(3 * GiB), None, "tpu", 300_000_000)  # type: ignore[arg-type]


def test_a_compiled_step_too_large_for_the_hbm_is_refused_with_advice(monkeypatch: pytest.MonkeyPatch) -> None:
    stats = RUN["memory_stats"] | {"bytes_in_use": 3 * GiB}
    _tpu(monkeypatch, stats)
    sizes = {"argument": 3 * GiB, "output": 3 * GiB, "alias": 3 * GiB, "temp": 17 * GiB, "generated_code": 0}
    monkeypatch.setattr(memory, "jax_sizes", lambda *a: sizes)
    flight = memory.preflight(llama(), _Trainer(3 * GiB), None, "tpu", 300_000_000)  # type: ignore[arg-type]
    assert flight is not None and not flight.fits and not flight.refused_by_compiler
    assert flight.estimate_bytes == 17 * GiB and "to fit, try: " in flight.reason()
    assert any(a.startswith("--batch ") for a in flight.advice)
    # the same step against a v5p's HBM fits, and says nothing of what would
    _tpu(monkeypatch, stats | {"bytes_limit": peak.datasheet("TPU v5p").hbm_bytes})  # type: ignore[union-attr]
    roomy = memory.preflight(llama(), _Trainer(3 * GiB), None, "tpu", 300_000_000)  # type: ignore[arg-type]
    assert roomy is not None and roomy.fits and not roomy.advice


def test_fitting_batch() -> None:
    assert memory.fitting_batch(8, need=16 * GiB, fixed=0, available=10 * GiB) == 4
    assert memory.fitting_batch(8, need=16 * GiB, fixed=9 * GiB, available=10 * GiB) == 0
