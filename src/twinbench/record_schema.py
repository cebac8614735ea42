"""The JSON Schema of a record, generated from the :class:`~twinbench.record.Record` dataclass (pydantic's
``TypeAdapter``), published as docs/record.schema.json.

``python -m twinbench.record_schema [PATH]`` writes it (default: stdout). The schema requires the fields every
record has carried since the first version and types every other one; it allows fields it does not name, as the
reader does (``read_records``), so a record of a later twinbench validates against an earlier schema.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from twinbench.record import SCHEMA_VERSION, Record


def json_schema() -> dict[str, Any]:
    """The record's JSON Schema (``draft 2020-12``), its ``schema_version`` in ``x-schema-version``."""
    from pydantic import TypeAdapter

    schema = TypeAdapter(Record).json_schema()
    schema.pop("description", None)  # the dataclass has no docstring of its own: pydantic would print its signature
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "x-schema-version": SCHEMA_VERSION,
            "description": "One twinbench run: a line of results.jsonl (docs/records.md).", **schema}


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
