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
