"""The JSON Schema of a record, generated from the typed :class:`~twinbench.record.Record` (its msgspec structs,
``msgspec.json.schema``), published as docs/record.schema.json.

``python -m twinbench.record_schema [PATH]`` writes it (default: stdout). It is the schema of the current
``schema_version``: a record in sections. Records of earlier versions (flat, ``schema_version`` 1 or none) are
not described by it; the loader (``record.read_records``) migrates them on read. The schema requires what every
record has (``status``, ``run.framework``, ``run.strategy``) and types every other field; it allows fields it does
not name, as the reader does, so a record of a later twinbench validates against an earlier schema.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from twinbench.record import SCHEMA_VERSION, Record


def json_schema() -> dict[str, Any]:
    """The record's JSON Schema (``draft 2020-12``), its ``schema_version`` in ``x-schema-version``."""
    schema = msgspec.json.schema(Record)
    defs = schema.pop("$defs")
    top = defs.pop("Record")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "x-schema-version": SCHEMA_VERSION,
            **top, "description": "One twinbench run: a line of results.jsonl (docs/records.md).", "$defs": defs}


def text() -> str:
    return json.dumps(json_schema(), indent=1, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    if argv:
        Path(argv[0]).write_text(text())
    else:
        sys.stdout.write(text())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
