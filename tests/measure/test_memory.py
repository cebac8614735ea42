"""The memory breakdown and the preflight (measure/memory.py; what they read: memory_readings.py), on the tiny
preset, in process.

A planted extra buffer (a larger batch) must grow the activations and leave params, optimizer state and
gradients alone; a run that cannot fit under a small fake memory limit becomes a ``skipped`` record with the
estimate, before any timed step; failed records keep the threads they were given.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from twinbench.measure import memory, memory_readings
from twinbench.record import for_spec
from twinbench.spec import SpecError, from_preset, validate


def spec(framework: str, batch: int = 4, **over: Any) -> Any:
    return from_preset("tiny", {"batch": batch, "steps": 2, "warmup": 1, **over}, framework=framework,
                       strategy="jit" if framework == "jax" else "eager")


def trainer_and_batch(s: Any) -> tuple[Any, tuple[np.ndarray, np.ndarray]]:
    from twinbench.data import tasks
    from twinbench.models import family
    from twinbench.strategies import registry

    fam = family.get(s)
    trainer = registry.builder(s)(s, fam.init_weights(s.model, s.train.seed))
    return trainer, tasks.run_data(s, 1).batches[0]


@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_a_larger_batch_grows_the_activations_only(framework: str) -> None:
    parts = {}
    for batch in (4, 16):
        s = spec(framework, batch)
        trainer, b = trainer_and_batch(s)
        if framework == "torch":
            trainer.step(*b)  # torch's AdamW makes its state on the first step (JAX's exists already)
        d = memory.breakdown(s, trainer, b, peak_bytes=2**30, peak_source="test", runtime_bytes=0,
                             platform="cpu", sizes=None)
        assert isinstance(d, memory.Breakdown), d  # not why it could not be made
        parts[batch] = d.parts
        assert d.activations_by_source, "activations are attributed to where they were made"
    small, big = parts[4], parts[16]
    for same in ("params", "optimizer_state"):
        assert small[same] == big[same] > 0
    # JAX: every gradient lives in the step's buffers; torch: those alive at the peak (none at the end of the
    # forward pass, where a GPT's peak is) -- the same either way for both batches
    assert small["gradients"] == big["gradients"] >= 0
    assert big["activations"] > 3 * small["activations"] > 0  # 4x the tokens: ~4x what the backward keeps
    if framework == "jax":  # the batch itself; torch: what its memory profiler calls inputs (the batch and more)
        assert big["inputs"] == 4 * small["inputs"]
    assert big["inputs"] > small["inputs"]


def test_breakdown_sums_and_reports_what_is_unaccounted() -> None:
    b = memory.Breakdown(1000, "test", "m", {"params": 400, "activations": 400})
    d = b.to_dict()
    assert d["unaccounted_bytes"] == 200 and d["accounted"] == 0.8
    assert "unaccounted" in memory.summary(d)
    assert "unaccounted" not in memory.summary(memory.Breakdown(1000, "t", "m", {"params": 950}).to_dict())


def test_the_preflight_skips_a_run_that_cannot_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake host with 1 MiB available: the JAX step (memory_analysis) and the torch estimate exceed it;
    with the real host they fit. The worker turns the decision into a skipped record before any step."""
    from twinbench import worker

    for framework in ("jax", "torch"):
        s = spec(framework)
        trainer, b = trainer_and_batch(s)
        ok = memory.preflight(s, trainer, b, "cpu", 10_000)
        assert ok is not None and ok.fits and ok.estimate_bytes > 0
    for module in (memory, memory_readings):  # the torch preflight reads it in memory.py, the JAX one through
        monkeypatch.setattr(module, "host_available_bytes", lambda: 2**20)  # memory_readings.jax_available
    s = spec("jax")
    rec = worker.execute(s, threads=1)
    assert rec.status == "skipped" and rec.timing.step_ms is None
    assert "preflight" in (rec.error or "") and "GiB" in (rec.error or "")
    pre = rec.memory.breakdown["preflight"]
    assert pre["available_bytes"] == 2**20 and pre["estimate_bytes"] > 2**20
    assert pre["compiled"]["temp"] > 0
    assert rec.conditions.threads == 1 and rec.run.precision == "fp32" and rec.run.device_count == 1
    assert memory.preflight(spec("torch"), *trainer_and_batch(spec("torch")), "cpu", 10_000).fits is False


def test_a_small_jax_twin_is_compiled_once_and_still_broken_down(monkeypatch: pytest.MonkeyPatch) -> None:
    """Far below the available memory, the upper bound from the shapes decides the preflight: no second
    compile of the step; the breakdown after the run reads the compiled sizes of the run's own executable."""
    from twinbench import worker

    monkeypatch.setattr(memory, "jax_sizes", lambda *a: pytest.fail("the step was compiled for the preflight"))
    rec = worker.execute(spec("jax"), threads=1)
    assert rec.status == "ok", rec.error
    pre = rec.memory.breakdown["preflight"]
    assert pre["how"].startswith("upper bound") and pre["compiled"] == {} and pre["estimate_bytes"] > 0
    assert rec.memory.breakdown["compiled"]["temp"] > 0


@pytest.mark.parametrize(("preset", "strategy"), [("bert-tiny", "jit"), ("tiny", "scan-layers")])
def test_the_upper_bound_is_above_the_compiled_step(preset: str, strategy: str) -> None:
    """The bound the preflight trusts instead of compiling is above what XLA compiles (the two closest
    cases of a sweep of shapes: 1.4x and 1.6x)."""
    import jax

    s = from_preset(preset, {"seq": 32, "steps": 2, "warmup": 1}, framework="jax", strategy=strategy)
    trainer, b = trainer_and_batch(s)
    n = sum(x.size for x in jax.tree.leaves(trainer.params))
    assert memory.jax_upper_bound(s, n) > memory.jax_step_estimate(memory.jax_sizes(trainer, b))


def test_no_preflight_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from twinbench import worker

    monkeypatch.setattr(memory, "preflight", lambda *a: pytest.fail("preflight ran with --no-preflight"))
    assert worker._preflight(spec("jax", no_preflight=True), None, None) is None  # type: ignore[arg-type]


def test_failed_records_keep_the_threads_they_were_given() -> None:
    rec = for_spec(spec("torch"), "failed", error="x")
    assert rec.conditions.threads >= 1 and rec.run.attention_impl == "default"
    assert for_spec(spec("torch", threads=3), "failed").conditions.threads == 3


def test_attention_impl_is_checked() -> None:
    validate(spec("jax", attention_impl="chunked"))
    with pytest.raises(SpecError, match="attention-impl"):
        validate(spec("jax", attention_impl="flash"))


def test_a_compiled_preflight_is_the_runs_own_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a large GPU the shape bound is above EXACT_ABOVE and the JAX step is compiled for the preflight: that
    compile must be the run's (the first step reuses it), counted once, so compile_s, the first step and the
    programs agree with a run without a preflight (forced here on the CPU with the tiny preset)."""
    import jax

    from twinbench import worker

    monkeypatch.setattr(memory, "EXACT_ABOVE", 0.0)  # the bound never decides: compile for the estimate
    runs = {}
    for no_preflight in (True, False):
        jax.clear_caches()  # each run compiles its step, as a fresh process does
        runs[no_preflight] = worker.execute(spec("jax", steps=3, no_preflight=no_preflight), threads=1)
    without, with_ = runs[True], runs[False]
    assert with_.status == without.status == "ok", with_.error
    pre = with_.memory.breakdown["preflight"]
    assert pre["how"] == "compiled step memory_analysis()" and pre["compile_reused_by_the_run"] is True
    assert with_.compile.compiles_total == without.compile.compiles_total  # the step's programs counted once
    assert with_.compile.compiles_in_loop == without.compile.compiles_in_loop
    assert with_.compile.compile_s > 0 and 1 / 3 < with_.compile.compile_s / without.compile.compile_s < 3  # not ~0, not twice
    assert with_.timing.first_step_s >= with_.compile.compile_s


def test_a_preflight_compile_the_run_did_not_reuse_is_left_out() -> None:
    flight = memory.Preflight(1, 2, "the device", "compiled step memory_analysis()", {"temp": 1},
                              memory.PreflightCompile(compiles=1, compile_s=2.0, cache_hits=1, wall_s=2.5))
    assert flight.fold(first_step_compiles=0) == memory.Folded(compile_s=2.0, first_step_s=2.5, compiles_in_loop=1,
                                                               compiles_total=0, compile_cache_hits=0)
    assert flight.to_dict()["compile_reused_by_the_run"] is True
    left_out = flight.fold(first_step_compiles=1)  # its program, and its load from the persistent cache
    assert left_out.compiles_total == -1 and left_out.compile_cache_hits == -1 and flight.reused is False
    assert memory.Preflight(1, 2, "the host", "upper bound").fold(0) == memory.Folded()  # nothing compiled


def test_resident_state_is_not_counted_twice() -> None:
    """What the trainer holds is in use already (off what is available): the estimate leaves it out."""
    s = spec("torch")
    trainer, b = trainer_and_batch(s)
    resident = memory.resident_bytes(trainer)
    assert resident > 0
    m, t = s.model, s.train
    full = memory.torch_estimate(10_000 * 4, m.layers, t.batch * t.seq, m.d_model, m.vocab, 4)
    assert memory.preflight(s, trainer, b, "cpu", 10_000).estimate_bytes == full - resident
