"""A results file of valid records is read within the host's memory: its record count is bounded."""

from __future__ import annotations

from pathlib import Path

import pytest

from twinbench import record

LINE = (Path(__file__).resolve().parent / "fixtures" / "record_schema" / "results.jsonl").read_text().splitlines()[0]


def test_a_file_of_more_records_than_the_host_keeps_is_refused_in_one_line(tmp_path, monkeypatch):
    f = tmp_path / "results.jsonl"
    f.write_text((LINE + "\n") * 5)
    monkeypatch.setattr(record, "max_records", lambda: 5)
    assert len(record.read_records(f)[0]) == 5
    monkeypatch.setattr(record, "max_records", lambda: 4)
    with pytest.raises(record.NotResults, match=r"over 4 records; a typed record takes up to 16 KiB"):
        record.read_records(f)


def test_the_bound_comes_from_the_hosts_memory():
    assert record.max_records() >= 10_000
