"""The run spec: presets, flag overrides, and one-line errors for impossible values."""

from __future__ import annotations

import pytest

from twinbench.spec import PRESETS, RunSpec, SpecError, from_preset, validate


def test_presets_have_the_documented_shapes():
    m, t = PRESETS["small"]
    assert (m.layers, m.d_model, m.heads, m.vocab, m.context, t.batch) == (4, 256, 4, 256, 128, 8)
    m, _ = PRESETS["gpt2-124m"]
    assert (m.layers, m.d_model, m.heads, m.vocab, m.context) == (12, 768, 12, 50257, 1024)
    m, _ = PRESETS["gpt-350m"]
    assert (m.layers, m.d_model, m.heads) == (24, 1024, 16)
    for name in PRESETS:
        validate(from_preset(name))


def test_overrides_reach_the_right_part_of_the_spec():
    spec = validate(from_preset("small", {"layers": 2, "d_model": 128, "batch": 4, "lr": 0.01, "threads": 1,
                                          "heads": None}))
    assert (spec.model.layers, spec.model.d_model, spec.model.heads) == (2, 128, 4)
    assert (spec.train.batch, spec.train.lr, spec.host.threads) == (4, 0.01, 1)
    # a smaller context alone pulls seq down with it rather than failing
    assert validate(from_preset("small", {"context": 64})).train.seq == 64


def test_spec_round_trips_through_json_and_ids_are_stable():
    spec = from_preset("tiny", {"layers": 3}, framework="jax", strategy="jit")
    again = RunSpec.from_dict(spec.to_dict())
    assert again == spec and again.run_id() == spec.run_id()
    assert from_preset("tiny", {"layers": 4}).run_id() != spec.run_id()
    seq_minor = from_preset("tiny", {"layers": 3}, framework="jax", strategy="jit", splash_layout="seq-minor")
    assert seq_minor.run_id() != spec.run_id()


@pytest.mark.parametrize(("overrides", "top", "message"), [
    ({"heads": 3}, {}, "--heads 3 does not divide --d-model 256"),
    ({"seq": 256}, {}, "--seq 256 exceeds --context 128"),
    ({"layers": 0}, {}, "--layers must be a positive integer"),
    ({"batch": -2}, {}, "--batch must be a positive integer"),
    ({"warmup": 30}, {}, "--warmup 30 leaves no measured step"),
    ({"precision": "fp8"}, {}, "--precision: unknown value 'fp8'; allowed: fp32, bf16"),
    ({"lr": 0.0}, {}, "--lr must be > 0"),
    ({}, {"framework": "mxnet"}, "--framework: unknown value 'mxnet'; allowed: torch, jax"),
    ({"devices": 3}, {}, "--batch 8 is not divisible by --devices 3"),
    ({"seq": 96}, {"framework": "jax", "attention_impl": "splash"}, "--seq 96 is not a multiple of 128"),
    ({}, {"framework": "jax", "attention_impl": "splash", "splash_layout": "lanes"},
     "--splash-layout: unknown value 'lanes'; allowed: auto, head-dim-minor, seq-minor"),
    ({}, {"framework": "jax", "splash_layout": "seq-minor"}, "it needs --attention-impl splash (this run has default)"),
])
def test_impossible_values_name_the_flag(overrides, top, message):
    with pytest.raises(SpecError) as e:
        validate(from_preset("small", overrides, **top))
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_unknown_preset_and_option():
    with pytest.raises(SpecError, match="--preset: unknown value 'huge'; allowed: tiny, small"):
        from_preset("huge")
    with pytest.raises(SpecError, match="unknown option --colour"):
        from_preset("small", {"colour": 1})


@pytest.mark.parametrize("impl, needle", [("cudnn", "runs in bf16 or fp16 only"),
                                          ("splash", "--seq 32 is not a multiple of 128")])
def test_a_jax_attention_kernel_s_limits_bind_the_jax_twins_only(impl, needle):
    with pytest.raises(SpecError, match=needle):
        validate(from_preset("tiny", framework="jax", strategy="jit").evolve(attention_impl=impl))
    validate(from_preset("tiny", framework="torch", strategy="eager").evolve(attention_impl=impl))  # SDPA picks
