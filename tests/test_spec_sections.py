"""The run spec in sections: each field declared once (default, description, flag, choices), the strategy parsed
once, the versioned dict form, and the flat form of earlier records read back."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest

from twinbench.config import ModelConfig, TrainConfig, doc, is_declared, later
from twinbench.spec import (
    FIELDS,
    FLAG_HELP,
    ID_FIELDS,
    OVERRIDABLE,
    RunSpec,
    SpecError,
    from_preset,
    validate,
)
from twinbench.spec_sections import StrategySpec, flat_spec
from twinbench.strategies.modifiers import Modifiers

#: the keys of a flat spec as records of earlier versions hold it (besides ``model`` and ``train``)
FLAT_KEYS = {"framework", "strategy", "preset", "devices", "threads", "compile_cache", "cache_dir", "scan_k",
             "remat_policy", "scan_unroll", "xla_cpu_flags", "host_malloc", "attention_impl", "splash_layout",
             "trace_dir", "save_weights", "explain", "num_processes", "process_id", "coordinator", "user_model",
             "user_jax_model", "user_dir", "repeat", "no_preflight"}
#: fields added since, left out of a run id at their defaults (earlier records keep their ids)
ADDED = {"mlp_activation", "optimizer_state", "accum_steps"}
#: the flags a command took before they were read off the declarations
FLAGS = {"layers", "d_model", "heads", "d_ff", "vocab", "context", "batch", "seq", "steps", "warmup", "lr",
         "weight_decay", "seed", "precision", "data", "devices", "threads", "scan_k", "remat_policy", "scan_unroll",
         "xla_cpu_flags", "host_malloc", "attention_impl", "splash_layout", "init_from", "save_weights",
         "num_processes", "process_id", "coordinator", "task", "num_labels", "mask_impl", "slow_input",
         "no_preflight"}


def _varied() -> RunSpec:
    return RunSpec.of(framework="jax", strategy="scan-layers+remat+nodonate", remat_policy="dots-saveable",
                      scan_unroll=2, threads=3, host_malloc="system", devices=2, num_processes=2, coordinator="h:1",
                      trace_dir="/t", repeat=1, model=ModelConfig(layers=3), train=TrainConfig(batch=4))


def test_the_flat_form_of_a_spec_is_the_one_earlier_records_hold():
    flat = _varied().flat()
    assert set(flat) - {"model", "train"} == FLAT_KEYS | ADDED
    assert all(later(ID_FIELDS[k]) for k in ADDED)  # declared so: runs made before them keep their ids
    assert flat["strategy"] == "scan-layers+remat+nodonate" and flat["model"]["layers"] == 3
    assert (flat["devices"], flat["threads"], flat["trace_dir"]) == (2, 3, "/t")


def test_both_forms_read_back_to_the_same_spec():
    spec = _varied()
    sectioned = json.loads(json.dumps(spec.to_dict()))  # as the worker and a record read it
    assert sectioned["version"] == 2 and sectioned["strategy"]["modifiers"] == ["remat", "nodonate"]
    assert sectioned["launch"] == {"devices": 2, "num_processes": 2, "process_id": -1, "coordinator": "h:1"}
    assert RunSpec.from_dict(sectioned) == spec == RunSpec.from_dict(json.loads(json.dumps(spec.flat())))
    assert hash(RunSpec.from_dict(sectioned)) == hash(spec)  # the modifiers read back as a tuple again
    assert flat_spec(sectioned) == spec.flat() and flat_spec(spec.flat()) == spec.flat()
    assert flat_spec(None) == {} and flat_spec("jit") == {}


def test_a_spec_dict_that_is_not_one_is_refused():
    with pytest.raises(TypeError, match="gpus"):
        RunSpec.from_dict({"model": {}, "train": {}, "gpus": 2})  # flat
    with pytest.raises(TypeError):
        RunSpec.from_dict({**RunSpec().to_dict(), "gpus": 2})  # sectioned
    with pytest.raises(ValueError, match="spec version 9"):
        RunSpec.from_dict({**RunSpec().to_dict(), "version": 9})
    with pytest.raises(TypeError, match="no field 'gpus'"):
        RunSpec().evolve(gpus=2)


def test_the_strategy_is_parsed_once():
    st = StrategySpec.named("compile+bf16+remat", remat_policy="full")
    assert (st.base, st.modifiers, st.name) == ("compile", ("bf16", "remat"), "compile+bf16+remat")
    assert st.mods == Modifiers(bf16=True, remat=True)
    moved = st.with_name("jit+bucket")
    assert (moved.name, moved.mods.length, moved.remat_policy) == ("jit+bucket", "bucket", "full")
    spec = RunSpec.of(strategy="eager+bf16").evolve(attention_impl="chunked")
    assert spec.strategy.name == "eager+bf16" and spec.strategy.attention_impl == "chunked"


def test_flags_and_their_help_are_read_off_the_declarations():
    assert set(OVERRIDABLE) == FLAGS | ADDED
    assert (OVERRIDABLE["lr"], OVERRIDABLE["no_preflight"], OVERRIDABLE["coordinator"]) == (float, bool, str)
    assert [n for n in FIELDS if not FLAG_HELP.get(n) and n in OVERRIDABLE] == []
    assert FLAG_HELP["attention_impl"].startswith("JAX attention: 'default'")
    assert FLAG_HELP["layers"].startswith("override the preset's layers")
    described = {f.name for cls in (ModelConfig, TrainConfig, StrategySpec, RunSpec) for f in fields(cls)
                 if is_declared(f) and doc(f)}
    assert {"family", "base", "modifiers", "framework", "repeat"} <= described  # not flags, still described


def test_a_declared_choice_is_checked_naming_its_flag():
    with pytest.raises(SpecError, match="--host-malloc: unknown value 'jemalloc'; allowed: tuned, system"):
        validate(from_preset("tiny", {"host_malloc": "jemalloc"}))
    with pytest.raises(SpecError, match="--compile-cache: unknown value 'hot'"):
        validate(from_preset("tiny").evolve(compile_cache="hot"))
