"""The published JSON Schema of a record (docs/record.schema.json) is the typed Record's, the records twinbench
writes validate against it, and the records it wrote before (flat, schema version 1) migrate into it."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from twinbench import record_schema
from twinbench.record import FLAT, SCHEMA_VERSION, Record, for_spec, load, read_records
from twinbench.spec import RunSpec

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
PUBLISHED = ROOT / "docs" / "record.schema.json"


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    schema = json.loads(PUBLISHED.read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def test_the_published_schema_is_the_typed_record_s():
    assert PUBLISHED.read_text() == record_schema.text(), (
        "docs/record.schema.json is stale: python -m twinbench.record_schema docs/record.schema.json")
    assert json.loads(PUBLISHED.read_text())["x-schema-version"] == SCHEMA_VERSION


def test_records_a_run_writes_validate(validator):
    # a tiny compare (torch eager, jax jit) as twinbench writes it: tests/fixtures/record_schema/README.md
    records = [json.loads(line) for line in (FIXTURES / "record_schema" / "results.jsonl").read_text().splitlines()]
    assert {(r["run"]["framework"], r["status"]) for r in records} == {("torch", "ok"), ("jax", "ok")}
    for r in records:
        assert r["schema_version"] == SCHEMA_VERSION
        validator.validate(r)


@pytest.mark.parametrize("status", ["failed", "skipped"])
def test_records_of_runs_that_did_not_measure_validate(validator, status):
    spec = RunSpec.of(framework="jax", strategy="jit+remat")
    rec = for_spec(spec, status, error="RuntimeError: out of memory (worker.py:1)", threads=2)
    validator.validate(json.loads(json.dumps(rec.to_dict())))


def test_records_of_earlier_versions_migrate_whole(validator):
    # every field a flat record of schema version 1 had has a place in the sections: nothing is lost on read
    top = set(Record.__struct_fields__)
    for path in sorted((FIXTURES / "records_before").glob("*.json")):
        for run, reduced in json.loads(path.read_text()).items():
            lost = set(reduced["fields"]) - set(FLAT) - top
            assert not lost, f"{path.name} {run}: fields no section holds {sorted(lost)}"
    old = FIXTURES / "record_schema" / "results_v1.jsonl"
    flat = [json.loads(line) for line in old.read_text().splitlines()]
    records, bad = read_records(old)
    assert bad == 0 and len(records) == len(flat) == 2
    for before, rec in zip(flat, records, strict=True):
        assert rec.schema_version == SCHEMA_VERSION
        now = rec.flat()
        assert {k: now[k] for k in before} == {k: v for k, v in before.items() if k != "schema_version"} | {
            "schema_version": SCHEMA_VERSION}  # the flat view gives back every value
        assert all(now[k] is None for k in set(now) - set(before))  # a field added since: not measured then
        validator.validate(json.loads(json.dumps(rec.to_dict())))
        assert load(json.loads(json.dumps(rec.to_dict()))) == rec  # written and read again: the same record


@pytest.mark.parametrize(("section", "change", "why"), [
    ("run", {"repeat": "eight"}, "'eight' is not of type 'integer'"),
    ("timing", {"step_ms": [1.0]}, "is not valid under any of the given schemas"),
    ("loss", {"losses": {"0": 1.0}}, "is not of type 'array'"),
])
def test_a_record_of_the_wrong_shape_does_not_validate(validator, section, change, why):
    rec = json.loads(json.dumps(for_spec(RunSpec(), "ok").to_dict()))
    rec[section] |= change
    with pytest.raises(jsonschema.ValidationError, match=why):
        validator.validate(rec)


def test_a_record_missing_a_required_field_does_not_validate(validator):
    rec = json.loads(json.dumps(for_spec(RunSpec(), "ok").to_dict()))
    del rec["run"]["framework"]
    with pytest.raises(jsonschema.ValidationError, match="'framework' is a required property"):
        validator.validate(rec)


def test_a_record_s_spec_decodes_to_the_run_spec_that_made_it_in_either_layout():
    """``Record.run_spec``: the spec of a record of either layout (flat, version 1; sections) decodes, and the run
    ids computed from it again are the ones the record holds; a spec that is no spec decodes to None."""
    from twinbench.record import as_record

    fixtures = FIXTURES / "record_schema"
    for name in ("results.jsonl", "results_v1.jsonl"):
        records, _ = read_records(fixtures / name, [])
        assert records
        for r in records:
            spec = r.run_spec()
            assert spec is not None and (spec.framework, spec.strategy.name) == (r.run.framework, r.run.strategy)
            assert (spec.run_id(), spec.config_id()) == (r.run.run_id, r.run.config_id)
    for hostile in ({"model": 3}, {"strategy": {"base": "jit", "modifiers": 7}, "version": 2}, {"gpus": 2}, {}):
        assert as_record({"framework": "jax", "strategy": "jit", "status": "ok", "spec": hostile}).run_spec() is None
