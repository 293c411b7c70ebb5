from __future__ import annotations

import pytest
from spectower.storage.timeparse import parse_time

NOW = 1_764_000_000.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("now", NOW),
        ("-1h", NOW - 3600),
        ("-30m", NOW - 1800),
        ("-7d", NOW - 7 * 86400),
        ("now-90s", NOW - 90),
        ("1764000000", 1_764_000_000.0),
        ("2025-11-24T16:00:00Z", 1_764_000_000.0),
        ("2025-11-24T17:00:00+01:00", 1_764_000_000.0),
        ("2025-11-24 16:00:00", 1_764_000_000.0),  # naive = UTC
    ],
)
def test_parse_time(text: str, expected: float) -> None:
    assert parse_time(text, "--start", now=NOW) == expected


@pytest.mark.parametrize("bad", ["", "yesterday", "-1x", "2025-13-01", "nan"])
def test_bad_time_names_the_field(bad: str) -> None:
    with pytest.raises(ValueError, match="--end"):
        parse_time(bad, "--end", now=NOW)
