"""Variable-length batches: the same training whatever the padding; bucketing compiles one program per bucket."""

from __future__ import annotations

import numpy as np
import pytest

from twinbench.data import tasks
from twinbench.models.bert import init_bert
from twinbench.spec import RunSpec, SpecError, from_preset, validate

SMALL = {"layers": 1, "d_model": 32, "heads": 2, "context": 64, "seq": 64, "batch": 4, "steps": 5, "warmup": 1,
         "lr": 2e-3}


def spec_for(framework: str, strategy: str, **over) -> RunSpec:
    return validate(from_preset("bert-tiny", {**SMALL, **over}, framework=framework, strategy=strategy))


def train(spec: RunSpec, monitor=None) -> tuple[list[float], int, tasks.RunData]:
    """Losses of every step, compilations during the steps (if a monitor is given), and the run's data."""
    from twinbench.strategies import registry

    data = tasks.run_data(spec)
    trainer = registry.get(spec.framework, spec.strategy.name).load()(spec, init_bert(spec.model, 0))
    before = monitor.count() if monitor else 0
    losses = []
    for i in range(len(data.batches)):
        losses.append(float(trainer.step(*data.batches[i])))
    trainer.sync()
    return losses, (monitor.count() - before if monitor else 0), data


@pytest.mark.slow
def test_jax_bucket_compiles_at_most_one_program_per_bucket_and_dynamic_one_per_length():
    from twinbench.measure.compiles import JaxCompiles

    monitor = JaxCompiles()
    pad, n_pad, d_pad = train(spec_for("jax", "jit+pad-max"), monitor)
    bucket, n_bucket, d_bucket = train(spec_for("jax", "jit+bucket"), monitor)
    dynamic, n_dynamic, d_dynamic = train(spec_for("jax", "jit+dynamic", steps=3), monitor)  # 3 lengths
    assert n_pad == 1
    used = set(d_bucket.lengths)
    assert len(used) >= 2 and 1 <= n_bucket <= len(used)
    assert n_dynamic == len(set(d_dynamic.lengths)) > len(used)  # the monitor sees every recompile
    # padding is masked: the same losses whatever the policy
    np.testing.assert_allclose(bucket, pad, rtol=2e-5)
    np.testing.assert_allclose(dynamic, pad[:3], rtol=2e-5)
    stats = {name: d.token_stats(1, 1.0)["pad_pct"] for name, d in
             (("pad", d_pad), ("bucket", d_bucket), ("dynamic", d_dynamic))}
    assert stats["pad"] > stats["bucket"] > stats["dynamic"] > 0


def test_torch_eager_trains_the_same_with_any_padding():
    pad, _, _ = train(spec_for("torch", "eager+pad-max"))
    dynamic, _, _ = train(spec_for("torch", "eager+dynamic"))
    bucket, _, _ = train(spec_for("torch", "eager+bucket"))
    np.testing.assert_allclose(dynamic, pad, rtol=2e-5)
    np.testing.assert_allclose(bucket, pad, rtol=2e-5)


@pytest.mark.parametrize("strategy, message", [
    ("jit+bucket+dynamic", "choose one of pad-max, bucket, dynamic"),
])
def test_bad_combinations_are_one_line_errors(strategy, message):
    with pytest.raises(SpecError, match=message):
        spec_for("jax", strategy)


def test_length_modifiers_need_the_classify_task():
    with pytest.raises(SpecError, match="needs --task classify"):
        validate(from_preset("tiny", framework="jax", strategy="jit+bucket"))


def test_torch_compile_dynamic_setting():
    from twinbench.strategies.lengths import compile_dynamic

    assert compile_dynamic(spec_for("torch", "compile+bucket")) is False
    assert compile_dynamic(spec_for("torch", "compile+dynamic")) is None
    assert compile_dynamic(spec_for("torch", "compile+dynamic+symbolic")) is True


def test_default_compare_of_a_bert_preset_runs_the_default_set_and_the_variable_length_cases():
    from twinbench.cli import build_specs

    labels = [s.label() for s in build_specs("bert-tiny", "torch,jax", None, {})]
    assert labels == ["torch/eager", "jax/naive", "jax/jit", "torch/compile-regional", "torch/eager+dynamic",
                      "jax/jit+bucket"]


@pytest.mark.parametrize("strategy", ["scan-layers", "jit+remat", "scan-layers+bf16", "mesh-fsdp+remat", "pmap+bf16"])
def test_bert_takes_every_base_and_modifier(strategy):
    """Once refused with "not available for the bert family": the strategies now compose around its bundle."""
    from twinbench.spec import with_precision
    from twinbench.strategies import registry

    over = {**SMALL, "devices": 2 if strategy.startswith(("mesh", "pmap")) else 1}
    spec = validate(with_precision(from_preset("bert-tiny", over, framework="jax", strategy=strategy)))
    registry.check_devices(spec)  # no SpecError
