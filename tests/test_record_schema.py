"""The published JSON Schema of a record (docs/record.schema.json) is the Record dataclass's, and the records
twinbench writes, and wrote before, validate against it."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from twinbench import record_schema
from twinbench.record import SCHEMA_VERSION, Record
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


def test_the_published_schema_is_the_dataclass_s():
    assert PUBLISHED.read_text() == record_schema.text(), (
        "docs/record.schema.json is stale: python -m twinbench.record_schema docs/record.schema.json")
    assert json.loads(PUBLISHED.read_text())["x-schema-version"] == SCHEMA_VERSION


def test_records_a_run_writes_validate(validator):
    # a tiny compare (torch eager, jax jit) as twinbench writes it: tests/fixtures/record_schema/README.md
    records = [json.loads(line) for line in (FIXTURES / "record_schema" / "results.jsonl").read_text().splitlines()]
    assert {(r["framework"], r["status"]) for r in records} == {("torch", "ok"), ("jax", "ok")}
    for r in records:
        assert r["schema_version"] == SCHEMA_VERSION
        validator.validate(r)


@pytest.mark.parametrize("status", ["failed", "skipped"])
def test_records_of_runs_that_did_not_measure_validate(validator, status):
    spec = RunSpec.of(framework="jax", strategy="jit+remat")
    rec = Record.for_spec(spec, status, error="RuntimeError: out of memory (worker.py:1)", threads=2)
    validator.validate(json.loads(json.dumps(rec.to_dict())))


def test_records_of_earlier_versions_have_every_required_field():
    required = set(json.loads(PUBLISHED.read_text())["required"])
    named = set(json.loads(PUBLISHED.read_text())["properties"])
    for path in sorted((FIXTURES / "records_before").glob("*.json")):
        for run, reduced in json.loads(path.read_text()).items():
            fields = set(reduced["fields"])
            assert required <= fields, f"{path.name} {run}: lacks {sorted(required - fields)}"
            assert fields <= named, f"{path.name} {run}: fields the schema does not name {sorted(fields - named)}"


@pytest.mark.parametrize(("change", "why"), [
    ({"batch": "eight"}, "'eight' is not of type 'integer'"),
    ({"step_ms": [1.0]}, "is not valid under any of the given schemas"),
    ({"losses": {"0": 1.0}}, "is not of type 'array'"),
])
def test_a_record_of_the_wrong_shape_does_not_validate(validator, change, why):
    rec = json.loads(json.dumps(Record.for_spec(RunSpec(), "ok").to_dict())) | change
    with pytest.raises(jsonschema.ValidationError, match=why):
        validator.validate(rec)


def test_a_record_missing_a_required_field_does_not_validate(validator):
    rec = json.loads(json.dumps(Record.for_spec(RunSpec(), "ok").to_dict()))
    del rec["framework"]
    with pytest.raises(jsonschema.ValidationError, match="'framework' is a required property"):
        validator.validate(rec)
