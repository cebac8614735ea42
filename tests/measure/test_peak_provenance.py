"""A run's peak says where it came from: a figure older than this install is the machine's shared cache's,
never passed off as this checkout's own measurement (measure/peak_cache.py ``provenance``)."""

from __future__ import annotations

from datetime import UTC, datetime

from twinbench.measure.peak_cache import cache_note, cache_path, installed_at, provenance

AT = "2026-12-07T21:10:00+00:00"
T = datetime.fromisoformat(AT).timestamp()


def test_a_peak_measured_before_the_install_says_it_is_reused_from_the_shared_cache():
    text = provenance(AT, now=T + 28.6 * 60, installed=T + 60)
    assert text == ("measured 2026-12-07 21:10 UTC, 28.6 min ago, before this twinbench was installed: reused from "
                    "the machine's shared peak cache")
    assert provenance(AT, now=T + 120, installed=T - 60) == "measured 2026-12-07 21:10 UTC, 2.0 min ago"
    assert str(cache_path()) in cache_note() and "--remeasure" in cache_note()


def test_the_install_time_is_read_from_the_package_metadata():
    got = installed_at()
    assert got is not None and 0 < got <= datetime.now(UTC).timestamp()
