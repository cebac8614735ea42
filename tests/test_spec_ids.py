"""Run ids and config ids are how results on disk resume (``--resume``) and how repeats group: a spec of any
version that describes the same measured configuration keeps its ids. The ids below were computed by the flat
RunSpec (before its fields were grouped in sections) from these flat dicts, the ``spec`` of its records."""

from __future__ import annotations

import pytest

from twinbench.spec import RunSpec, from_preset

#: flat spec dicts as records of earlier versions hold them (missing fields: their defaults then)
FLAT = {
    "default": {"model": {}, "train": {}},
    "jax-jit-remat": {"model": {}, "train": {}, "framework": "jax", "strategy": "jit+remat",
                      "remat_policy": "dots-saveable"},
    "compile-bf16": {"model": {}, "train": {"precision": "bf16"}, "strategy": "compile+bf16+optc"},
    "scan-steps": {"model": {}, "train": {}, "framework": "jax", "strategy": "scan-steps", "scan_k": 5, "threads": 2},
    "scan-layers": {"model": {}, "train": {}, "framework": "jax", "strategy": "scan-layers+remat", "scan_unroll": 2},
    "splash": {"model": {}, "train": {}, "framework": "jax", "strategy": "jit", "attention_impl": "splash",
               "splash_layout": "seq-minor"},
    "repeat": {"model": {}, "train": {}, "framework": "jax", "strategy": "jit", "repeat": 2,
               "attention_impl": "chunked"},
    "host": {"model": {}, "train": {}, "xla_cpu_flags": "xla-default", "host_malloc": "system",
             "compile_cache": "warm", "cache_dir": "/tmp/c"},
    "mesh": {"model": {}, "train": {}, "framework": "jax", "strategy": "mesh-fsdp", "devices": 4,
             "num_processes": 2, "process_id": 1, "coordinator": "h:1234"},
    "outputs": {"model": {}, "train": {}, "trace_dir": "/tmp/t", "save_weights": "/tmp/w", "explain": True,
                "no_preflight": True},
    "user": {"model": {"family": "user"}, "train": {"task": "custom"}, "framework": "jax", "strategy": "port",
             "user_model": "/m.py:build", "user_jax_model": "/j.py:build", "user_dir": "/u"},
    "bert": {"model": {"family": "bert", "num_labels": 3, "mask_impl": "mul"}, "preset": "bert-tiny",
             "train": {"task": "classify", "slow_input": 1.5, "data": "/d.jsonl", "seed": 3},
             "strategy": "eager+bucket"},
    "shape": {"model": {"layers": 2, "d_model": 64, "heads": 2, "d_ff": 128, "vocab": 300, "context": 64},
              "train": {"batch": 4, "seq": 64, "steps": 10, "warmup": 2, "lr": 3e-4, "weight_decay": 0.0}},
}
#: (run_id, config_id) of each, computed before the sections
IDS = {
    "default": ("4ced934c04d6", "4ced934c04d6"),
    "jax-jit-remat": ("553c775ff1d0", "553c775ff1d0"),
    "compile-bf16": ("bfe6ad572c2d", "bfe6ad572c2d"),
    "scan-steps": ("5c7ff268a773", "5c7ff268a773"),
    "scan-layers": ("b526d0ed364d", "b526d0ed364d"),
    "splash": ("8cae021d29e8", "8cae021d29e8"),
    "repeat": ("ecad04786e90", "51ed36959736"),
    "host": ("efbe6ecf98f8", "efbe6ecf98f8"),
    "mesh": ("0b570c04ee5f", "0b570c04ee5f"),
    "outputs": ("4ced934c04d6", "4ced934c04d6"),  # outputs are not what is measured: the default's ids
    "user": ("109f8cb2d72e", "109f8cb2d72e"),
    "bert": ("ed5bde000403", "ed5bde000403"),
    "shape": ("fb68cbbadf6a", "fb68cbbadf6a"),
}


@pytest.mark.parametrize("name", sorted(FLAT))
def test_a_flat_spec_of_an_earlier_record_keeps_its_ids(name):
    spec = RunSpec.from_dict(FLAT[name])
    assert (spec.run_id(), spec.config_id()) == IDS[name]


@pytest.mark.parametrize("name", sorted(FLAT))
def test_a_spec_written_and_read_back_keeps_its_ids(name):
    spec = RunSpec.from_dict(FLAT[name])
    again = RunSpec.from_dict(spec.to_dict())
    assert again == spec
    assert (again.run_id(), again.config_id()) == IDS[name]


def test_a_preset_with_flags_keeps_its_ids():
    spec = from_preset("small", {"layers": 2}, framework="jax", strategy="jit")
    assert (spec.run_id(), spec.config_id()) == ("adbf320298fe", "adbf320298fe")


#: (preset, flags, top-level fields) -> (run_id, config_id), computed from_preset on main at 477ba72, before the
#: spec's fields were marked with their identity (the run id then read its own list of fields)
PRESET_IDS: list[tuple[str, dict, dict, str, str]] = [
    ("tiny", {}, {"framework": "torch", "strategy": "eager"}, "93524cdf36ff", "93524cdf36ff"),
    ("tiny", {}, {"framework": "jax", "strategy": "jit"}, "07a04f84601d", "07a04f84601d"),
    ("small", {}, {"framework": "torch", "strategy": "eager"}, "4ced934c04d6", "4ced934c04d6"),
    ("small", {}, {"framework": "jax", "strategy": "jit"}, "d3e79d1e6263", "d3e79d1e6263"),
    ("gpt2-124m", {}, {"framework": "torch", "strategy": "eager"}, "fb7928f9d49c", "fb7928f9d49c"),
    ("gpt2-124m", {}, {"framework": "jax", "strategy": "jit"}, "6815dad3f923", "6815dad3f923"),
    ("gpt-350m", {}, {"framework": "torch", "strategy": "eager"}, "ab6af50c9fa2", "ab6af50c9fa2"),
    ("gpt-350m", {}, {"framework": "jax", "strategy": "jit"}, "5093e0562fee", "5093e0562fee"),
    ("bert-tiny", {}, {"framework": "torch", "strategy": "eager"}, "f6cdf91040d1", "f6cdf91040d1"),
    ("bert-tiny", {}, {"framework": "jax", "strategy": "jit"}, "fe490c3b1686", "fe490c3b1686"),
    ("bert-base", {}, {"framework": "torch", "strategy": "eager"}, "cf0f105f495b", "cf0f105f495b"),
    ("bert-base", {}, {"framework": "jax", "strategy": "jit"}, "7eec538ef2f7", "7eec538ef2f7"),
    ("llama-tiny", {}, {"framework": "torch", "strategy": "eager"}, "cc4c619dabc1", "cc4c619dabc1"),
    ("llama-tiny", {}, {"framework": "jax", "strategy": "jit"}, "d6392173b45f", "d6392173b45f"),
    ("llama-small", {}, {"framework": "torch", "strategy": "eager"}, "57b6f1bf88bf", "57b6f1bf88bf"),
    ("llama-small", {}, {"framework": "jax", "strategy": "jit"}, "9d7cb865c696", "9d7cb865c696"),
    ("llama-300m", {}, {"framework": "torch", "strategy": "eager"}, "376de3ea9a35", "376de3ea9a35"),
    ("llama-300m", {}, {"framework": "jax", "strategy": "jit"}, "03d404c56c49", "03d404c56c49"),
    ("small", {"remat_policy": "nothing-saveable"}, {"framework": "jax", "strategy": "jit+remat"},
     "2ef01fe1d82c", "2ef01fe1d82c"),
    ("small", {"scan_k": 5}, {"framework": "jax", "strategy": "scan-steps"}, "c471929eed42", "c471929eed42"),
    ("small", {"scan_unroll": 2}, {"framework": "jax", "strategy": "scan-layers"}, "47b3c9b93b9e", "47b3c9b93b9e"),
    ("small", {"attention_impl": "splash", "splash_layout": "seq-minor"}, {"framework": "jax", "strategy": "jit"},
     "8cae021d29e8", "8cae021d29e8"),
    ("small", {"mlp_activation": "stored"}, {"framework": "jax", "strategy": "jit"}, "92093aedd8a9", "92093aedd8a9"),
    ("small", {"optimizer_state": "flat"}, {"framework": "jax", "strategy": "jit"}, "6a41e70cc0fc", "6a41e70cc0fc"),
    ("small", {"threads": 2, "xla_cpu_flags": "xla-default", "host_malloc": "system"},
     {"framework": "jax", "strategy": "jit"}, "77fd38998bdf", "77fd38998bdf"),
    ("small", {"devices": 2}, {"framework": "torch", "strategy": "ddp"}, "4402acc49394", "4402acc49394"),
    ("small", {"precision": "bf16"}, {"framework": "torch", "strategy": "compile+bf16"}, "ae4fc3439f8e",
     "ae4fc3439f8e"),
    ("bert-tiny", {"mask_impl": "mul", "num_labels": 3}, {"framework": "jax", "strategy": "jit+bucket"},
     "0524bee7e6ec", "0524bee7e6ec"),
    ("tiny", {"steps": 10, "warmup": 2, "lr": 3e-4, "seed": 1, "slow_input": 1.0},
     {"framework": "torch", "strategy": "eager"}, "cd3ac3e1d812", "cd3ac3e1d812"),
    ("tiny", {}, {"framework": "jax", "strategy": "jit", "repeat": 2}, "069385f65ec0", "07a04f84601d"),
    ("tiny", {}, {"framework": "jax", "strategy": "jit", "compile_cache": "warm", "trace_dir": "/tmp/t",
                  "explain": True, "no_preflight": True, "cache_dir": "/c"}, "c962b3ba506d", "c962b3ba506d"),
]


@pytest.mark.parametrize(("preset", "flags", "top", "run_id", "config_id"), PRESET_IDS)
def test_every_preset_and_option_keeps_the_ids_it_had(preset, flags, top, run_id, config_id):
    spec = from_preset(preset, flags, **top)
    assert (spec.run_id(), spec.config_id()) == (run_id, config_id)
