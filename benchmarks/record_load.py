"""CPU time to load 10,000 records through the loader, with msgspec (what twinbench uses) and with pydantic v2.

The records are the two a tiny compare writes (tests/fixtures/record_schema/results.jsonl), replicated to
10,000 lines, in both layouts: the flat one of schema version 1 (migrated on read) and the sections of version
2. Each library is timed three ways: the whole loader (JSON parsed, the gate of ``record.check_record``, the
typed record built), the typed record built from dicts already parsed and checked (the library's share), and a
direct typed decode of the version-2 line (no gate: what the library alone would give). The pydantic models
are made from the msgspec structs field by field (same names, types, defaults), so both check the same thing.

    PYTHONPATH=src python benchmarks/record_load.py [N]

CPU seconds (``time.process_time``), best of 3 repeats.
"""

from __future__ import annotations

import copy
import json
import sys
import time
import types
import typing
from pathlib import Path
from typing import Any

import msgspec
import pydantic

from twinbench import record
from twinbench.record_sections import FLAT, OPAQUE, SECTIONS, Record

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "record_schema" / "results.jsonl"


def pydantic_model() -> type[pydantic.BaseModel]:
    """The Record, its sections and its typed analyses as pydantic models (from the msgspec structs' fields)."""
    made: dict[type, type[pydantic.BaseModel]] = {}

    def ptype(t: Any) -> Any:  # an annotation with every msgspec struct in it made a pydantic model
        if isinstance(t, type) and issubclass(t, msgspec.Struct):
            if t not in made:
                made[t] = model(t)
            return made[t]
        args = typing.get_args(t)
        if not args:
            return t
        args = tuple(ptype(a) for a in args)
        if typing.get_origin(t) in (types.UnionType, typing.Union):
            return typing.Union[args]  # noqa: UP007
        return typing.get_origin(t)[args if len(args) > 1 else args[0]]

    def model(cls: type) -> type[pydantic.BaseModel]:
        hints = typing.get_type_hints(cls)
        fields: dict[str, Any] = {}
        for f in msgspec.structs.fields(cls):
            t = ptype(hints[f.name])
            if f.default is not msgspec.NODEFAULT:
                fields[f.name] = (t, f.default)
            elif f.default_factory is not msgspec.NODEFAULT:
                fields[f.name] = (t, pydantic.Field(default_factory=f.default_factory))
            else:
                fields[f.name] = (t, ...)
        return pydantic.create_model("P" + cls.__name__, **fields)

    return ptype(Record)


def group(d: dict[str, Any]) -> dict[str, Any]:
    """A checked flat record grouped into sections, as ``Record.from_flat`` does before msgspec converts it."""
    parts: dict[str, Any] = {s: {} for s in SECTIONS}
    for name, v in d.items():
        where = FLAT.get(name)
        if where is not None:
            parts[where[0]][where[1]] = v
    return {k: d[k] for k in ("status", "error", "warnings", *OPAQUE, "spec") if k in d} | parts


def cpu(fn: Any, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def main(n: int) -> None:
    flat_lines = [line.encode() for line in FIXTURE.read_text().splitlines()]
    typed = [record.load(json.loads(x)) for x in flat_lines]
    v2_lines = [msgspec.json.encode(r.to_dict()) for r in typed]
    flat = (flat_lines * (n // len(flat_lines) + 1))[:n]
    v2 = (v2_lines * (n // len(v2_lines) + 1))[:n]
    model = pydantic_model()

    def msgspec_loader(lines: list[bytes]) -> None:
        for raw in lines:
            assert isinstance(record.load(record._parse(raw)), Record)

    def pydantic_loader(lines: list[bytes]) -> None:
        for raw in lines:
            d = json.loads(raw)
            if d.get("schema_version", 0) >= 2:
                d = record._flatten(d)
            assert record.check_record(d) is None
            model.model_validate(group(d))

    checked = [record.load(json.loads(x)).to_dict() for x in v2]
    rows = [
        ("whole loader, flat v1 lines", cpu(lambda: msgspec_loader(flat)), cpu(lambda: pydantic_loader(flat))),
        ("whole loader, v2 lines", cpu(lambda: msgspec_loader(v2)), cpu(lambda: pydantic_loader(v2))),
        ("typed record from checked dicts", cpu(lambda: [msgspec.convert(copy.copy(d), Record) for d in checked]),
         cpu(lambda: [model.model_validate(d) for d in checked])),
        ("direct typed decode of v2 lines", cpu(lambda: [msgspec.json.decode(x, type=Record) for x in v2]),
         cpu(lambda: [model.model_validate_json(x) for x in v2])),
    ]
    print(f"{n} records, CPU seconds (best of 3): msgspec {msgspec.__version__}, pydantic {pydantic.VERSION}")
    print("| what | msgspec | pydantic |\n|---|---|---|")
    for what, a, b in rows:
        print(f"| {what} | {a:.3f} | {b:.3f} |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000)
